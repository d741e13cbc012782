"""LLVM 15 without root on Debian and Ubuntu: Debian's packages downloaded and unpacked into pyjlad's cache.

``apt-get download`` (which needs no root) fetches the packages ``llvm-15``,
``libllvm15`` and ``libz3-4`` from the system's own package sources;
``dpkg-deb -x`` unpacks them into a private folder (nothing is installed, no
``dpkg`` database is touched), and ``patchelf`` gives the programs and
``libLLVM-15`` a run path inside that folder, so ``opt``, ``llc``,
``llvm-link`` and ``llvm-dis`` run from there with no environment settings.
Libraries the unpacked programs still miss (``libedit``, ``libxml2`` on a
minimal system) are fetched the same way where a package is known for them;
otherwise the error names them and the package to ask an administrator for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..errors import ToolchainError
from .paths import cache_root

__all__ = ["PACKAGES", "llvm_root", "installed_opt", "can_download", "install_llvm"]

#: The packages that hold LLVM 15's programs and the libraries only they need.
PACKAGES = ("llvm-15", "libllvm15", "libz3-4")
#: Shared libraries a minimal system may lack, and the packages that provide them (and what those need).
_FALLBACK_PACKAGES = {
    "libedit.so.2": ("libedit2", "libbsd0", "libmd0"),
    "libxml2.so.2": ("libxml2",),
    "libffi.so.8": ("libffi8",),
    "libtinfo.so.6": ("libtinfo6",),
}
_TOOLS = ("opt", "llc", "llvm-link", "llvm-dis", "llvm-as")
#: Where the unpacked tree keeps its libraries, relative to the tree.
_LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu")


def llvm_root() -> Path:
    """The folder the packages are unpacked into (per user, beside the Enzyme plugin's folder)."""
    return cache_root() / "toolchain" / "llvm-15-debian"


def installed_opt() -> Path | None:
    """``opt`` of an unpacked LLVM 15, if this route installed one."""
    opt = llvm_root() / "usr" / "lib" / "llvm-15" / "bin" / "opt"
    return opt if opt.is_file() and os.access(opt, os.X_OK) else None


def can_download() -> bool:
    """Whether this system can fetch Debian packages without root (``apt-get`` and ``dpkg-deb`` present)."""
    return shutil.which("apt-get") is not None and shutil.which("dpkg-deb") is not None


def _run(command: list[str], cwd: Path | None = None, show: bool = False) -> str:
    """Run ``command``; its output, or a ToolchainError with its stderr. ``show``: its output goes to the
    terminal instead (apt-get's download progress), when there is one."""
    shown = show and sys.stdout.isatty()
    try:
        done = subprocess.run(command, cwd=cwd, stdout=None if shown else subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolchainError(f"cannot run {command[0]}: {exc}") from None
    if done.returncode != 0:
        raise ToolchainError(f"`{' '.join(command)}` failed (exit {done.returncode}):\n{done.stderr[-1500:]}")
    return done.stdout or ""


def _download(packages: tuple[str, ...], into: Path, tree: Path, log: Callable[[str], None]) -> None:
    for k, package in enumerate(packages, 1):  # one at a time: a progress line each
        log(f"[{k}/{len(packages)}] apt-get download {package}")
        _run(["apt-get", "download", package], cwd=into, show=True)
    for deb in sorted(into.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(tree)])
        deb.unlink()


def _missing_libraries(tree: Path) -> set[str]:
    """Shared libraries ``opt`` (and ``libLLVM-15``) cannot find, as the dynamic loader reports them."""
    opt = tree / "usr" / "lib" / "llvm-15" / "bin" / "opt"
    out = _run(["ldd", str(opt)])
    return {line.split()[0] for line in out.splitlines() if "not found" in line}


def _set_run_paths(tree: Path, patchelf: Path) -> None:
    """Run paths inside ``tree``: the programs find ``libLLVM-15``, and it finds ``libz3`` and the rest."""
    from_bin = ":".join(f"$ORIGIN/../../../../{d}" for d in _LIBRARY_DIRS)
    for tool in _TOOLS:
        path = tree / "usr" / "lib" / "llvm-15" / "bin" / tool
        if path.is_file():
            _run([str(patchelf), "--set-rpath", from_bin, str(path)])
    from_lib = ":".join(["$ORIGIN", f"$ORIGIN/../../../{_LIBRARY_DIRS[1]}"])
    library = tree / _LIBRARY_DIRS[0] / "libLLVM-15.so.1"
    if not library.is_file():
        raise ToolchainError(f"the package libllvm15 did not provide {library.name} (unpacked into {tree})")
    _run([str(patchelf), "--set-rpath", from_lib, str(library)])


def install_llvm(patchelf: Path, log: Callable[[str], None]) -> Path:
    """Download and unpack LLVM 15 into :func:`llvm_root`; return its ``opt``.

    Raises
    ------
    ToolchainError
        When a package cannot be downloaded (no package source has it, no
        network) or ``opt`` still misses libraries, naming what to install.
    """
    root = llvm_root()
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".llvm-15-", dir=root.parent) as tmp:
        downloads, tree = Path(tmp) / "debs", Path(tmp) / "tree"
        downloads.mkdir()
        log(f"downloading LLVM 15 from Debian's packages ({', '.join(PACKAGES)}) into {root}, without root")
        _download(PACKAGES, downloads, tree, log)
        _set_run_paths(tree, patchelf)
        missing = _missing_libraries(tree)
        extra = tuple(dict.fromkeys(p for lib in missing for p in _FALLBACK_PACKAGES.get(lib, ())))
        if extra:
            log(f"{', '.join(sorted(missing))} missing here: downloading {', '.join(extra)} too")
            _download(extra, downloads, tree, log)
            _set_run_paths(tree, patchelf)
            missing = _missing_libraries(tree)
        if missing:
            raise ToolchainError(
                f"LLVM 15's opt, unpacked without root into {root}, still misses {', '.join(sorted(missing))}: "
                "ask an administrator to install the packages that provide them (apt-get install llvm-15 "
                "installs everything)")
        if root.exists():
            shutil.rmtree(root)
        os.replace(tree, root)
    opt = installed_opt()
    if opt is None:
        raise ToolchainError(f"the package llvm-15 did not provide opt (unpacked into {root})")
    _run([str(opt), "--version"])
    return opt
