"""Every exception pyjlad raises is a :class:`pyjlad.PyjladError` and, where it was one before, still the
matching built-in (``except ValueError`` in user code keeps working).

Two checks: a static scan of pyjlad's source for a built-in exception constructed or raised directly
(the way a bare ``TypeError`` slips back in), and real misuse of the public API, whose exception must be
both a ``PyjladError`` and the built-in the documentation (docs/errors.md) promises.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numba import njit

import pyjlad
import pyjlad.cache
import pyjlad.ir
from pyjlad.errors import PyjladError
from pyjlad.ir.analysis import numba_entry
from pyjlad.objcheck import check_elf

PACKAGE = Path(pyjlad.__file__).parent

#: Built-in exception classes by name (``ValueError``, ``MemoryError``, ``SystemExit``, ...).
BUILTIN_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
)

#: (file relative to pyjlad/, built-in) pairs allowed to appear, each with its reason.
ALLOWED = {
    ("cli.py", "SystemExit"):
        "the command line's exit status and message (python -m pyjlad), not an error raised to a caller",
    ("engines/native_child.py", "SystemExit"):
        "the exit status of the child process that compiles machine code; it imports nothing of pyjlad",
    ("gpu/__init__.py", "AttributeError"):
        "the module's __getattr__ (PEP 562) must raise AttributeError for an unknown name, or hasattr and "
        "getattr with a default break",
    ("numba_calls/planned.py", "NotImplementedError"):
        "the abstract make_plan of the base class of the Numba types; every subclass overrides it",
    ("engines/native_child.py", "ValueError"):
        "raised in the child process, run as a script that imports nothing of pyjlad; the parent turns its "
        "failure into an EnzymeError with the child's stderr as diagnostics, so it never reaches the user",
}


def builtin_exceptions_in(path: Path) -> list[tuple[int, str]]:
    """``(line, name)`` for each built-in exception class ``path`` calls (constructs) or raises by name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BUILTIN_EXCEPTIONS:
            found.append((node.lineno, node.func.id))
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Name) and node.exc.id in BUILTIN_EXCEPTIONS:
            found.append((node.lineno, node.exc.id))
    return sorted(found)


def test_the_scan_finds_a_bare_builtin_exception(tmp_path: Path) -> None:
    """The scanner itself sees each way a built-in exception is raised or made."""
    source = tmp_path / "sample.py"
    source.write_text(
        "def f(x):\n"
        "    if x:\n"
        "        raise ValueError('bad')\n"
        "    raise KeyError\n"
        "def g():\n"
        "    return RuntimeError('made here, raised elsewhere')\n"
        "def h():\n"
        "    raise SomethingOfOurs('fine')\n"
    )
    assert builtin_exceptions_in(source) == [(3, "ValueError"), (4, "KeyError"), (6, "RuntimeError")]


def test_no_module_raises_a_bare_builtin_exception() -> None:
    offenders = []
    used_allowances = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for line, name in builtin_exceptions_in(path):
            if (relative, name) in ALLOWED:
                used_allowances.add((relative, name))
            else:
                offenders.append(f"pyjlad/{relative}:{line}: {name}")
    assert not offenders, (
        "raise a pyjlad.errors class (a PyjladError that also derives from the built-in) instead of:\n  "
        + "\n  ".join(offenders)
    )
    assert used_allowances == set(ALLOWED), f"stale allowances: {set(ALLOWED) - used_allowances}"


def _pyjlad_modules() -> list[Any]:
    modules = [pyjlad]
    for info in pkgutil.walk_packages(pyjlad.__path__, "pyjlad."):
        if info.name in ("pyjlad.__main__", "pyjlad.engines.native_child") or \
                info.name.startswith("pyjlad.interop."):
            continue  # __main__ runs the CLI; native_child is a script; interop needs JAX/PyTorch
        modules.append(importlib.import_module(info.name))
    return modules


def test_every_exception_class_pyjlad_defines_is_a_pyjlad_error() -> None:
    """A class of pyjlad's own (``InvalidObject``, ``IRParseError``, ...) is a PyjladError; warnings aside."""
    classes = {
        value
        for module in _pyjlad_modules()
        for _, value in inspect.getmembers(module, inspect.isclass)
        if value.__module__.startswith("pyjlad") and issubclass(value, BaseException)
    }
    assert len(classes) > 10
    stray = sorted(c.__qualname__ for c in classes if not issubclass(c, (PyjladError, Warning)))
    assert not stray


