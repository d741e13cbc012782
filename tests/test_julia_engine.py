"""The Julia engine: everything on the Python side of the juliacall boundary, for real.

Julia itself cannot be installed on pyjlad's build machines; the tests that need
it are parametrized over engines and skip with the reason where it is missing.
"""

from __future__ import annotations

import ctypes
import importlib.abc
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from cases import CASES, Case
from numba import njit

import pyjlad
from pyjlad.engines import get_engine
from pyjlad.engines.julia import JULIA_PROJECT, array_spec, julia_module_text, julia_status
from pyjlad.export import export, numba_argtypes

JULIA_OK, JULIA_WHY = julia_status()
ENGINES = [
    "embedded",
    pytest.param("julia", marks=pytest.mark.skipif(not JULIA_OK, reason=f"Julia engine unavailable: {JULIA_WHY}")),
]


@njit
def _inverse_sum(a):
    return np.sum(np.linalg.inv(a))


_LLVMCALL_CASES = [*CASES, Case("lapack_inv", _inverse_sum, (np.eye(3) + 0.1,), 0, lambda a: None)]


@pytest.mark.parametrize("version", (15, 16, 19, 22))
@pytest.mark.parametrize("case", _LLVMCALL_CASES, ids=[c.name for c in _LLVMCALL_CASES])
def test_llvmcall_module_is_accepted_by_every_llvm(case: Case, version: int) -> None:
    """The exact text the Julia engine hands to llvmcall (Julia 1.12: LLVM 18), LAPACK loops linked in."""
    tool = shutil.which(f"llvm-as-{version}")
    if tool is None:
        pytest.skip(f"llvm-as-{version} is not installed")
    exported = export(case.func, numba_argtypes(case.args))
    text = julia_module_text(exported)
    if exported.module.links:
        assert "define linkonce_odr i32 @numba_xxgetrf.d" in text  # linked, not left to resolve
    assert "target triple" not in text and "target datalayout" not in text
    assert "declare void @pyjlad_NRT_MemInfo_call_dtor" not in text
    result = subprocess.run([tool, "-o", "/dev/null", "-"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    abi = json.loads(json.dumps(exported.abi.to_dict()))
    assert abi["entry"] in text and len(abi["params"]) == len(exported.abi.param_types)


@pytest.mark.parametrize("make", [
    lambda: np.arange(12.0),
    lambda: np.arange(12.0).reshape(3, 4),
    lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    lambda: np.arange(24.0).reshape(4, 6)[::2, 1::2],
    lambda: np.arange(12.0)[::-1],
    lambda: np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)[:, ::-1, ::2],
])
def test_array_spec_wraps_numpy_memory_without_copying(make) -> None:
    x = make()
    address, length, dtype, offset, shape, strides = array_spec(x)
    itemsize = x.itemsize
    # Rebuild the array the way Julia does, from the address alone.
    raw = (ctypes.c_char * (length * itemsize)).from_address(address)
    flat = np.frombuffer(raw, dtype=dtype)
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=shape, strides=[s * itemsize for s in strides])
    np.testing.assert_array_equal(view, x)
    assert np.shares_memory(flat, x)
    lo, hi = np.lib.array_utils.byte_bounds(x)
    assert address == lo and address + length * itemsize == hi


def test_julia_engine_reports_why_it_cannot_run() -> None:
    engine = get_engine("julia")
    ok, detail = engine.status()
    assert ok == JULIA_OK
    if not ok:
        assert "fix:" in detail
        with pytest.raises(pyjlad.EngineUnavailableError, match="Julia engine cannot run here"):
            pyjlad.gradient(lambda x: x * x, 2.0, engine="julia")


def test_engine_selection_by_environment(monkeypatch) -> None:
    monkeypatch.setenv("PYJLAD_ENGINE", "julia")
    from pyjlad.engines import default_engine_name

    assert default_engine_name() == "julia"
    if not JULIA_OK:
        with pytest.raises(pyjlad.EngineUnavailableError):
            pyjlad.gradient(lambda x: x * 3.0, 2.0)
    monkeypatch.setenv("PYJLAD_ENGINE", "llvm")
    assert pyjlad.gradient(lambda x: x * 3.0, 2.0) == 3.0
    monkeypatch.setenv("PYJLAD_ENGINE", "nonsense")
    with pytest.raises(pyjlad.EngineUnavailableError, match="unknown engine 'nonsense'"):
        pyjlad.gradient(lambda x: x * 3.0, 2.0)


def test_doctor_reports_the_julia_engine() -> None:
    out = subprocess.run([sys.executable, "-m", "pyjlad", "doctor"], capture_output=True, text=True)
    assert "engine julia" in out.stdout
    if not JULIA_OK:
        assert "fix:" in out.stdout.split("engine julia", 1)[1]


def test_bundled_julia_project_is_complete() -> None:
    project = (JULIA_PROJECT / "Project.toml").read_text()
    for needed in ('name = "PyJlad"', "Enzyme =", "[weakdeps]", "CUDA =", "[extensions]", "[compat]", "julia ="):
        assert needed in project
    assert (JULIA_PROJECT / "src" / "PyJlad.jl").is_file()
    assert (JULIA_PROJECT / "test" / "runtests.jl").is_file()
    assert (JULIA_PROJECT / "ext" / "PyJladCUDAExt.jl").is_file()
    pkg = json.loads((JULIA_PROJECT.parent / "juliapkg.json").read_text())
    assert pkg["packages"]["PyJlad"]["uuid"] in project


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", [c for c in CASES if c.name in ("scalar_math", "sin_x_dot_x", "two_arrays")],
                         ids=lambda c: c.name)
