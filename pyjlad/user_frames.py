"""Warnings attributed to the user's code: the first frame outside pyjlad and Numba.

A warning's ``stacklevel`` counted by hand points inside pyjlad whenever the call path to it changes (a
transform calling another, a build from a cache miss or from Numba's compiler). :func:`warn_at_caller` walks
the stack instead, so the file and line Python prints are the user's.
"""

from __future__ import annotations

import os
import sys
import warnings

import numba

__all__ = ["warn_at_caller"]

#: Directories whose frames are never the user's: pyjlad's own and Numba's (a build started by its compiler).
_INTERNAL = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (sys.modules[__package__], numba))


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Issue ``message`` as ``category``, attributed to the first frame outside pyjlad and Numba.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_at_caller("a message", UserWarning)
    >>> caught[0].filename.endswith("user_frames.py")
    False
    """
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
