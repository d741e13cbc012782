"""pyjlad's environment settings are read and checked one way (pyjlad/config.py, docs/settings.md)."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

import pyjlad
from pyjlad import cache, config
from pyjlad.engines import embedded, pool
from pyjlad.errors import CacheWarning, SettingError, ToolchainError

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
        config.opt_timeout_s()
    monkeypatch.setenv("PYJLAD_OPT_TIMEOUT", "12.5")
    assert config.opt_timeout_s() == 12.5


def test_opt_memory_is_bytes_and_caps_the_process(monkeypatch):
    import subprocess
    import sys

    from pyjlad.toolchain.runner import _limit_memory

    monkeypatch.setenv("PYJLAD_OPT_MEMORY", "lots")
    with pytest.raises(ToolchainError, match="PYJLAD_OPT_MEMORY='lots'"):
        config.opt_memory_bytes()
    monkeypatch.delenv("PYJLAD_OPT_MEMORY")
    assert config.opt_memory_bytes() >= 2 << 30
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _limit_memory(child.pid, 3 << 30)
        limits = open(f"/proc/{child.pid}/limits").read()
        assert re.search(rf"Max address space\s+{3 << 30}\s+{3 << 30}\s+bytes", limits), limits
    finally:
        child.kill()
        child.wait()


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
        config.opt_timeout_s()
    assert isinstance(info.value, ToolchainError) and isinstance(info.value, ToolchainSettingError)
    monkeypatch.setenv("PYJLAD_OPT", "/nonexistent/opt")
    with pytest.raises(SettingError, match="PYJLAD_OPT='/nonexistent/opt' is not an executable file") as info:
        find_opt()
    assert isinstance(info.value, ToolchainError)


@pytest.mark.parametrize("value, on", [("", False), ("0", False), ("off", False), ("No", False), ("1", True),
                                       ("true", True), (" YES ", True), ("on", True)])
def test_disable_disk_cache_reads_the_usual_switch_words(monkeypatch, value, on):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", value)
    assert cache.settings.disabled() is on


@pytest.mark.parametrize("bad", ["2", "yes please", "disable"])
def test_disable_disk_cache_typo_is_an_error(monkeypatch, bad):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", bad)
    with pytest.raises(SettingError, match=f"PYJLAD_DISABLE_DISK_CACHE='{bad}' is not a switch"):
        cache.settings.disabled()


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

    src = toolchain.paths.toolchain_dir()
    monkeypatch.setenv("PYJLAD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PYJLAD_ENZYME_PLUGIN", raising=False)
    monkeypatch.setattr(toolchain.locator, "_located", {})
    dest = toolchain.paths.toolchain_dir()
    shutil.copytree(src, dest)
    assert toolchain.locate().plugin == dest / "LLVMEnzyme-15.so"  # the user's own copy is used
    toolchain.locator.forget()
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


# --- one place: pyjlad/config.py reads every PYJLAD_* setting, and the docs list each ---------------------------

PACKAGE = Path(pyjlad.__file__).parent
_SETTING_NAME = re.compile(r"PYJLAD_[A-Z0-9_]+")
#: config.py's generic readers: a module that calls them reads a setting by name, which only config.py does.
_READERS = {"byte_count", "seconds", "flag", "_text", "_named"}


def _docstrings(tree: ast.AST) -> set[int]:
    """``id`` of every docstring node in ``tree`` (module, class and function docstrings)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def setting_names_in_code(source: str) -> set[str]:
    """Every string constant in ``source``'s code (docstrings and messages aside) that is a setting's name:
    ``os.environ.get("PYJLAD_X")``, ``os.getenv("PYJLAD_X")``, ``NAME = "PYJLAD_X"`` passed on to a reader."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
            and _SETTING_NAME.fullmatch(node.value)}


def environment_reads(source: str) -> list[int]:
    """Lines that read the environment (``os.environ``, ``os.getenv``, ``environ.get``) with a ``PYJLAD_`` name
    written in the same expression, however it is spelled."""
    tree = ast.parse(source)
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Call, ast.Subscript, ast.Compare)):
            text = ast.unparse(node)
            if re.search(r"\b(environ|getenv)\b", text) and "PYJLAD_" in text:
                lines.append(node.lineno)
    return lines


def reader_calls(source: str) -> set[str]:
    """config's generic readers ``source`` calls: as ``config.byte_count(...)`` or imported from pyjlad's
    config (``from ..config import byte_count``)."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name: alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.level > 0 and node.module == "config"
                for alias in node.names if alias.name in _READERS}
    called = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "config" \
                and func.attr in _READERS:
            called.add(func.attr)
        elif isinstance(func, ast.Name) and func.id in imported:
            called.add(imported[func.id])
    return called


