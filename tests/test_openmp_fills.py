"""Large fills and copies of a parallel derivative split between its threads (pyjlad.openmp_fills).

The helpers are run as the rewrite leaves them (LLVM's OpenMP runtime, Numba's thread count) on buffers with
guard bytes, at sizes around the threshold and not divisible by the thread count; whole gradients whose
shadows and tapes are that large are checked against closed forms at every thread count.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest
from numba import njit, prange

from pyjlad.openmp import load_libomp
from pyjlad.openmp_fills import THRESHOLD, parallel_fills
from tests.parallel_checks import parallel_grad
from tests.test_parallel_derivatives import stencil

pytestmark = pytest.mark.skipif(load_libomp() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed")

THREADS = tuple(t for t in (1, 2, 3) if t <= numba.config.NUMBA_NUM_THREADS)
SIZES = (THRESHOLD - 1, THRESHOLD, THRESHOLD + 13, 3 * THRESHOLD + 5)
GUARD = 64

SOURCE = """
define void @fill(ptr %dst, i8 %byte, i64 %bytes) {
entry:
  call void @llvm.memset.p0.i64(ptr align 8 %dst, i8 %byte, i64 %bytes, i1 false)
  ret void
}
define void @copy(ptr %dst, ptr %src, i64 %bytes) {
entry:
  tail call void @llvm.memcpy.p0.p0.i64(ptr nonnull align 8 %dst, ptr nonnull align 8 %src, i64 %bytes, i1 false)
  ret void
}
define ptr @zeroed(i64 %count, i64 %size) {
entry:
  %p = call noalias ptr @calloc(i64 %count, i64 %size)
  ret ptr %p
}
define void @release(ptr %p) {
entry:
  call void @free(ptr %p)
  ret void
}
define i1 @split(i64 %bytes) {
entry:
  %r = call i1 @pyjlad.omp.fill.threads(i64 %bytes)
  ret i1 %r
}
declare void @llvm.memset.p0.i64(ptr nocapture writeonly, i8, i64, i1 immarg)
declare void @llvm.memcpy.p0.p0.i64(ptr noalias nocapture writeonly, ptr noalias nocapture readonly, i64, i1 immarg)
declare noalias ptr @calloc(i64, i64)
declare void @free(ptr)
"""


@pytest.fixture(scope="module")
def helpers():
    """The rewritten SOURCE, compiled: its functions as ctypes callables."""
    from numba.np.ufunc.parallel import _launch_threads

    _launch_threads()  # Numba's get_num_threads, which the helpers call, for the JIT
    module = llvm.parse_assembly(parallel_fills(SOURCE))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    p, i64 = ctypes.c_void_p, ctypes.c_int64
    kinds = {"fill": (None, p, ctypes.c_int8, i64), "copy": (None, p, p, i64), "zeroed": (p, i64, i64),
             "release": (None, p), "split": (ctypes.c_bool, i64)}
    found = {name: ctypes.CFUNCTYPE(*kind)(engine.get_function_address(name)) for name, kind in kinds.items()}
    found["engine"] = engine  # keeps the code alive
    return found


def test_the_rewrite_leaves_constant_sizes_alone() -> None:
    text = parallel_fills(SOURCE)
    assert "call void @pyjlad.omp.memset(ptr %dst, i8 %byte, i64 %bytes)" in text
    assert "call void @pyjlad.omp.memcpy(ptr %dst, ptr %src, i64 %bytes)" in text
    assert "%p = call ptr @pyjlad.omp.calloc(i64 %count, i64 %size)" in text
    constant = "define void @f(ptr %p) {\nentry:\n  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 48, i1 false)\n}\n"
    assert parallel_fills(constant) == constant


@pytest.mark.parametrize("threads", THREADS)
def test_split_only_above_the_threshold_with_threads(helpers, threads: int) -> None:
    numba.set_num_threads(threads)
    assert not helpers["split"](THRESHOLD - 1)
    assert helpers["split"](THRESHOLD) == (threads > 1)


def _guarded(size: int, fill: int) -> np.ndarray:
    return np.full(size + 2 * GUARD, fill, dtype=np.uint8)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("size", SIZES)
def test_fills_and_copies_write_exactly_their_bytes(helpers, threads: int, size: int) -> None:
    numba.set_num_threads(threads)
    dst = _guarded(size, 0xAB)
    helpers["fill"](dst.ctypes.data + GUARD, 7, size)
    assert (dst[GUARD:GUARD + size] == 7).all()
    assert (dst[:GUARD] == 0xAB).all() and (dst[GUARD + size:] == 0xAB).all()
    src = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    dst = _guarded(size, 0xCD)
    helpers["copy"](dst.ctypes.data + GUARD, src.ctypes.data, size)
    np.testing.assert_array_equal(dst[GUARD:GUARD + size], src)
    assert (dst[:GUARD] == 0xCD).all() and (dst[GUARD + size:] == 0xCD).all()


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("count, size", [(1, s) for s in SIZES] + [(THRESHOLD // 8 + 3, 8)])
def test_calloc_zeroes(helpers, threads: int, count: int, size: int) -> None:
    numba.set_num_threads(threads)
    for _ in range(3):  # a block freed dirty and handed out again must come back zeroed
        p = helpers["zeroed"](count, size)
        assert p
        block = np.ctypeslib.as_array(ctypes.cast(p, ctypes.POINTER(ctypes.c_uint8)), shape=(count * size,))
        assert not block.any()
        block[:] = 0xEE
        helpers["release"](p)


@njit(parallel=True)
def heat_energy(u, k):
    """One step of the 2-D heat equation into a new grid, the squared result summed: the grid's shadow and
    the square's temporary are as large as the input."""
    n, m = u.shape
    out = np.zeros((n, m))
    for i in prange(1, n - 1):
        for j in range(1, m - 1):
            out[i, j] = u[i, j] + k * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j])
    return np.sum(out * out)