# --- real misuse of the public API ------------------------------------------------------------------------------


@njit
def _square_sum(x: np.ndarray) -> float:
    return float(np.sum(x * x))


@njit
def _scaled(x: np.ndarray, c: float) -> np.ndarray:
    return x * c


@njit
def _cube(a: float) -> float:
    return a * a * a


CASES: list[tuple[str, Callable[[], Any], type[BaseException], type[PyjladError], str]] = [
    ("jvp tangent of another shape", lambda: pyjlad.jvp(_scaled, (np.ones(3), 2.0), (np.ones(4), None)),
     ValueError, pyjlad.ArgumentError, "shape"),
    ("jvp with unequal primals and tangents", lambda: pyjlad.jvp(_scaled, (np.ones(3), 2.0), (np.ones(3),)),
     ValueError, pyjlad.ArgumentError, "entries"),
    ("vjp cotangent of another shape", lambda: pyjlad.vjp(_scaled, (np.ones(3), 2.0), np.ones(4)),
     ValueError, pyjlad.ArgumentError, "shape"),
    ("vjp with a bare array as primals", lambda: pyjlad.vjp(_square_sum, np.ones(3), 1.0),
     TypeError, pyjlad.ArgumentTypeError, "primals must be a tuple"),
    ("jvp complex tangent", lambda: pyjlad.jvp(_square_sum, (np.ones(2),), (np.ones(2) * 1j,)),
     TypeError, pyjlad.ArgumentTypeError, "complex"),
    ("jacobian mode", lambda: pyjlad.jacobian(_scaled, np.ones(2), 1.0, mode="sideways"),
     ValueError, pyjlad.ArgumentError, "mode"),
    ("hvp wrt out of range", lambda: pyjlad.hvp(_square_sum, (np.ones(2),), (np.ones(2),), wrt=3),
     TypeError, pyjlad.ArgumentTypeError, "wrt"),
    ("gradient wrt of the wrong type", lambda: pyjlad.gradient(_square_sum, np.ones(2), wrt="x"),
     TypeError, pyjlad.ArgumentTypeError, "wrt must be an int"),
    ("gradient of an array-valued function", lambda: pyjlad.gradient(_scaled, np.ones(2), 2.0),
     TypeError, pyjlad.UnsupportedFunctionError, "scalar"),
    ("autodiff mode", lambda: pyjlad.autodiff("sideways", _cube, pyjlad.Active(2.0)),
     ValueError, pyjlad.ArgumentError, "mode"),
    ("Active around an array", lambda: pyjlad.autodiff(pyjlad.Reverse, _square_sum, pyjlad.Active(np.ones(2))),
     TypeError, pyjlad.ArgumentTypeError, "Active wraps a float scalar"),
    ("shadow of another shape",
     lambda: pyjlad.autodiff(pyjlad.Reverse, _square_sum, pyjlad.Duplicated(np.ones(3), np.zeros(2))),
     ValueError, pyjlad.ArgumentError, "the shadow must be an ndarray of shape"),
    ("shadow that is the argument", lambda: _duplicated_onto_itself(),
     ValueError, pyjlad.ArgumentError, "shares memory"),
]


def _duplicated_onto_itself() -> Any:
    x = np.ones(3)
    return pyjlad.autodiff(pyjlad.Reverse, _square_sum, pyjlad.Duplicated(x, x))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_public_api_misuse_raises_a_pyjlad_error_that_is_also_the_builtin(case: tuple) -> None:
    _, call, builtin, pyjlad_class, words = case
    with pytest.raises(builtin, match=words) as info:
        call()
    assert isinstance(info.value, PyjladError)
    assert isinstance(info.value, pyjlad_class)


def test_the_functions_own_exception_surfaces_with_its_own_type() -> None:
    """An exception of the user's function is the user's, not pyjlad's: its type and message are kept."""

    class NegativeInput(ValueError):
        pass

    @njit
    def checked(x: np.ndarray) -> float:
        if x[0] < 0.0:
            raise NegativeInput("x[0] must be non-negative")
        return float(np.sum(x * x))

    with pytest.raises(NegativeInput, match="non-negative") as info:
        pyjlad.gradient(checked, np.array([-1.0, 2.0]))
    assert not isinstance(info.value, PyjladError)


