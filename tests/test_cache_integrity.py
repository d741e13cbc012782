"""The disk cache degrades instead of failing, cannot be poisoned, loads no one else's code, is bounded,
and bounds its lock waits.

Real gradients run in subprocesses (a fresh process is what reads the cache), each reporting its gradients,
how many times ``opt`` ran and the ``CacheWarning``s it saw. Oracles are hand-written derivatives.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from pyjlad import cache
from pyjlad.errors import CacheLockTimeout, CacheWarning, SettingError
from pyjlad.objcheck import InvalidObject, check_llvm_module
from pyjlad.toolchain import Toolchain, find_opt, locate

ROOT = Path(__file__).resolve().parent.parent
X = np.linspace(0.0, 1.0, 7)
EXPECTED = {"f": np.cos(X) - X * np.sin(X), "g": 3.0 * X**2}

GRADIENTS = textwrap.dedent("""
    import json, os, resource, sys, warnings
    limit = os.environ.get("TEST_FILE_SIZE_LIMIT")
    if limit:  # a file-size limit (ulimit -f): writes beyond it fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(limit), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    import numpy as np
    import pyjlad
    from pyjlad import toolchain
    from pyjlad.errors import CacheWarning

    runs = []
    real_run = toolchain.Toolchain.run

    def counted(self, *args, **kwargs):
        runs.append(1)
        return real_run(self, *args, **kwargs)

    toolchain.Toolchain.run = counted

    def f(x):
        return np.sum(np.cos(x) * x)

    def g(x):
        return np.sum(x * x * x)

    x = np.linspace(0.0, 1.0, 7)
    result = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in sys.argv[1].split(","):
            try:
                result[name] = pyjlad.gradient({"f": f, "g": g}[name], x.copy()).tolist()
            except pyjlad.PyjladError as exc:
                result[name] = f"{type(exc).__name__}: {exc}"
    result["opt_runs"] = len(runs)
    result["warnings"] = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    print(json.dumps(result))
