"""Whether a file pyjlad would load or run may have been changed by someone other than the user.

The disk cache (machine code) and the toolchain (the Enzyme plugin ``opt`` loads) are code this
process runs; a file or directory that another user owns, or that group or others may write,
could have been replaced by anyone who can write there.
"""

from __future__ import annotations

import os
import stat

__all__ = ["foreign"]


def foreign(st: os.stat_result, *, root_ok: bool = False) -> str | None:
    """Why a file or directory with status ``st`` must not be trusted, or ``None``.

    Parameters
    ----------
    st : os.stat_result
        Its status (``os.stat``).
    root_ok : bool
        Also trust files owned by root (system-wide installs).

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     os.chmod(d, 0o777)
    ...     foreign(os.stat(d))
    'group or others may write to it (mode 777)'
    """
    if not hasattr(os, "geteuid"):  # no POSIX owners (Windows): nothing to check here
        return None
    uid = os.geteuid()
    if st.st_uid != uid and not (root_ok and st.st_uid == 0):
        return f"it is owned by uid {st.st_uid}, not by this user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others may write to it (mode {stat.S_IMODE(st.st_mode):o})"
    return None
