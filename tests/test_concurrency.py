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