""")

VALID_IR = b"define double @twice(double %x) {\n  %y = fadd double %x, %x\n  ret double %y\n}\n"


def _env(directory: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYJLAD_GRADIENT_CACHE_DIR"] = str(directory)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("PYJLAD_DISABLE_DISK_CACHE", None)
    env.update(extra)
    return env


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "gradients.py"
    path.write_text(GRADIENTS)
    return path


def _gradients(tmp_path: Path, directory: Path, names: str, **extra: str) -> dict:
    """Run GRADIENTS in a fresh process with the cache at ``directory``."""
    out = subprocess.run([sys.executable, str(_script(tmp_path)), names], env=_env(directory, **extra),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _assert_correct(result: dict, names: str) -> None:
    for name in names.split(","):
        assert isinstance(result[name], list), result[name]
        np.testing.assert_allclose(result[name], EXPECTED[name], rtol=1e-12, atol=1e-12)


def _files(directory: Path, pattern: str) -> list[Path]:
    return sorted(directory.rglob(pattern)) if directory.exists() else []


def _payload(path: Path) -> bytes:
    return path.read_bytes()[len(cache.entries.MAGIC) + cache.entries.MAC_BYTES:]


def _is_bitcode(path: Path) -> bool:
    return _payload(path)[:4] == b"BC\xc0\xde"


@pytest.fixture
def cache_dir(monkeypatch, tmp_path) -> Path:
    directory = tmp_path / "cache"
    monkeypatch.setattr(cache, "cache_dir", lambda: directory)
    monkeypatch.delenv("PYJLAD_DISABLE_DISK_CACHE", raising=False)
    monkeypatch.delenv("PYJLAD_CACHE_MAX_BYTES", raising=False)
    monkeypatch.delenv("PYJLAD_LOCK_TIMEOUT", raising=False)
    return directory


def _cache_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


# --- degrades, never blocks -------------------------------------------------------------------------------------


def test_size_limited_cache_degrades_to_memory_with_one_warning(tmp_path: Path) -> None:
    """Every write fails with EFBIG (a 4 KiB file-size limit): gradients still work, one warning, no leftovers."""
    directory = tmp_path / "cache"
    result = _gradients(tmp_path, directory, "f,g", TEST_FILE_SIZE_LIMIT="4096")
    _assert_correct(result, "f,g")
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "cannot be written" in result["warnings"][0] and "EFBIG" in result["warnings"][0]
    assert _files(directory, "*.tmp") == [] and _files(directory, "*.bin") == []


def _private_mounts_work() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    with tempfile.TemporaryDirectory() as point:
        probe = subprocess.run(["unshare", "-rm", "mount", "-t", "tmpfs", "pyjlad-probe", point],
                               capture_output=True)
    return probe.returncode == 0


needs_private_mounts = pytest.mark.skipif(
    not _private_mounts_work(), reason="needs unprivileged mount namespaces (unshare -rm) to mount a tmpfs"
)


def _in_private_tmpfs(tmp_path: Path, size: str, steps: list[str]) -> list[dict]:
    """Mount a tmpfs of ``size`` at tmp_path/mnt in a private mount namespace, run ``steps`` (shell lines,
    ``RUN names`` runs GRADIENTS with the cache in the tmpfs); return each RUN's result."""
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = _script(tmp_path)
    lines = ["set -e", f"mount -t tmpfs -o size={size},mode=0700 pyjlad-test {mount}"]
    for step in steps:
        if step.startswith("RUN "):
            lines.append(f"{sys.executable} {script} {step[4:]}")
        else:
            lines.append(step.replace("MNT", str(mount)))
    out = subprocess.run(["unshare", "-rm", "sh", "-c", "\n".join(lines)], env=_env(mount / "gradients"),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


@needs_private_mounts
def test_full_cache_degrades_to_memory_with_one_warning(tmp_path: Path) -> None:
    """A 12 KiB file system holds the key, then every entry write fails with ENOSPC."""
    (result,) = _in_private_tmpfs(tmp_path, "12k", ["RUN f,g", "ls -aR MNT > MNT/../listing.txt || true"])
    _assert_correct(result, "f,g")
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "ENOSPC" in result["warnings"][0]
    listing = (tmp_path / "listing.txt").read_text()
    assert ".tmp" not in listing and ".bin" not in listing, listing


@needs_private_mounts
def test_read_only_cache_degrades_and_still_serves_its_entries(tmp_path: Path) -> None:
    """Populated, then remounted read-only: the cached gradient loads without Enzyme, a new one is built
    in memory with one warning (EROFS)."""
    first, second = _in_private_tmpfs(tmp_path, "16m", ["RUN f", "mount -o remount,ro MNT", "RUN f,g"])
    _assert_correct(first, "f")
    assert first["warnings"] == [] and first["opt_runs"] >= 1
    _assert_correct(second, "f,g")
    assert second["opt_runs"] >= 1  # g only: f came from the read-only cache
    assert len(second["warnings"]) == 1 and "EROFS" in second["warnings"][0], second["warnings"]


def test_temporary_files_are_private_and_follow_no_planted_link(cache_dir: Path, tmp_path: Path) -> None:
    """Links planted at the names the old writer used (``.KEY.PID.tmp``) are never written through."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    key = cache.cache_key("temporary files")
    shard = cache_dir / key[:2]
    shard.mkdir(parents=True)
    for name in (f".{key}.{os.getpid()}.tmp", f".{key}.bin.{os.getpid()}.tmp"):
        (shard / name).symlink_to(victim)
    cache.put(key, b"payload")
    assert victim.read_text() == "precious"
    entry = shard / f"{key}.bin"
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE((cache_dir / "secret.key").stat().st_mode) == 0o600
    assert cache.get(key) == b"payload"


# --- cannot be poisoned -------------------------------------------------------------------------------------------


def test_signed_entry_with_bad_contents_is_rebuilt_and_reported_once(cache_dir: Path) -> None:
    built = []

    def build() -> bytes:
        built.append(1)
        return VALID_IR

    keys = [cache.cache_key("bad contents", str(k)) for k in range(2)]
    for key in keys:
        cache.put(key, b"define double @twice(double %x) {\n  %y = fadd", check=None)  # signed, truncated
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get_or_build(keys[0], build, check=check_llvm_module) == VALID_IR
        assert cache.get(keys[1], check=check_llvm_module) is None
    assert len(built) == 1
    (message,) = _cache_warnings(caught)
    assert "invalid contents" in message and "LLVM cannot parse" in message
    assert [w.filename for w in caught if issubclass(w.category, CacheWarning)] == [__file__]  # the caller's line
    assert not (cache_dir / keys[1][:2] / f"{keys[1]}.bin").exists()  # removed, not retried for ever
    assert cache.get_or_build(keys[0], build, check=check_llvm_module) == VALID_IR
    assert len(built) == 1
    with pytest.raises(InvalidObject):
        cache.put(keys[1], b"\x7fELF garbage", check=check_llvm_module)


def _resign(directory: Path, path: Path, payload: bytes, monkeypatch) -> None:
    """Store ``payload`` under ``path``'s key, correctly signed with the directory's own secret."""
    with monkeypatch.context() as m:
        m.setattr(cache, "cache_dir", lambda: directory)
        cache.put(path.stem, payload)


def test_damaged_entries_of_a_real_gradient_are_rebuilt(tmp_path: Path, monkeypatch) -> None:
    directory = tmp_path / "cache"
    cold = _gradients(tmp_path, directory, "f")
    _assert_correct(cold, "f")
    (bitcode,) = [p for p in _files(directory, "*.bin") if _is_bitcode(p)]
    (machine_code,) = [p for p in _files(directory, "*.bin") if not _is_bitcode(p)]
    good_bitcode, good_object = _payload(bitcode), _payload(machine_code)

    # The machine code's ELF section table pointed past its end (lengths in the entry header still agree).
    damaged = bytearray(good_object)
    elf = damaged.index(b"\x7fELF")
    damaged[elf + 0x28:elf + 0x30] = (len(damaged) * 4).to_bytes(8, "little")  # e_shoff
    _resign(directory, machine_code, bytes(damaged), monkeypatch)
    result = _gradients(tmp_path, directory, "f")
    _assert_correct(result, "f")
    assert result["opt_runs"] == 0  # rebuilt from the (good) bitcode entry
    assert len(result["warnings"]) == 1 and "ELF section-header table" in result["warnings"][0]
    assert _payload(machine_code) == good_object

    # Enzyme's output truncated, the machine code gone: Enzyme runs again.
    _resign(directory, bitcode, good_bitcode[: len(good_bitcode) // 2 & ~3], monkeypatch)
    machine_code.unlink()
    result = _gradients(tmp_path, directory, "f")
    _assert_correct(result, "f")
    assert result["opt_runs"] >= 1
    assert len(result["warnings"]) == 1 and "LLVM cannot read the bitcode" in result["warnings"][0]
    check_llvm_module(_payload(bitcode))

    warm = _gradients(tmp_path, directory, "f")
    _assert_correct(warm, "f")
    assert warm["opt_runs"] == 0 and warm["warnings"] == []


def _fake_opt(tmp_path: Path, truncate: str, runs: str = "*,enzyme,*") -> Path:
    """An ``opt`` that runs the real one and exits 0 with its output cut to 1000 bytes (``always``, or
    ``once``: the first run only) in the runs whose arguments match the shell pattern ``runs`` (by default the
    differentiations; ``*-S*``: the steps before Enzyme, which print IR text)."""
    real = find_opt()
    assert real is not None
    fake = tmp_path / "fake-bin" / "opt"
    fake.parent.mkdir()
    marker = tmp_path / "fake-bin" / "truncated-once"
    fake.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        case "$1" in --version) exec {real} "$@";; esac
        out=$(mktemp)
        {real} "$@" > "$out"
        case "$*" in {runs}) cut=yes;; *) cut=no;; esac
        if [ $cut = yes ] && {{ [ {truncate} = always ] || [ ! -e {marker} ]; }}; then
            touch {marker}
            head -c 1000 "$out"
        else
            cat "$out"
        fi
        rm -f "$out"
        exit 0
    """))
    fake.chmod(0o755)
    return fake


