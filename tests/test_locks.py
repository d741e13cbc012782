"""No global lock across a build (issue 14): while one thread's gradient is being built
(parked inside Enzyme's ``opt`` run), other threads' warm gradients, Numba compiles and
other builds proceed, and a ``fork()`` in that window gives a child that works."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad import toolchain


@njit
def warm(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * x[i]
    return s


def _cold_function():
    @njit
    def cold(x):  # a new function object: its gradient is built from scratch
        s = 0.0
        for i in range(x.shape[0]):
            s += np.sin(x[i]) * 2.5
        return s

    return cold


@pytest.fixture
def parked_build(monkeypatch):
    """A thread whose gradient build waits inside the Enzyme run until released."""
    entered, release = threading.Event(), threading.Event()
    original = toolchain.Toolchain.run

    def waiting_run(self, ir, passes, **kwargs):
        if threading.current_thread().name == "parked":
            entered.set()
            assert release.wait(120), "never released"
        return original(self, ir, passes, **kwargs)

    monkeypatch.setattr(toolchain.Toolchain, "run", waiting_run)
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")  # the parked build must reach Enzyme
    cold = _cold_function()
    x = np.linspace(0.1, 1.0, 7)
    result: dict[str, object] = {}

    def work():
        result["g"] = pyjlad.gradient(cold, x)

    thread = threading.Thread(target=work, name="parked")
    thread.start()
    assert entered.wait(300), "the build never reached Enzyme"
    yield
    release.set()
    thread.join(300)
    assert not thread.is_alive()
    np.testing.assert_allclose(result["g"], 2.5 * np.cos(x), rtol=1e-13)


def test_warm_gradients_and_other_builds_proceed_during_a_build(parked_build):
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(pyjlad.gradient(warm, x), 3 * x * x)  # built while another build waits
    np.testing.assert_array_equal(pyjlad.gradient(warm, x), 3 * x * x)  # warm
    # a plain Numba compile is not blocked either
    assert njit(lambda a: a + 1.0)(1.0) == 2.0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_during_a_build_gives_a_working_child(parked_build):
    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(pyjlad.gradient(warm, x), 3 * x * x)  # warm in the parent
    pid = os.fork()
    if pid == 0:  # the child: a warm gradient and a new build, then exit with the verdict
        code = 1
        try:
            ok = np.array_equal(pyjlad.gradient(warm, x), 3 * x * x)
            other = njit(lambda a: a * a * 4.0)
            ok = ok and pyjlad.gradient(other, 1.5) == 12.0
            code = 0 if ok else 2
        finally:
            os._exit(code)
    deadline = 240
    import time

    start = time.monotonic()
    while time.monotonic() - start < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.1)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child deadlocked")


def test_a_differentiated_function_is_released_when_the_user_drops_it():
    """pyjlad's caches live in the function's own __dict__ and hold compiled sweeps weakly from
    Numba's registries, so nothing of pyjlad's keeps a dropped function (and its arrays) alive."""
    import gc
    import weakref

    def make():
        @njit
        def f(x):
            return np.sum(x * x)

        return f

    f = make()
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(pyjlad.gradient(f, x), 2 * x)
    np.testing.assert_array_equal(pyjlad.jvp(f, (x,), (x,))[1], 2 * x @ x)
    np.testing.assert_array_equal(pyjlad.hvp(f, (x,), x), 2 * x)
    alive = weakref.ref(f)
    del f
    gc.collect()
    assert alive() is None