#: A 1-D stencil step and a serial sum of squares (Enzyme keeps a copy of the step's result for the sum's reverse):
#: test_parallel_derivatives' kernel, compiled afresh so that its derivative is built (and dumped) here.
stencil_energy = njit(parallel=True)(stencil.py_func)


def _heat_partials(u: np.ndarray, k: float) -> tuple[np.ndarray, float]:
    c = u[1:-1, 1:-1]
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
    g = 2.0 * (c + k * lap)
    du = np.zeros_like(u)
    du[1:-1, 1:-1] += (1.0 - 4.0 * k) * g
    du[:-2, 1:-1] += k * g
    du[2:, 1:-1] += k * g
    du[1:-1, :-2] += k * g
    du[1:-1, 2:] += k * g
    return du, float(np.sum(g * lap))


def _stencil_partials(u: np.ndarray, k: float) -> tuple[np.ndarray, float]:
    lap = u[:-2] - 2.0 * u[1:-1] + u[2:]
    g = 2.0 * (u[1:-1] + k * lap)
    du = np.zeros_like(u)
    du[1:-1] += (1.0 - 2.0 * k) * g
    du[:-2] += k * g
    du[2:] += k * g
    return du, float(np.sum(g * lap))


@pytest.mark.parametrize("kernel, partials, shape", [(heat_energy, _heat_partials, (363, 365)),
                                                     (stencil_energy, _stencil_partials, (140_001,))])
def test_gradients_with_large_shadows_and_copies(kernel, partials, shape, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """Closed forms from copies taken before the calls; the derivative Enzyme made calls the helpers."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    assert np.prod(shape) * 8 >= THRESHOLD
    u = np.random.default_rng(3).normal(size=shape)
    want_u, want_k = partials(u.copy(), 0.15)
    for threads in THREADS:
        numba.set_num_threads(threads)
        gu, gk = parallel_grad(kernel, (u, 0.15), (0, 1))
        np.testing.assert_allclose(gu, want_u, rtol=1e-12, atol=1e-12)
        assert gk == pytest.approx(want_k, rel=1e-10)
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert outputs
    text = "".join(p.read_text(errors="replace") for p in outputs)
    assert "@pyjlad.omp.fill.part" in text  # the helpers' parallel region (what calls it may be inlined)