def test_truncated_opt_output_is_never_stored(tmp_path: Path) -> None:
    directory = tmp_path / "cache"
    always = _gradients(tmp_path, directory, "f", PYJLAD_OPT=str(_fake_opt(tmp_path, "always")))
    assert always["f"].startswith("EnzymeError: opt reported success twice but its output"), always["f"]
    assert "not a valid LLVM module" in always["f"]
    assert _files(directory, "*.bin") == []

    shutil.rmtree(tmp_path / "fake-bin")
    once = _gradients(tmp_path, directory, "f", PYJLAD_OPT=str(_fake_opt(tmp_path, "once")))
    _assert_correct(once, "f")
    assert len(once["warnings"]) == 1 and "invalid freshly built result" in once["warnings"][0]
    (bitcode,) = [p for p in _files(directory, "*.bin") if _is_bitcode(p)]
    check_llvm_module(_payload(bitcode))

    warm = _gradients(tmp_path, directory, "f")  # the real opt: same toolchain identity, same entry
    _assert_correct(warm, "f")
    assert warm["opt_runs"] == 0 and warm["warnings"] == []


def test_truncated_ir_text_before_enzyme_is_run_again_or_refused(tmp_path: Path) -> None:
    # the steps before Enzyme (small loops unrolled) print IR text that is not cached: a cut output that still
    # parses would lose the function (a crash at the call); checked, run once more, refused if cut twice
    directory = tmp_path / "cache"
    always = _gradients(tmp_path, directory, "f", PYJLAD_OPT=str(_fake_opt(tmp_path, "always", "*-S*")))
    assert always["f"].startswith("EnzymeError: opt reported success twice but its output"), always["f"]
    assert _files(directory, "*.bin") == []

    shutil.rmtree(tmp_path / "fake-bin")
    once = _gradients(tmp_path, directory, "f", PYJLAD_OPT=str(_fake_opt(tmp_path, "once", "*-S*")))
    _assert_correct(once, "f")
    assert once["warnings"] == []