_MODULE = """define double @f(double %x) {
  ret double %x
}

declare double @g(double)
"""

_INTERNAL = [
    ("IR line the parser cannot read", lambda: pyjlad.ir.parse("this is not LLVM IR\n"),
     ValueError, pyjlad.errors.IRParseError, "unknown top-level line"),
    ("function missing from a module", lambda: pyjlad.ir.parse(_MODULE).function("h"),
     KeyError, pyjlad.errors.IRLookupError, "h"),
    ("entry only declared", lambda: numba_entry(pyjlad.ir.parse(_MODULE), "g"),
     KeyError, pyjlad.errors.IRLookupError, "declared, not defined"),
    ("entry without Numba's parameters", lambda: numba_entry(pyjlad.ir.parse(_MODULE), "f"),
     ValueError, pyjlad.errors.IRError, "not a Numba ABI function"),
    ("object file that is not ELF", lambda: check_elf(b"not an object file"),
     ValueError, pyjlad.errors.InvalidObject, "no ELF magic"),
]


@pytest.mark.parametrize("case", _INTERNAL, ids=[c[0] for c in _INTERNAL])
def test_internal_errors_are_pyjlad_errors_too(case: tuple) -> None:
    """What pyjlad's own layers raise (on input a pyjlad defect would produce) is a PyjladError as well."""
    _, call, builtin, pyjlad_class, words = case
    with pytest.raises(builtin, match=words) as info:
        call()
    assert isinstance(info.value, PyjladError)
    assert isinstance(info.value, pyjlad_class)


def test_cache_clear_of_a_foreign_directory_is_both_kinds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pyjlad cache clear`` on a 'directory' that is a file: refused as a PermissionError and a PyjladError."""
    not_a_directory = tmp_path / "gradients"
    not_a_directory.write_text("a file")
    monkeypatch.setenv("PYJLAD_GRADIENT_CACHE_DIR", str(not_a_directory))
    with pytest.raises(PermissionError, match="not a directory") as info:
        pyjlad.cache.clear()
    assert isinstance(info.value, pyjlad.errors.CacheDirectoryError)


@pytest.mark.parametrize("disabled", ["0", "1"])
@pytest.mark.parametrize("use", [
    lambda key: pyjlad.cache.put(key, b"payload"),
    lambda key: pyjlad.cache.get(key),
    lambda key: pyjlad.cache.get_or_build(key, lambda: b"payload"),
], ids=["put", "get", "get_or_build"])
def test_a_bad_cache_key_is_both_kinds(use: Callable[[str], object], disabled: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Refused whether or not the cache is in use: a program that passed with the cache turned off
    (PYJLAD_DISABLE_DISK_CACHE=1) and failed with it on would surprise."""
    monkeypatch.setenv("PYJLAD_GRADIENT_CACHE_DIR", str(tmp_path / "gradients"))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", disabled)
    with pytest.raises(ValueError, match="SHA-256") as info:
        use("not-a-digest")
    assert isinstance(info.value, pyjlad.ArgumentError)


@pytest.mark.parametrize(("pyjlad_class", "builtin"), [
    (pyjlad.OutOfMemoryError, MemoryError),
    (pyjlad.DifferentiatedFunctionError, RuntimeError),
    (pyjlad.errors.MissingDependencyError, ImportError),
])
def test_errors_not_provoked_here_keep_their_builtin(pyjlad_class: type, builtin: type) -> None:
    """Errors that need an exhausted machine (test_odd_inputs runs that one in a subprocess), a pyjlad
    defect, or a missing package: ``except MemoryError`` and the like must still catch them."""
    assert issubclass(pyjlad_class, PyjladError)
    assert issubclass(pyjlad_class, builtin)


def test_readme_counts_the_rows_of_the_error_table() -> None:
    """README's count of docs/errors.md's cases is the table's (it said 71 of 72 once)."""
    rows = re.findall(r"^\| [0-9]+ \|", (PACKAGE.parent / "docs" / "errors.md").read_text(), re.MULTILINE)
    assert f"`docs/errors.md` lists {len(rows)} cases" in (PACKAGE.parent / "README.md").read_text()
