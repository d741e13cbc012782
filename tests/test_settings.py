"""pyjlad's environment settings are read and checked one way (pyjlad/settings.py, docs/settings.md)."""

from __future__ import annotations

import warnings

import pytest

import pyjlad
from pyjlad import cache
from pyjlad.engines import embedded, pool
from pyjlad.errors import CacheWarning, SettingError, ToolchainError
from pyjlad.toolchain import _opt_timeout_s

#: (variable, reader, default): settings of the computation, where a bad value is an error.
STRICT = [
    ("PYJLAD_POOL_BYTES", pool.capacity, 1 << 30),
    ("PYJLAD_STACK_BYTES", embedded._deep_stack_bytes, 1 << 30),
]


@pytest.mark.parametrize("name, read, default", STRICT, ids=[s[0] for s in STRICT])
@pytest.mark.parametrize("bad", ["lots", "-1", "1.5", "0x10"])
def test_bad_byte_counts_are_errors_naming_the_variable(monkeypatch, name, read, default, bad):
    monkeypatch.setenv(name, bad)
    with pytest.raises(SettingError, match=f"{name}='{bad}' is not a whole number of bytes .*{default}"):
        read()
    assert issubclass(SettingError, ValueError) and issubclass(SettingError, pyjlad.PyjladError)


@pytest.mark.parametrize("name, read, default", STRICT, ids=[s[0] for s in STRICT])
def test_byte_counts_unset_empty_and_set(monkeypatch, name, read, default):
    monkeypatch.delenv(name, raising=False)
    assert read() == default
    monkeypatch.setenv(name, "  ")
    assert read() == default
    monkeypatch.setenv(name, " 4096 ")
    assert read() == 4096


@pytest.mark.parametrize("bad", ["soon", "0", "-5", "nan", "inf"])
def test_opt_timeout_must_be_a_positive_number_of_seconds(monkeypatch, bad):
    monkeypatch.setenv("PYJLAD_OPT_TIMEOUT", bad)
    with pytest.raises(ToolchainError, match=f"PYJLAD_OPT_TIMEOUT='{bad}' is not a positive number of seconds"):
        _opt_timeout_s()
    monkeypatch.setenv("PYJLAD_OPT_TIMEOUT", "12.5")
    assert _opt_timeout_s() == 12.5


@pytest.mark.parametrize("name, read, default", [
    ("PYJLAD_CACHE_MAX_BYTES", cache.max_bytes, "2147483648"),
    ("PYJLAD_LOCK_TIMEOUT", cache.lock_timeout, "600"),
])
def test_cache_settings_are_errors_too_never_silently_the_default(monkeypatch, name, read, default):
    """One policy: a typo in the cache's settings is reported like any other, not replaced by the default."""
    monkeypatch.setenv(name, "-3 units")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # an error, not a warning
        with pytest.raises(SettingError, match=f"{name}='-3 units' is not .*e.g. {default}, the default"):
            read()


def test_bad_opt_settings_are_setting_errors_and_toolchain_errors(monkeypatch):
    from pyjlad.errors import ToolchainSettingError
    from pyjlad.toolchain import find_opt

    monkeypatch.setenv("PYJLAD_OPT_TIMEOUT", "abc")
    with pytest.raises(SettingError) as info:
        _opt_timeout_s()
    assert isinstance(info.value, ToolchainError) and isinstance(info.value, ToolchainSettingError)
    monkeypatch.setenv("PYJLAD_OPT", "/nonexistent/opt")
    with pytest.raises(SettingError, match="PYJLAD_OPT='/nonexistent/opt' is not an executable file") as info:
        find_opt()
    assert isinstance(info.value, ToolchainError)


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("off", False), ("No", False), ("1", True),
                                       ("true", True), (" YES ", True), ("on", True)])
def test_disable_disk_cache_reads_the_usual_switch_words(monkeypatch, value, on):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", value)
    assert cache._disabled() is on


@pytest.mark.parametrize("bad", ["2", "yes please", "disable"])
def test_disable_disk_cache_typo_is_an_error(monkeypatch, bad):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", bad)
    with pytest.raises(SettingError, match=f"PYJLAD_DISABLE_DISK_CACHE='{bad}' is not a switch"):
        cache._disabled()


def test_a_bad_cache_setting_stops_the_gradient_before_anything_is_built(monkeypatch):
    """Checked when the cache is opened: no Enzyme run is spent before the typo is reported."""
    from numba import njit

    from pyjlad import toolchain

    runs = []
    real = toolchain.Toolchain.run
    monkeypatch.setattr(toolchain.Toolchain, "run", lambda self, *a, **k: runs.append(1) or real(self, *a, **k))
    monkeypatch.delenv("PYJLAD_DISABLE_DISK_CACHE", raising=False)
    monkeypatch.setenv("PYJLAD_CACHE_MAX_BYTES", "2G")
    with pytest.raises(SettingError, match="PYJLAD_CACHE_MAX_BYTES='2G' is not a whole number of bytes"):
        pyjlad.gradient(njit(lambda x: x * x * 0.625), 3.0)
    assert runs == []


def test_a_plugin_others_could_replace_is_not_loaded(tmp_path, monkeypatch):
    """The installed Enzyme plugin is code opt runs: a group/other-writable copy is refused."""
    import os
    import shutil

    from pyjlad import toolchain

    src = toolchain._toolchain_dir()
    monkeypatch.setenv("PYJLAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYJLAD_ENZYME_PLUGIN", raising=False)
    monkeypatch.setattr(toolchain, "_located", {})
    dest = toolchain._toolchain_dir()
    shutil.copytree(src, dest)
    assert toolchain.locate().plugin == dest / "LLVMEnzyme-15.so"  # the user's own copy is used
    toolchain._located.clear()
    os.chmod(dest, 0o777)
    with pytest.raises(ToolchainError, match=r"does not load the Enzyme plugin .*group or others may write .*"
                                             r"chmod go-w"):
        toolchain.locate()
    os.chmod(dest, 0o755)
    os.chmod(dest / "LLVMEnzyme-15.so", 0o666)
    with pytest.raises(ToolchainError, match="mode 666"):
        toolchain.locate()


def test_an_opt_the_system_cannot_start_is_named_not_a_raw_oserror(tmp_path, monkeypatch):
    """An executable file that is no program (ENOEXEC) was a raw OSError from subprocess."""
    from numba import njit

    fake = tmp_path / "opt"
    fake.write_bytes(b"\x00\x01 not a program")
    fake.chmod(0o755)
    monkeypatch.setenv("PYJLAD_OPT", str(fake))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    with pytest.raises(SettingError, match=f"PYJLAD_OPT='{fake}' cannot be run .*unset it") as info:
        pyjlad.gradient(njit(lambda x: x * x * 0.375), 2.0)
    assert isinstance(info.value, ToolchainError)
