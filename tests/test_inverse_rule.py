"""``np.linalg.inv`` in reverse mode through its own rule (:mod:`pyjlad.inverse_calls`, :mod:`pyjlad.lapack_inverse`).

The reverse pass of an inverse needs only the inverse (``dA = -B^T dB B^T``), not the LU loops it was computed
by. Oracles are closed forms evaluated with NumPy's LAPACK (float64) on copies taken before each call:

* ``f(A) = sum(W * inv(A))``: ``df/dA = -B^T W B^T`` with ``B = inv(A)``;
* its Hessian-vector product along ``V``: ``(B V B)^T W B^T + B^T W (B V B)^T``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from numba import njit, prange

import pyjlad


@njit
def weighted_inverse(a, w):
    return np.sum(w * np.linalg.inv(a))


@njit
def inverses_in_a_loop(a, s, w):
    total = 0.0
    for i in range(s.shape[0]):
        total += np.sum(w * np.linalg.inv(a * s[i]))
    return total


@njit(parallel=True)
def inverses_in_prange(a, s, w):
    total = 0.0
    for i in prange(s.shape[0]):
        total += np.sum(w * np.linalg.inv(a * s[i]))
    return total


def _matrix(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + n)
    perm = rng.permutation(n)
    a = np.eye(n)[perm] * 3.0 + 0.3 * rng.normal(size=(n, n))  # row interchanges at most steps
    return a, rng.normal(size=(n, n))


def _gradient_oracle(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    b = np.linalg.inv(a)
    return -b.T @ w @ b.T


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("n", [1, 3, 8])
def test_gradient_against_the_closed_form(n, order) -> None:
    a, w = _matrix(n)
    a = np.asarray(a, order=order)
    a0, w0 = a.copy(), w.copy()
    got_a, got_w = pyjlad.gradient(weighted_inverse, a, w, wrt=(0, 1))
    np.testing.assert_allclose(got_a, _gradient_oracle(a0, w0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_w, np.linalg.inv(a0), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(w, w0)


def test_float32_gradient() -> None:
    a, w = _matrix(4)
    a32, w32 = a.astype(np.float32), w.astype(np.float32)
    got = pyjlad.gradient(weighted_inverse, a32, w32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, _gradient_oracle(a32.astype(np.float64), w32.astype(np.float64)), rtol=2e-4,
                               atol=1e-5)


@pytest.mark.parametrize("func", [inverses_in_a_loop, inverses_in_prange], ids=["loop", "prange"])
def test_many_inverses_against_the_closed_form(func) -> None:
    """One inverse per iteration of ``inv(s_i A)``: d/dA = sum_i s_i (-B_i^T W B_i^T), d/ds_i = -tr(...)"""
    a, w = _matrix(5)
    s = np.linspace(0.5, 2.0, 13)
    a0, s0, w0 = a.copy(), s.copy(), w.copy()
    got_a, got_s = pyjlad.gradient(func, a, s, w, wrt=(0, 1))
    want_a = sum(si * _gradient_oracle(si * a0, w0) for si in s0)
    want_s = np.array([np.sum(_gradient_oracle(si * a0, w0) * a0) for si in s0])
    np.testing.assert_allclose(got_a, want_a, rtol=1e-9)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-9)
    for x, x0 in ((a, a0), (s, s0), (w, w0)):
        np.testing.assert_array_equal(x, x0)


def test_hessian_vector_product_against_the_closed_form() -> None:
    a, w = _matrix(4)
    v = np.random.default_rng(7).normal(size=a.shape)
    a0, v0 = a.copy(), v.copy()
    b = np.linalg.inv(a0)
    dbv = b @ v0 @ b
    want = dbv.T @ w @ b.T + b.T @ w @ dbv.T
    got = pyjlad.hvp(weighted_inverse, (a, w), v)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(a, a0)


def test_reverse_mode_keeps_the_factorization_out_of_enzyme(tmp_path, monkeypatch) -> None:
    """Enzyme's output for the gradient has no derivative of the LU loops (``augmented_`` or ``diffe`` copies of
    ``pyjlad_lapack_numba_xxgetrf_d``/``..._xxgetri_d``): the rule's reverse pass replaces them."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")

    @njit
    def dumped_inverse(a):
        return np.sum(np.linalg.inv(a) ** 2)

    a, _ = _matrix(3)
    pyjlad.gradient(dumped_inverse, a)
    outputs = sorted(tmp_path.rglob("*enzyme.output.ll"))
    assert outputs, "PYJLAD_DUMP_IR wrote no Enzyme output"
    text = outputs[-1].read_text()
    assert "pyjlad_inverse.d" in text
    defined = [line.split("@", 1)[1].split("(", 1)[0] for line in text.splitlines() if line.startswith("define")]
    differentiated = [name for name in defined if "xxgetr" in name and name.startswith(("augmented_", "diffe"))]
    assert differentiated == []


def test_parallel_loops_compiled_after_a_derivative_still_run() -> None:
    """A derivative's machine code keeps Numba's names out of the JIT's table: loaded with its own
    ``NRT_decref`` visible under that name, every ``prange`` function Numba compiled after it crashed
    (segmentation fault in the loop's ``NRT_decref``). Run in a fresh interpreter: a crash must not take
    the test session with it."""
    script = textwrap.dedent("""
        import numpy as np
        from numba import njit, prange
        import pyjlad

        @njit
        def f(a):
            return np.sum(np.linalg.inv(a) ** 2)

        @njit(parallel=True)
        def g(x):
            s = 0.0
            for i in prange(x.shape[0]):
                s += np.sum(x * i)
            return s

        pyjlad.gradient(f, np.array([[2.0, 1.0], [1.0, 3.0]]))
        print(g(np.arange(4.0)))
    """)
    env = {**os.environ, "PYJLAD_DISABLE_DISK_CACHE": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600,
                          cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) == sum(6.0 * i for i in range(4))


@pytest.mark.parametrize("func", [inverses_in_a_loop, inverses_in_prange], ids=["loop", "prange"])
def test_repeated_gradients_give_back_their_memory(func) -> None:
    """The status check factors a copy of the matrix it frees itself. Enzyme copied it without its ``free``
    (its ``nofree_`` copy of a function it must not let free memory): 8 n^2 bytes lost per inverse per call
    (here 512 B x 2000 per call). Marked ``nofree`` (it frees no memory that existed before the call), it is
    called as it is."""
    from heap_use import growth_over

    a, w = _matrix(8)
    s = np.linspace(0.5, 2.0, 2000)
    gradient = pyjlad.grad(func, wrt=(0, 1))
    grown = growth_over(lambda: gradient(a, s, w))
    assert grown < 256 * 1024, f"{grown} bytes more in use after 10 more calls"
