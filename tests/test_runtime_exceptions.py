"""An exception carrying run-time values, raised by a function whose derivative is called from ``@njit`` code.

``raise ValueError("negative entry", x[1])`` makes Numba build the exception's record at run time: a block
allocated by the function and the address of a conversion function in its module. Propagated from the
sweep as it was, that record reached the caller garbled: ``vmap(grad(f))`` crashed the process (SIGSEGV)
or raised ``EOFError``, ``vmap(jvp_fn(f))`` hung, and a ``grad(f)`` called in an ``@njit`` loop crashed
(found by a user-style probe, 2026-12-04; a constant message reached the caller intact). Now the caller
calls the function again with the same arguments and raises what it raises, as the Python path does
(``pyjlad/numba_calls/derivatives.py: _raise_on_failure``). The cases run in a child interpreter, so that a
regression kills the child, not the test run. Oracle: the exception the function raises when called itself.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_CASES = textwrap.dedent('''
    import numpy as np
    from numba import njit
    import pyjlad

    @njit
    def f_rt(x):
        if x[1] < 0:
            raise ValueError("negative entry", x[1])
        return np.sum(x * x)

    @njit
    def f_const(x):
        if x[1] < 0:
            raise ValueError("negative entry")
        return np.sum(x * x)

    @njit
    def f_int(x, k):
        if k < 0:
            raise ValueError("bad k", k)
        return np.sum(x) * k

    @njit
    def f_resets(x):  # raises once: its raise changes what it reads
        if x[0] > 0.5:
            x[0] = 0.0
            raise ValueError("reset", 1.0)
        return np.sum(x * x)

    grad_rt, value_and_grad_rt = pyjlad.grad(f_rt), pyjlad.value_and_grad(f_rt)
    grad_resets = pyjlad.grad(f_resets)

    @njit
    def loop_grad(X):
        out = np.empty_like(X)
        for i in range(X.shape[0]):
            out[i] = grad_rt(X[i].copy())
        return out

    @njit
    def loop_value_and_grad(X):
        s = 0.0
        for i in range(X.shape[0]):
            v, g = value_and_grad_rt(X[i].copy())
            s += v + g[0]
        return s

    @njit
    def once_resets(x):
        return grad_resets(x)

    X = np.array([[1.0, 2.0], [1.0, -2.5], [3.0, 1.0]])
    cases = {
        "njit grad": lambda: loop_grad(X),
        "njit value_and_grad": lambda: loop_value_and_grad(X),
        "vmap grad": lambda: pyjlad.vmap(pyjlad.grad(f_rt))(X),
        "vmap value_and_grad": lambda: pyjlad.vmap(pyjlad.value_and_grad(f_rt))(X),
        "vmap grad, an int payload": lambda: pyjlad.vmap(pyjlad.grad(f_int), in_axes=(0, None))(X, -1),
        "vmap jvp_fn": lambda: pyjlad.vmap(pyjlad.jvp_fn(f_rt))((X,), (np.ones_like(X),)),
        "vmap hvp_fn": lambda: pyjlad.vmap(pyjlad.hvp_fn(f_rt))((X,), np.ones_like(X)),
        "vmap grad, a constant message": lambda: pyjlad.vmap(pyjlad.grad(f_const))(X),
        "njit grad, raising once": lambda: once_resets(np.array([1.0, 2.0])),
    }
    for name, call in cases.items():
        try:
            call()
            said = "returned"
        except Exception as exc:
            said = f"{type(exc).__name__}: {exc}"
        print(f"{name}\\t{said}", flush=True)
''')


@pytest.fixture(scope="module")
def raised() -> dict[str, str]:
    run = subprocess.run([sys.executable, "-c", _CASES], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"the child died ({run.returncode}): {run.stdout[-2000:]}{run.stderr[-3000:]}"
    return dict(line.split("\t", 1) for line in run.stdout.splitlines() if "\t" in line)


@pytest.mark.parametrize("case", ["njit grad", "njit value_and_grad", "vmap grad", "vmap value_and_grad",
                                  "vmap jvp_fn", "vmap hvp_fn"])
def test_the_functions_own_exception_with_its_values_reaches_the_caller(raised: dict[str, str], case: str) -> None:
    assert raised[case] == "ValueError: ('negative entry', -2.5)"


def test_an_int_payload_and_a_constant_message(raised: dict[str, str]) -> None:
    assert raised["vmap grad, an int payload"] == "ValueError: ('bad k', -1)"
    assert raised["vmap grad, a constant message"] == "ValueError: negative entry"


def test_a_function_that_does_not_raise_again_is_named(raised: dict[str, str]) -> None:
    said = raised["njit grad, raising once"]
    assert said.startswith("RuntimeError: the derivative of f_resets stopped at an exception, but f_resets called "
                           "again with the same arguments returned"), said
