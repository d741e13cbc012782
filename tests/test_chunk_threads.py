"""Jacobians, Hessians and batched products of ``parallel=True`` functions run their chunks of directions on
Numba's threads (pyjlad/chunk_threads.py).

Oracles: JAX in float64 (``jax.jacobian``, ``jax.hessian``) on equivalent programs, from copies taken before
the call. Each chunk is one call of the same serial derivative whichever thread runs it, so the results must
be identical, bit for bit, at every thread count. That several threads really ran is seen by counting the
threads ``run_chunks`` started (real threads, counted as they start).
"""

from __future__ import annotations

import threading
import time
import warnings

import jax
import jax.numpy as jnp
import numba
import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad import chunk_threads as chunks_module
from pyjlad.chunk_threads import chunk_threads, run_chunks
from pyjlad.errors import ParallelFallbackWarning

jax.config.update("jax_enable_x64", True)
#: Thread counts tested: 1 and up to 4 others, as many as Numba has here (2 on the build machines).
THREADS = tuple(t for t in (1, 2, 3, 4) if t <= numba.config.NUMBA_NUM_THREADS)
#: Threads run_chunks starts over THREADS (each count: one fewer than itself; the caller's is the other).
STARTED = sum(t - 1 for t in THREADS)
MOST = THREADS[-1]
if MOST < 2:
    pytest.skip("Numba has one thread here (NUMBA_NUM_THREADS=1): nothing to spread over", allow_module_level=True)
rng = np.random.default_rng(20261130)


# The kernels `interactions` (an array result, each output reading the whole shared input) and `pairwise` (an
# O(n^2) energy) are benchmarks/parallel_gradients.py's (the `parallel_kernels` fixture).


def interactions_jax(x, w):
    return jnp.sum(jnp.tanh(w * x[:, None] - x[None, :]), axis=1)


def pair_energy_jax(x):
    return jnp.sum(1.0 / (1.0 + (x[:, None] - x[None, :]) ** 2))


@njit(parallel=True)
def scaled_inverse(s, v):
    """LAPACK in a ``prange`` body (``np.linalg.inv``): no vector mode, so a Hessian takes one sweep per column."""
    total = 0.0
    for i in prange(s.shape[0]):
        total += np.sum(np.linalg.inv(s[i] * v) ** 2)
    return total


def scaled_inverse_jax(s, v):
    return jnp.sum(jnp.linalg.inv(s[:, None, None] * v[None]) ** 2)


@njit(parallel=True)
def writes_its_argument(x, w):
    """Writes into ``x`` (each sweep must get a copy of its own) and returns an array."""
    for i in prange(x.shape[0]):
        x[i] = np.sin(w * x[i])
    return x * x


