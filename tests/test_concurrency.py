"""Threads, the GIL, pickling and worker processes."""

from __future__ import annotations

import math
import multiprocessing
import pickle
import threading
import time

import numpy as np
import pytest
from numba import njit

import pyjlad


def _make(k: int):
    @njit
    def f(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += math.sin(k * x[i]) * x[i] ** k
        return s

    def expected(x):
        return k * np.cos(k * x) * x ** k + np.sin(k * x) * k * x ** (k - 1)

    return f, expected


def test_eight_threads_different_functions() -> None:
    functions = [_make(k) for k in range(1, 9)]
    x = np.linspace(0.1, 1.0, 50)
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            f, _ = functions[k]
            for _ in range(5):
                results[k] = pyjlad.gradient(f, x)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors, errors
    for k, (_, expected) in enumerate(functions):
        np.testing.assert_allclose(results[k], expected(x), rtol=1e-12)


@njit
def slow_loss(x, repeats):
    s = 0.0
    for _ in range(repeats):
        for i in range(x.shape[0]):
            s += math.sin(x[i]) * 1e-3
    return s


def test_gradient_releases_the_gil() -> None:
    df = pyjlad.grad(slow_loss)
    x = np.linspace(0.0, 1.0, 1000)
    df(x, 1)  # compile
    start = time.perf_counter()
    df(x, 20000)
    alone = time.perf_counter() - start
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1

    counter = threading.Thread(target=count)
    counter.start()
    df(x, 20000)
    done.set()
    counter.join()
    # With the GIL held for the whole call, the counting thread could only run
    # at the interpreter's switch interval before and after it.
    assert alone > 0.05
    assert ticks > 1000


@njit
def module_level_loss(x, c):
    return c * np.sum(x ** 3)


def test_grad_callables_pickle() -> None:
    df = pyjlad.grad(module_level_loss, wrt=(0, 1))
    again = pickle.loads(pickle.dumps(df))
    x = np.arange(1.0, 4.0)
    gx, gc = again(x, 2.0)
    np.testing.assert_allclose(gx, 6 * x ** 2)
    assert gc == pytest.approx(float(np.sum(x ** 3)))
    vg = pickle.loads(pickle.dumps(pyjlad.value_and_grad(module_level_loss)))
    value, g = vg(x, 2.0)
    assert value == pytest.approx(2 * 36.0)
    assert "grad" in repr(df)


def _chunk_gradient(args):
    df, chunk = args
    return df(chunk, 2.0)[0]


def test_gradients_in_multiprocessing_workers() -> None:
    df = pyjlad.grad(module_level_loss, wrt=(0, 1))
    chunks = [np.linspace(k, k + 1, 10) for k in range(4)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(_chunk_gradient, [(df, c) for c in chunks])
    for chunk, got in zip(chunks, results):
        np.testing.assert_allclose(got, 6 * chunk ** 2, rtol=1e-12)


def test_gradients_on_a_dask_local_cluster() -> None:
    import distributed  # a test dependency: installed by the test command
    df = pyjlad.grad(module_level_loss, wrt=(0, 1))
    chunks = [np.linspace(k, k + 1, 10) for k in range(4)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        futures = client.map(lambda c, df=df: df(c, 2.0)[0], chunks)
        results = client.gather(futures)
        workers = client.run(lambda: __import__("os").getpid())
    assert len(set(workers.values())) == 2
    single = [df(c, 2.0)[0] for c in chunks]
    for chunk, got, want in zip(chunks, results, single):
        np.testing.assert_allclose(got, want, rtol=0, atol=0)
        np.testing.assert_allclose(got, 6 * chunk ** 2, rtol=1e-12)  # d/dx of 2 * sum(x^3)


_LOCK_ORDER_SCRIPT = r'''
import math, os, sys, threading
import numpy as np
import pyjlad
from numba import njit

@njit
def loss(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(math.sin(x[i])) * x[i]
    return s

@njit
def loss2(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.cos(x[i]) * x[i] * x[i]
    return s

dl = pyjlad.grad(loss)

@njit
def step(x, lr):
    return x - lr * dl(x)

x = np.linspace(-1.0, 1.0, 10)
loss(x), loss2(x)
other = loss if sys.argv[1] == "same" else loss2
barrier = threading.Barrier(2)
got = {}
def njit_caller():
    barrier.wait()
    got["step"] = step(x, 1.0)
def from_python():
    barrier.wait()
    got["gradient"] = pyjlad.gradient(other, x)
threads = [threading.Thread(target=t, daemon=True) for t in (njit_caller, from_python)]
for t in threads:
    t.start()
for t in threads:
    t.join(240)
if len(got) < 2:
    print("HUNG", sorted(got), flush=True)
    os._exit(3)
d = (np.exp(np.sin(x)) * (np.cos(x) * x + 1.0))
np.testing.assert_allclose(got["step"], x - d, rtol=1e-12)
expected = d if other is loss else (-np.sin(x) * x * x + 2.0 * x * np.cos(x))
np.testing.assert_allclose(got["gradient"], expected, rtol=1e-12)
print("both finished", flush=True)
'''


@pytest.mark.parametrize("which", ["different", "same"])
def test_an_njit_caller_compiling_beside_a_first_gradient_from_python_does_not_hang(which, tmp_path) -> None:
    """One thread compiles an ``@njit`` function calling ``pyjlad.grad(loss)`` (the build runs in Numba's typing,
    under its compiler lock) while another takes a first gradient of another function from Python. Until
    2026-12-07 the second held the lock of a ``functools.cached_property`` (one for every instance), then waited
    for Numba's: both hung for ever (a user-style probe). Fresh processes, three runs, no disk cache;
    hand-derived gradients. ``same``: the Python thread takes the gradient of the function the ``@njit`` caller
    differentiates (reported to hang by a probe on 2026-12-07, before export took Numba's lock ahead of its own;
    not seen since in this test)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "lock_order.py"
    script.write_text(_LOCK_ORDER_SCRIPT)
    env = {**os.environ, "PYJLAD_DISABLE_DISK_CACHE": "1"}
    for _ in range(3):
        out = subprocess.run([sys.executable, str(script), which], capture_output=True, text=True, timeout=400,
                             env=env)
        assert out.returncode == 0 and "both finished" in out.stdout, out.stdout + out.stderr[-3000:]


def test_a_caller_waiting_for_a_build_that_fails_builds_the_entry_itself() -> None:
    """``pyjlad.memo.cached_for``: a second thread waiting for the first's build of the same entry got ``None``
    when that build failed (``AttributeError: 'NoneType' object has no attribute 'exported'`` where the first
    build timed out in Enzyme; a user-style probe, 2026-12-07). It now builds the entry itself."""
    from pyjlad.memo import cached_for

    owner = type("Owner", (), {})()
    started, release = threading.Event(), threading.Event()

    def failing():
        started.set()
        release.wait(10)
        raise RuntimeError("the first build failed")

    out: dict[str, object] = {}

    def first():
        try:
            cached_for(owner, ("entry",), failing)
        except RuntimeError as exc:
            out["first"] = exc

    def second():
        out["second"] = cached_for(owner, ("entry",), lambda: 42)

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert started.wait(10)
    threads.append(threading.Thread(target=second))
    threads[1].start()
    time.sleep(0.3)  # the second thread now waits for the first's build
    release.set()
    for t in threads:
        t.join(10)
    assert isinstance(out["first"], RuntimeError) and out["second"] == 42
    assert cached_for(owner, ("entry",), lambda: 0) == 42  # remembered


def test_a_remembered_export_does_not_wait_for_numbas_compiler_lock() -> None:
    """``pyjlad.export.export`` takes Numba's compiler lock only to build: the Julia engine exports on every sweep,
    and a thread compiling something else (holding the lock for seconds) made each of those wait until 2026-12-07.
    Here another thread holds the lock while this one asks again for an export and its Enzyme module."""
    from numba import float64
    from numba.core.compiler_lock import global_compiler_lock

    from pyjlad.export import export

    f, _ = _make(3)
    argtypes = (float64[::1],)
    first = export(f, argtypes)
    module = first.enzyme_module
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with global_compiler_lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(10)
    got: dict[str, object] = {}

    def ask() -> None:
        again = export(f, argtypes)
        got["export"], got["module"] = again, again.enzyme_module

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    asker.join(10)
    finished = not asker.is_alive()
    release.set()
    holder.join(10)
    assert finished, "a remembered export waited for Numba's compiler lock"
    assert got["export"] is first and got["module"] is module