def test_the_scan_sees_every_way_a_setting_is_read() -> None:
    source = (
        "import os\n"
        "def a():\n"
        '    """Reads ``PYJLAD_DOC`` (a docstring is not a read)."""\n'
        '    return os.environ.get("PYJLAD_A")\n'
        'NAME = "PYJLAD_B"\n'
        "def b():\n"
        "    return byte_count(NAME, 1)\n"
        "def c():\n"
        "    return os.getenv('PYJLAD_' + 'C')\n"
        'def d():\n'
        '    raise ValueError(f"set PYJLAD_D=1 to {0}")\n'
    )
    assert setting_names_in_code(source) == {"PYJLAD_A", "PYJLAD_B"}
    assert environment_reads(source) == [4, 9]
    assert not reader_calls(source)  # byte_count here is no import of pyjlad's config
    assert reader_calls("from ..config import seconds as s\nfrom .. import config\n"
                        "s('PYJLAD_X', 1.0)\nconfig.flag('PYJLAD_Y')\n_named('z')\n") == {"seconds", "flag"}
    assert not environment_reads('raise E("set the PYJLAD_ENGINE environment variable")\n')


def test_only_config_reads_pyjlad_settings() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "config.py":
            continue
        source = path.read_text()
        where = f"pyjlad/{path.relative_to(PACKAGE).as_posix()}"
        offenders += [f"{where}: names {name}" for name in sorted(setting_names_in_code(source))]
        offenders += [f"{where}:{line}: reads the environment" for line in environment_reads(source)]
        offenders += [f"{where}: calls config.{name}" for name in sorted(reader_calls(source))]
    assert not offenders, "read PYJLAD_* settings through a function of pyjlad/config.py:\n  " + "\n  ".join(offenders)


def _config_setting_names() -> set[str]:
    return setting_names_in_code((PACKAGE / "config.py").read_text())


def test_every_setting_is_documented_and_every_documented_setting_is_read() -> None:
    names = _config_setting_names()
    assert len(names) >= 12
    docs = (PACKAGE.parent / "docs" / "settings.md").read_text()
    table = set(re.findall(r"^\| `(PYJLAD_[A-Z0-9_]+)` \|", docs, re.MULTILINE))
    assert table == names, f"docs/settings.md's table lacks {names - table}, or lists unread {table - names}"
    readme = (PACKAGE.parent / "README.md").read_text()
    assert "docs/settings.md" in readme and "pyjlad/config.py" in readme
    assert not {name for name in names if f"`{name}`" not in readme}
    listed = readme.split("Every environment setting (", 1)[1].split(")", 1)[0]
    assert set(re.findall(r"`(PYJLAD_[A-Z0-9_]+)`", listed)) == names, "README's list of every setting is not"


def test_each_setting_has_its_own_documented_function() -> None:
    """One function per setting, its docstring naming the variable it reads."""
    functions = {name: fn for name, fn in vars(config).items()
                 if callable(fn) and getattr(fn, "__module__", None) == "pyjlad.config" and not name.startswith("_")
                 and name not in ("byte_count", "seconds", "flag")}
    for setting in _config_setting_names():
        readers = [name for name, fn in functions.items() if f"``{setting}``" in (fn.__doc__ or "").split(":")[0]]
        assert len(readers) == 1, (setting, readers)


def test_settings_are_read_at_use_not_at_import(monkeypatch) -> None:
    """Each function reads the environment when called: a change is seen at the next call."""
    monkeypatch.setenv("PYJLAD_ENGINE", "julia")
    assert config.engine_name() == "julia"
    monkeypatch.delenv("PYJLAD_ENGINE")
    assert config.engine_name() == "embedded"
    monkeypatch.setenv("PYJLAD_OPT", "")
    assert config.opt_override() is None
    monkeypatch.setenv("PYJLAD_OPT", "/x/opt")
    assert config.opt_override() == "/x/opt"
    monkeypatch.setenv("PYJLAD_JULIA_ALLOW_INSTALL", "yes")
    assert config.julia_allow_install() is False  # exactly "1", as before
    monkeypatch.setenv("PYJLAD_JULIA_ALLOW_INSTALL", "1")
    assert config.julia_allow_install() is True