@pytest.fixture
def threads_started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads :func:`run_chunks` starts, counted (each still a real thread)."""
    started: list[int] = []

    class Counted(threading.Thread):
        def start(self) -> None:
            started.append(1)
            super().start()

    monkeypatch.setattr(chunks_module.threading, "Thread", Counted)
    return started


def _at(threads: int, call):
    numba.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)  # a vector sweep warns of nothing now
        return call()


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_jacobian_of_a_parallel_function_on_every_thread_count(parallel_on, threads_started, mode, parallel_kernels) -> None:
    x, w = rng.uniform(-1.5, 1.5, 90), 0.7
    x0 = x.copy()
    expected = np.asarray(jax.jacobian(interactions_jax)(jnp.asarray(x0), w))
    got = {t: _at(t, lambda: pyjlad.jacobian(parallel_kernels.interactions, x, w, mode=mode, chunk=8)) for t in THREADS}
    np.testing.assert_allclose(got[1], expected, rtol=1e-12, atol=1e-12)
    for t in THREADS:
        np.testing.assert_array_equal(got[t], got[1])
    np.testing.assert_array_equal(x, x0)
    assert len(threads_started) == STARTED


def test_batched_jvp_and_vjp_of_a_parallel_function(parallel_on, threads_started, parallel_kernels) -> None:
    x, w = rng.uniform(-1.5, 1.5, 60), 0.4
    x0 = x.copy()
    tangents, cotangents = rng.normal(size=(40, 60)), rng.normal(size=(40, 60))
    jac = np.asarray(jax.jacobian(interactions_jax)(jnp.asarray(x0), w))
    for threads in (1, MOST):
        numba.set_num_threads(threads)
        value, pushed = pyjlad.jvp(parallel_kernels.interactions, (x, w), (tangents, None), batched=True, chunk=8)
        _, (pulled, _) = pyjlad.vjp(parallel_kernels.interactions, (x, w), cotangents, batched=True, chunk=8)
        np.testing.assert_allclose(value, np.asarray(interactions_jax(jnp.asarray(x0), w)), rtol=1e-13)
        np.testing.assert_allclose(pushed, tangents @ jac.T, rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(pulled, cotangents @ jac, rtol=1e-11, atol=1e-11)
    np.testing.assert_array_equal(x, x0)
    assert len(threads_started) == 2 * (MOST - 1)  # for jvp and for vjp


def test_hessian_in_vector_mode_on_every_thread_count(parallel_on, threads_started, parallel_kernels) -> None:
    x = rng.uniform(-1.5, 1.5, 70)
    x0 = x.copy()
    expected = np.asarray(jax.hessian(pair_energy_jax)(jnp.asarray(x0)))
    got = {t: _at(t, lambda: pyjlad.hessian(parallel_kernels.pairwise, x, chunk=8)) for t in THREADS}
    np.testing.assert_allclose(got[1], expected, rtol=1e-11, atol=1e-11)
    for t in THREADS:
        np.testing.assert_array_equal(got[t], got[1])
    np.testing.assert_array_equal(x, x0)
    assert len(threads_started) == STARTED


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_fewer_directions_than_a_chunk_are_split_between_the_threads(parallel_on, threads_started, mode,
                                                                     parallel_kernels) -> None:
    # 20 columns, the default chunk of 32: one sweep on one thread before; now narrower sweeps, one per thread
    # (the second call: a first call's first chunk runs alone), each its own thread's.
    x, w = rng.uniform(-1.5, 1.5, 20), 0.6
    x0 = x.copy()
    expected = np.asarray(jax.jacobian(interactions_jax)(jnp.asarray(x0), w))
    one = _at(1, lambda: pyjlad.jacobian(parallel_kernels.interactions, x, w, mode=mode))
    assert not threads_started
    runs = []
    for _ in range(2):
        got = _at(MOST, lambda: pyjlad.jacobian(parallel_kernels.interactions, x, w, mode=mode))
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        # Within rounding of one thread's: a narrower sweep is another derivative, compiled apart, whose adjoint
        # sums LLVM may order otherwise (last-bit differences on the diagonal in reverse mode on an AMD EPYC
        # host, none on an Intel Xeon); identical run to run.
        np.testing.assert_allclose(got, one, rtol=2e-15, atol=0)
        runs.append(got)
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_allclose(one, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x, x0)
    assert threads_started


def test_hessian_one_column_per_sweep_on_threads(parallel_on, threads_started) -> None:
    # LAPACK in the loop: no vector mode; each column one Hessian-vector product of the serial copy, the
    # columns on Numba's threads (identical at any thread count).
    s, m = rng.uniform(0.5, 1.5, 12), rng.normal(size=(6, 4))
    v = m.T @ m + 4 * np.eye(4)
    s0, v0 = s.copy(), v.copy()
    expected = np.asarray(jax.hessian(scaled_inverse_jax)(jnp.asarray(s0), jnp.asarray(v0)))
    numba.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        one = pyjlad.hessian(scaled_inverse, s, v)
    assert not threads_started
    numba.set_num_threads(MOST)
    two = pyjlad.hessian(scaled_inverse, s, v)
    assert len(threads_started) == MOST - 1
    np.testing.assert_allclose(one, expected, rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(two, one)
    np.testing.assert_array_equal(s, s0)
    np.testing.assert_array_equal(v, v0)


def test_hessian_columns_differentiate_the_serial_copy(parallel_on, threads_started, tmp_path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each column's product is one of the serial copy (``Sweep.serial``): the columns are what runs on the
    threads. Before, each was a product of the parallel module, its loops on one thread: seed 003's
    ``remote_stats`` Hessian wrt ``mse`` took 2.8x as long on 1 thread as with the setting off, since Enzyme
    cannot see that an array the loop reads through Numba's argument array is constant there, and
    differentiated ``np.linalg.inv(v)`` of the constant ``v`` (LAPACK) in every iteration."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    fresh = njit(parallel=True)(scaled_inverse.py_func)  # its own derivatives, built (and dumped) here
    s, m = rng.uniform(0.5, 1.5, 10), rng.normal(size=(6, 4))
    v = m.T @ m + 4 * np.eye(4)
    s0, v0 = s.copy(), v.copy()
    expected = np.asarray(jax.hessian(scaled_inverse_jax)(jnp.asarray(s0), jnp.asarray(v0)))
    hess = _at(MOST, lambda: pyjlad.hessian(fresh, s, v))
    np.testing.assert_allclose(hess, expected, rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(s, s0)
    np.testing.assert_array_equal(v, v0)
    assert len(threads_started) == MOST - 1
    assert list(tmp_path.glob("*/*-enzyme-copy.input.ll"))  # the serial copy, differentiated
    assert not list(tmp_path.glob("*/*-enzyme-parallel.input.ll"))
    # The same function's own Hessian-vector product is the parallel one (what the columns no longer use).
    column = _at(MOST, lambda: pyjlad.hvp(fresh, (s, v), np.eye(s.size)[3]))
    np.testing.assert_allclose(column, expected[:, 3], rtol=1e-11, atol=1e-12)
    assert list(tmp_path.glob("*/*-enzyme-parallel.input.ll"))


def test_a_function_writing_its_argument_gets_a_copy_per_chunk(parallel_on, threads_started) -> None:
    x, w = rng.uniform(-1.0, 1.0, 50), 1.3
    x0 = x.copy()
    expected = np.asarray(jax.jacobian(lambda a: jnp.sin(w * a) ** 2)(jnp.asarray(x0)))
    for threads in (1, MOST):
        for mode in ("reverse", "forward"):
            jac = _at(threads, lambda mode=mode: pyjlad.jacobian(writes_its_argument, x, w, mode=mode, chunk=4))
            np.testing.assert_allclose(jac, expected, rtol=1e-13, atol=1e-14)
            np.testing.assert_array_equal(x, x0)
    assert len(threads_started) == 2 * (MOST - 1)


def test_the_setting_off_keeps_one_thread(monkeypatch: pytest.MonkeyPatch, threads_started, parallel_kernels) -> None:
    monkeypatch.setenv("PYJLAD_PARALLEL_DERIVATIVES", "0")
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(MOST)
        assert chunk_threads(parallel_kernels.interactions) == 1
        x = rng.uniform(-1.5, 1.5, 40)
        jac = pyjlad.jacobian(parallel_kernels.interactions, x, 0.5, chunk=4)
        np.testing.assert_allclose(jac, np.asarray(jax.jacobian(interactions_jax)(jnp.asarray(x), 0.5)),
                                   rtol=1e-12, atol=1e-12)
    finally:
        numba.set_num_threads(before)
    assert not threads_started


def test_serial_functions_keep_one_thread(parallel_on, parallel_kernels) -> None:
    numba.set_num_threads(MOST)
    assert chunk_threads(njit(lambda x: x)) == 1
    assert chunk_threads(parallel_kernels.interactions) == MOST


def test_run_chunks_runs_the_threads_at_once() -> None:
    # Every chunk after the first waits at a barrier of 3: it passes only with three threads running chunks at once.
    barrier = threading.Barrier(3, timeout=30)
    seen: dict[int, set[int]] = {}
    lock = threading.Lock()

    def work(state: list, start: int) -> None:
        if start:
            barrier.wait()
        with lock:
            seen.setdefault(threading.get_ident(), set()).add(start)
        state.append(start)

    states = run_chunks(range(7), 3, list, work)
    assert sorted(s for state in states for s in state) == list(range(7))
    assert len(seen) == 3 and 0 in seen[threading.get_ident()]


def test_run_chunks_without_the_first_alone_starts_every_chunk_on_the_threads() -> None:
    # (A sweep that has run before.) Every chunk, the first too, waits at a barrier of 2.
    barrier = threading.Barrier(2, timeout=30)
    done: list[int] = []
    states = run_chunks(range(4), 2, list, lambda state, start: (barrier.wait(), done.append(start)),
                        first_alone=False)
    assert sorted(done) == [0, 1, 2, 3] and len(states) == 2


def test_run_chunks_raises_a_chunks_exception_in_the_caller() -> None:
    def work(state: list, start: int) -> None:
        if start == 4:
            raise ValueError("chunk 4")
        time.sleep(0.001)

    with pytest.raises(ValueError, match="chunk 4"):
        run_chunks(range(10), 3, list, work)
    with pytest.raises(ValueError, match="chunk 4"):
        run_chunks(range(4, 10), 3, list, work)  # the first chunk: raised before any thread starts


def test_run_chunks_with_one_thread_or_few_chunks_starts_none(threads_started) -> None:
    done: list[int] = []
    run_chunks(range(5), 1, list, lambda state, start: done.append(start))
    run_chunks(range(2), 4, list, lambda state, start: done.append(start))
    run_chunks(range(0), 4, list, lambda state, start: done.append(start))
    assert done == [0, 1, 2, 3, 4, 0, 1] and not threads_started