def test_engines_match_the_hand_derived_gradients(case: Case, engine: str) -> None:
    """Each engine against the analytic gradient (so both engines agree with each other to rounding)."""
    got = pyjlad.gradient(case.func, *case.args, wrt=case.wrt, engine=engine)
    expected = case.analytic(*case.args)
    got = got if isinstance(got, tuple) else (got,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-13)


# ----------------------------------------------------- starting Julia through juliacall


class _JuliacallThatCannotStart(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stands in for the juliacall package (not installable here) at import time only: records the
    environment juliacall would read its settings from, then fails the way PythonCall.jl does when Julia
    cannot start."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "juliacall" else None

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        self.seen.append(os.environ.get("PYTHON_JULIACALL_HANDLE_SIGNALS"))
        raise RuntimeError("PythonCall.jl did not start properly")


@pytest.fixture
def fake_juliacall(monkeypatch):
    import pyjlad.engines.julia as julia

    finder = _JuliacallThatCannotStart()
    monkeypatch.setattr(julia, "julia_status", lambda: (True, "test"))
    monkeypatch.setattr(julia, "_module", {})
    monkeypatch.delitem(sys.modules, "juliacall", raising=False)
    monkeypatch.delenv("PYTHON_JULIACALL_HANDLE_SIGNALS", raising=False)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    yield julia, finder
    sys.modules.pop("juliacall", None)


def test_juliacall_starts_julia_with_signal_handling_and_a_failure_is_not_retried(fake_juliacall) -> None:
    julia, finder = fake_juliacall
    with pytest.raises(pyjlad.EngineUnavailableError, match="import juliacall` before `import pyjlad`"):
        julia._pyjlad_julia()
    assert finder.seen == ["yes"]           # set before juliacall read it
    with pytest.raises(pyjlad.EngineUnavailableError, match="did not start properly"):
        julia._pyjlad_julia()
    assert finder.seen == ["yes"]           # cached: no second start


def test_a_users_juliacall_setting_is_kept(fake_juliacall, monkeypatch) -> None:
    julia, finder = fake_juliacall
    monkeypatch.setenv("PYTHON_JULIACALL_HANDLE_SIGNALS", "no")
    with pytest.raises(pyjlad.EngineUnavailableError):
        julia._pyjlad_julia()
    assert finder.seen == ["no"]
    assert julia.juliacall_environment({}, {"juliacall-handle-signals": "no"}) == {}


def test_the_julia_extra_needs_juliacall_0_9_22() -> None:
    """juliacall supports calls from any Python thread from 0.9.22 (PythonCall.jl docs/src/juliacall.md)."""
    pyproject = (JULIA_PROJECT.parents[1] / "pyproject.toml").read_text()
    assert 'julia = ["juliacall>=0.9.22"]' in pyproject


# ----------------------------------------------------- values Numba froze, changed between calls


class _JuliaStandIn:
    """Stands in for the PyJlad Julia module (Julia cannot be installed here): records each module text
    ``load_ir`` receives; its sweep computes nothing. What is tested is what the Python side sends."""

    def __init__(self) -> None:
        self.loaded: list[str] = []

    def load_ir(self, text: str, abi: str) -> int:
        self.loaded.append(text)
        return len(self.loaded)

    def sweep(self, function, mode, activities, args, shadows, seed):
        return 0.0, 0.0, ()


_SCALE = 2.71875  # exactly representable: LLVM prints it as 2.718750e+00


def _plain_scaled_sum(x):
    return np.sum(x) * _SCALE


@njit
def _jitted_scaled_sum(x):
    return np.sum(x) * _SCALE


@pytest.mark.parametrize("func", [_plain_scaled_sum, _jitted_scaled_sum], ids=["plain", "njit-recompiled"])
def test_julia_sweeps_load_the_values_of_now_after_a_global_changes(func, monkeypatch) -> None:
    """A plain function reads its globals at each call, and an ``@njit`` one after ``f.recompile()``: the Julia
    engine's sweep then loads a module exported from the new value (until 2026-12-07, a plain function's kept
    the value of its first build, as the embedded engine's did until 2026-12-06)."""
    import pyjlad.engines.julia as julia
    from pyjlad.activity import Activity
    from pyjlad.engines.base import Sweep

    stand_in = _JuliaStandIn()
    monkeypatch.setattr(julia, "_pyjlad_julia", lambda: stand_in)
    monkeypatch.setattr(julia, "to_julia", lambda jl, value: value)
    monkeypatch.setitem(globals(), "_SCALE", 2.71875)
    compiled = julia.JuliaCompiled(func, Sweep("ad", "reverse", (Activity.DIFF,)))
    x = np.ones(3)
    compiled((x,), (np.zeros(3),))
    compiled((x,), (np.zeros(3),))
    assert len(stand_in.loaded) == 1 and "2.718750e+00" in stand_in.loaded[0]  # built once while nothing changed
    monkeypatch.setitem(globals(), "_SCALE", 1.40625)
    if func is _jitted_scaled_sum:
        func.recompile()
    compiled((x,), (np.zeros(3),))
    assert len(stand_in.loaded) == 2
    assert "1.406250e+00" in stand_in.loaded[1] and "2.718750e+00" not in stand_in.loaded[1]
