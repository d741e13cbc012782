"""The ``openmp-parallel-loops`` rewrite (pyjlad.openmp_loops) on hand-written IR in Numba's shape.

The rewritten module is checked by LLVM 15's assembler (Enzyme's LLVM) and run natively against
LLVM's OpenMP runtime: every row of the schedule is run exactly once, with Numba's arguments
(``args[j] + r * steps[j]``, ``count[0] = 1``), at 1, 2 and 3 threads. Calls of another shape are
left alone (the caller falls back to the serial derivative).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import llvmlite.binding as llvm
import numpy as np
import pytest

from pyjlad.openmp import load_libomp
from pyjlad.openmp_loops import (
    EXAMPLE,
    openmp_parallel_loops,
    parallel_call_count,
    unrecognized_parallel_calls,
)

# A gufunc that adds 1000 * count[0] + count[1] to out[row], row read from its (per-row offset) first argument.
KERNEL = """define void @kernel(ptr %args, ptr %dims, ptr %steps, ptr %data) {
entry:
  %a0 = load ptr, ptr %args, align 8
  %row = load i64, ptr %a0, align 8
  %p1 = getelementptr ptr, ptr %args, i64 1
  %out = load ptr, ptr %p1, align 8
  %n = load i64, ptr %dims, align 8
  %d1p = getelementptr i64, ptr %dims, i64 1
  %d1 = load i64, ptr %d1p, align 8
  %slot = getelementptr i64, ptr %out, i64 %row
  %old = load i64, ptr %slot, align 8
  %t = mul i64 %n, 1000
  %u = add i64 %t, %d1
  %new = add i64 %old, %u
  store i64 %new, ptr %slot, align 8
  %tid.omp = call i32 @omp_get_thread_num()
  ret void
}
"""

CALLER = """define i32 @run(ptr %rows, ptr %out, i64 %nrows, i64 %threads) {
entry:
  %args = alloca [2 x ptr], align 8
  %dims = alloca [2 x i64], align 8
  %steps = alloca [2 x i64], align 8
  store ptr %rows, ptr %args, align 8
  %a1 = getelementptr ptr, ptr %args, i64 1
  store ptr %out, ptr %a1, align 8
  store i64 %nrows, ptr %dims, align 8
  %d1 = getelementptr i64, ptr %dims, i64 1
  store i64 7, ptr %d1, align 8
  store i64 8, ptr %steps, align 8
  %s1 = getelementptr i64, ptr %steps, i64 1
  store i64 0, ptr %s1, align 8
  call void @numba_parallel_for(ptr nonnull @kernel, ptr %args, ptr %dims, ptr %steps, ptr null, i64 1, i64 2, i64 %threads)
  ret i32 0
}

declare void @numba_parallel_for(ptr, ptr, ptr, ptr, ptr, i64, i64, i64)
declare i32 @omp_get_thread_num()
"""


def test_example_rewritten_and_valid_llvm_15() -> None:
    text = openmp_parallel_loops(EXAMPLE)
    assert parallel_call_count(EXAMPLE) == 1 and unrecognized_parallel_calls(text) == 0
    assert "@numba_gil_ensure(ptr" not in text.split("declare")[0]  # the GIL release is dropped
    assert "call void @__kmpc_for_static_init_8(ptr @pyjlad.omp.loc, i32 %tid, i32 34" in text
    if shutil.which("llvm-as-15") is None:
        pytest.skip("llvm-as-15 is not installed")
    subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=text, text=True, check=True)


@pytest.mark.parametrize("call", [
    "call void @numba_parallel_for(ptr %fnptr, ptr %a, ptr %d, ptr %s, ptr null, i64 2, i64 2, i64 %n)",  # indirect
    "call void @numba_parallel_for(ptr nonnull @kernel, ptr %a, ptr %d, ptr %s, ptr null, i64 %k, i64 2, i64 %n)",
    "call void @numba_parallel_for(ptr nonnull @kernel, ptr %a, ptr %d, ptr %s, ptr null, i64 2, i64 2)",
])
def test_unrecognized_shapes_are_left_alone(call: str) -> None:
    text = EXAMPLE.replace(
        "call void @numba_parallel_for(ptr nonnull @kernel, ptr %a, ptr %d, ptr %s, ptr null, i64 2, i64 2, i64 %n)", call)
    assert openmp_parallel_loops(text) == text
    assert unrecognized_parallel_calls(openmp_parallel_loops(text)) == 1


def test_a_function_without_parallel_loops_is_unchanged() -> None:
    text = "define i32 @f(i32 %x) {\nentry:\n  ret i32 %x\n}\n"
    assert openmp_parallel_loops(text) == text


@pytest.mark.skipif(load_libomp() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed")
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("nrows", [1, 2, 5, 64])
def test_every_row_runs_once_with_numbas_arguments(threads: int, nrows: int) -> None:
    text = openmp_parallel_loops(KERNEL + CALLER)
    assert unrecognized_parallel_calls(text) == 0
    module = llvm.parse_assembly(text)
    module.verify()
    target = llvm.Target.from_default_triple().create_target_machine()
    engine = llvm.create_mcjit_compiler(module, target)
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        engine.get_function_address("run"))
    rows = np.arange(nrows, dtype=np.int64)
    out = np.zeros(nrows, dtype=np.int64)
    assert run(rows.ctypes.data, out.ctypes.data, nrows, threads) == 0
    np.testing.assert_array_equal(out, np.full(nrows, 1 * 1000 + 7))  # count[0] = 1, count[1] = dims[1]


@pytest.mark.parametrize("chosen", [None, "7"])
def test_workers_spin_one_millisecond_unless_the_user_chose(chosen: str | None) -> None:
    """Parked at once (``KMP_BLOCKTIME=0``, before), every parallel loop waited for the kernel to wake its workers;
    the user's own value wins. Read in a fresh process: the runtime reads it when it starts."""
    import os
    import sys

    from pyjlad.openmp import libomp_path

    if libomp_path() is None:
        pytest.skip("LLVM's OpenMP runtime (libomp5-15) is not installed")
    env = {k: v for k, v in os.environ.items() if k != "KMP_BLOCKTIME"}
    if chosen is not None:
        env["KMP_BLOCKTIME"] = chosen
    code = "import os; from pyjlad.openmp import load_libomp; assert load_libomp(); print(os.environ['KMP_BLOCKTIME'])"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == (chosen or "1")
