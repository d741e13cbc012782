"""Records every module the test suite exports and checks, when the session ends, that LLVM 15, 16,
19 and 22 all accept each of them (the all-functions portability check).

The check runs in the teardown of a session fixture, so that it covers what *this* process exported:
under ``pytest -n`` (pytest-xdist, as ``scripts/run-tests.sh`` runs the suite) every worker checks its
own share; a module one of them rejects is reported as an error at teardown and fails the run.
"""

from __future__ import annotations

import shutil
import subprocess

import numba
import pytest
from cases import EXPORTED

import pyjlad.export as export_module

LLVM_VERSIONS = (15, 16, 19, 22)
def portability_failures(modules: dict[str, str]) -> list[str]:
    """Return one line per (module, LLVM version) whose ``llvm-as`` rejects the module text."""
    failures: list[str] = []
    if not modules:
        return failures
    for version in LLVM_VERSIONS:
        tool = shutil.which(f"llvm-as-{version}")
        if tool is None:
            failures.append(f"llvm-as-{version} is not installed (bash scripts/setup.sh --tests)")
            continue
        for name, text in modules.items():
            result = subprocess.run([tool, "-o", "/dev/null", "-"], input=text, capture_output=True, text=True)
            if result.returncode != 0:
                failures.append(f"LLVM {version}, {name}: {result.stderr.strip()[:300]}")
    return failures


@pytest.fixture(autouse=True, scope="session")
def _record_exported_modules():
    original = export_module._export

    def recording(func, argtypes):
        exported = original(func, argtypes)
        EXPORTED[f"{exported.name}{argtypes}"] = exported.module.text
        return exported

    export_module._export = recording
    yield
    export_module._export = original
    failures = portability_failures(EXPORTED)
    assert not failures, "exported modules an LLVM version rejects:\n" + "\n".join(failures)


@pytest.fixture
def parallel_two_threads(parallel_on, monkeypatch: pytest.MonkeyPatch):
    """:func:`parallel_on` at 2 threads (fewer where Numba has fewer), each derivative built afresh (no disk cache:
    its key does not hold the parallel module)."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))


@pytest.fixture(scope="session")
def parallel_kernels():
    """benchmarks/parallel_gradients.py as a module: the kernels it measures, which the tests share."""
    from benchmark_modules import load

    return load("parallel_gradients.py")


@pytest.fixture
def parallel_on(monkeypatch: pytest.MonkeyPatch):
    """``PYJLAD_PARALLEL_DERIVATIVES=1`` for one test, and Numba's thread count restored after it
    (tests/test_parallel_*.py)."""
    monkeypatch.setenv("PYJLAD_PARALLEL_DERIVATIVES", "1")
    before = numba.get_num_threads()
    yield
    numba.set_num_threads(before)