# --- is not a code loader for others -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o770, 0o707])
def test_cache_dir_writable_by_group_or_others_is_refused(cache_dir: Path, mode: int) -> None:
    key = cache.cache_key("shared directory")
    cache.put(key, b"planted by anyone")
    before = {p: p.read_bytes() for p in cache_dir.rglob("*") if p.is_file()}
    cache_dir.chmod(mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get(key) is None
        assert cache.get_or_build(key, lambda: b"built here") == b"built here"
        assert cache.get_or_build(cache.cache_key("other"), lambda: b"other") == b"other"
    (message,) = _cache_warnings(caught)
    assert "group or others may write" in message and str(cache_dir) in message
    assert {p: p.read_bytes() for p in cache_dir.rglob("*") if p.is_file()} == before


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_cache_dir_of_another_user_is_refused(cache_dir: Path) -> None:
    key = cache.cache_key("foreign directory")
    cache.put(key, b"payload")
    os.chown(cache_dir, 65534, 65534)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.get(key) is None
        assert cache.get_or_build(key, lambda: b"built here") == b"built here"
    (message,) = _cache_warnings(caught)
    assert "owned by uid 65534" in message
    cli = subprocess.run([sys.executable, "-m", "pyjlad", "cache", "clear"], capture_output=True, text=True,
                         env=_env(cache_dir))
    assert cli.returncode == 1 and "not clearing" in cli.stderr
    assert (cache_dir / key[:2] / f"{key}.bin").exists()


def test_entries_writable_by_others_foreign_or_linked_are_ignored(cache_dir: Path, tmp_path: Path) -> None:
    keys = [cache.cache_key("entry", str(k)) for k in range(3)]
    for key in keys:
        cache.put(key, b"genuine")
    paths = [cache_dir / key[:2] / f"{key}.bin" for key in keys]
    paths[0].chmod(0o666)
    elsewhere = tmp_path / "elsewhere.bin"
    shutil.copy(paths[1], elsewhere)  # correctly signed, but reached through a link
    paths[1].unlink()
    paths[1].symlink_to(elsewhere)
    if os.geteuid() == 0:
        os.chown(paths[2], 65534, 65534)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [cache.get_or_build(key, lambda: b"rebuilt") for key in keys]
    assert results == [b"rebuilt", b"rebuilt", b"rebuilt" if os.geteuid() == 0 else b"genuine"]
    assert len(_cache_warnings(caught)) == 1
    assert not paths[1].is_symlink() and cache.get(keys[1]) == b"rebuilt"
    assert stat.S_IMODE(paths[0].stat().st_mode) == 0o600


def test_planted_and_copied_entries_are_ignored_and_rebuilt(tmp_path: Path) -> None:
    """f's compiled code put in place of g's entries (same cache) or copied into another user's cache
    (another secret) is never run: g gets g's gradient, f is rebuilt."""
    directory = tmp_path / "cache"
    _assert_correct(_gradients(tmp_path, directory, "f"), "f")
    f_entries = {_is_bitcode(p): p.read_bytes() for p in _files(directory, "*.bin")}
    _assert_correct(_gradients(tmp_path, directory, "g"), "g")
    g_paths = {_is_bitcode(p): p for p in _files(directory, "*.bin") if p.read_bytes() not in f_entries.values()}
    assert sorted(g_paths) == [False, True]
    for is_bitcode, path in g_paths.items():
        path.write_bytes(f_entries[is_bitcode])  # a planted entry, signed for f's key
    planted = _gradients(tmp_path, directory, "g")
    _assert_correct(planted, "g")
    assert planted["opt_runs"] >= 1 and len(planted["warnings"]) == 1
    assert "signature does not match" in planted["warnings"][0]

    other = tmp_path / "other-cache"
    for path in _files(directory, "*.bin"):
        target = other / path.relative_to(directory)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.copy(path, target)
    other.chmod(0o700)
    copied = _gradients(tmp_path, other, "f")
    _assert_correct(copied, "f")
    assert copied["opt_runs"] >= 1


def test_secret_key_is_private_and_replaced_when_others_can_read_it(cache_dir: Path) -> None:
    key = cache.cache_key("secret")
    cache.put(key, b"payload")
    secret = cache_dir / "secret.key"
    first = secret.read_bytes()
    assert len(first) == 32 and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700  # created by pyjlad, for this user only
    assert stat.S_IMODE((cache_dir / key[:2]).stat().st_mode) == 0o700
    secret.chmod(0o644)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert cache.get(key) is None  # signed with a key others could read: proves nothing
        assert cache.get_or_build(key, lambda: b"rebuilt") == b"rebuilt"
    assert secret.read_bytes() != first and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert cache.get(key) == b"rebuilt"


def test_toolchain_identity_hashes_the_plugin_bytes(tmp_path: Path) -> None:
    """The identity follows the plugin's bytes, not the install-time stamp beside it."""
    real = locate()
    plugin = tmp_path / real.plugin.name
    shutil.copy(real.plugin, plugin)
    stamp = real.plugin.with_suffix(".json")
    if stamp.exists():
        shutil.copy(stamp, plugin.with_suffix(".json"))
    before = Toolchain(opt=real.opt, plugin=plugin).identity
    assert hashlib.sha256(plugin.read_bytes()).hexdigest() in before
    with open(plugin, "ab") as fh:
        fh.write(b"\0modified after install")
    after = Toolchain(opt=real.opt, plugin=plugin).identity
    assert after != before
    assert hashlib.sha256(plugin.read_bytes()).hexdigest() in after


# --- is bounded ------------------------------------------------------------------------------------------------


def test_least_recently_used_entries_are_evicted_beyond_the_cap(cache_dir: Path, monkeypatch) -> None:
    entry_size = len(cache.entries.MAGIC) + cache.entries.MAC_BYTES + 1000
    monkeypatch.setenv("PYJLAD_CACHE_MAX_BYTES", str(3 * entry_size + 100))
    keys = {name: cache.cache_key("lru", name) for name in "ABCD"}
    paths = {name: cache_dir / key[:2] / f"{key}.bin" for name, key in keys.items()}
    for name in "ABC":
        cache.put(keys[name], name.encode() * 1000)
    now = time.time()
    for age, name in ((300, "A"), (200, "B"), (100, "C")):
        os.utime(paths[name], (now - age, now - age))
    assert cache.get(keys["A"]) == b"A" * 1000  # a hit makes A the most recently used
    assert paths["A"].stat().st_mtime > paths["C"].stat().st_mtime
    cache.put(keys["D"], b"D" * 1000)
    assert {name for name, path in paths.items() if path.exists()} == {"A", "C", "D"}
    assert not paths["B"].with_suffix(".lock").exists()
    assert sum(p.stat().st_size for p in cache_dir.rglob("*.bin")) <= 3 * entry_size + 100


def test_cli_cache_info_and_clear(cache_dir: Path) -> None:
    for k in range(3):
        cache.put(cache.cache_key("cli", str(k)), bytes(100 * (k + 1)))
    with pytest.raises(RuntimeError):
        cache.get_or_build(cache.cache_key("cli", "failed"), lambda: (_ for _ in ()).throw(RuntimeError()))
    total = sum(p.stat().st_size for p in cache_dir.rglob("*.bin"))
    env = _env(cache_dir, PYJLAD_CACHE_MAX_BYTES="123456789")

    def cli(action: str) -> str:
        out = subprocess.run([sys.executable, "-m", "pyjlad", "cache", action], capture_output=True, text=True,
                             env=env)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def fields(report: str) -> dict[str, str]:
        return {name: value.split(" (")[0] for name, value in (line.split(": ", 1) for line in report.splitlines())}

    assert fields(cli("info")) == {"path": str(cache_dir), "entries": "3", "bytes": str(total), "cap": "123456789"}
    assert "removed 3 entries" in cli("clear")
    assert _files(cache_dir, "*.bin") == [] and _files(cache_dir, "*.lock") == []
    assert (cache_dir / "secret.key").exists()
    assert fields(cli("info"))["entries"] == "0"


def test_bad_settings_are_errors_before_anything_is_built(cache_dir: Path, monkeypatch) -> None:
    """A typo in a cache setting is a SettingError when the cache is opened (never silently the default);
    nothing is built or written first."""
    built = []
    for name, bad in (("PYJLAD_CACHE_MAX_BYTES", "2 gigs"), ("PYJLAD_LOCK_TIMEOUT", "soon")):
        with monkeypatch.context() as m:
            m.setenv(name, bad)
            with pytest.raises(SettingError, match=f"{name}='{bad}' is not"):
                cache.get_or_build(cache.cache_key("settings"), lambda: built.append(1) or b"x")
    assert built == [] and _files(cache_dir, "*.bin") == []


# --- lock waits are bounded; dead processes leave nothing that blocks -------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pyjlad import cache
    cache.cache_dir = lambda: Path(sys.argv[1])

    def build():
        print("building", flush=True)
        time.sleep(600)
        return b"never"

    cache.get_or_build(sys.argv[2], build)
""")


def test_lock_wait_times_out_naming_the_lock_file_and_a_dead_holder_frees_it(cache_dir: Path,
                                                                              monkeypatch) -> None:
    key = cache.cache_key("held")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(cache_dir), key], env=_env(cache_dir),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "building"
        monkeypatch.setenv("PYJLAD_LOCK_TIMEOUT", "0.5")
        with pytest.raises(CacheLockTimeout) as info:
            cache.get_or_build(key, lambda: b"mine")
        lock_file = cache_dir / key[:2] / f"{key}.lock"
        assert str(lock_file) in str(info.value) and "PYJLAD_LOCK_TIMEOUT" in str(info.value)
        if Path("/proc/locks").exists():
            assert f"held by process {holder.pid}" in str(info.value)
        assert isinstance(info.value, TimeoutError)
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding the lock, mid-build
        holder.wait()
    monkeypatch.setenv("PYJLAD_LOCK_TIMEOUT", "60")
    assert cache.get_or_build(key, lambda: b"mine") == b"mine"
    assert cache.get(key) == b"mine"


KILLED_WRITER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from pyjlad import cache
    cache.cache_dir = lambda: Path(sys.argv[1])

    def die(*args):
        os.kill(os.getpid(), signal.SIGKILL)  # the temporary file is written, not yet renamed

    os.replace = die
    cache.put(sys.argv[2], b"x" * 100000)
""")


def test_writer_killed_before_its_rename_leaves_nothing_behind(cache_dir: Path) -> None:
    key = cache.cache_key("killed writer")
    out = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(cache_dir), key], env=_env(cache_dir))
    assert out.returncode == -signal.SIGKILL
    (orphan,) = _files(cache_dir, "*.tmp")
    assert orphan.stat().st_size == len(cache.entries.MAGIC) + cache.entries.MAC_BYTES + 100000
    assert cache.get(key) is None
    assert cache.get_or_build(key, lambda: b"built") == b"built"  # stores, then sweeps the dead writer's file
    assert _files(cache_dir, "*.tmp") == []
