"""A matrix LAPACK rejects raises the function's own ``LinAlgError`` from every transform.

pyjlad's LAPACK loops (:mod:`pyjlad.lapack`) return the factorization's status through a slot their adapter
allocates; it was 4 bytes for an 8-byte result, LLVM dropped the store as undefined behaviour, and the status
read back was always 0. A singular ``inv`` or ``solve`` and a ``cholesky`` of a matrix that is not positive
definite then gave infinite, NaN or plain wrong derivatives (a gradient of zeros for ``solve``) instead of the
exception the function raises. Each case here is checked against the function's own exception, in reverse
mode, forward mode and a Hessian-vector product, and a matrix close to the edge that LAPACK accepts still
differentiates (hand-derived oracle).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad


@njit
def inverse_sum(a):
    return np.sum(np.linalg.inv(a) ** 2)


@njit
def solution_sum(a):
    return np.sum(np.linalg.solve(a, np.ones(a.shape[0], dtype=a.dtype)))


@njit
def cholesky_sum(a):
    return np.sum(np.linalg.cholesky(a))


SINGULAR = np.array([[1.0, 2.0], [2.0, 4.0]])  # LU meets an exact zero pivot
CASES = [
    pytest.param(inverse_sum, SINGULAR, id="inv-singular"),
    pytest.param(inverse_sum, np.zeros((3, 3)), id="inv-zero"),
    pytest.param(solution_sum, SINGULAR, id="solve-singular"),
    pytest.param(cholesky_sum, -np.eye(2), id="cholesky-negative-definite"),
    pytest.param(cholesky_sum, np.array([[1.0, 2.0], [2.0, 1.0]]), id="cholesky-indefinite"),
]
TRANSFORMS = {
    "gradient": lambda f, a: pyjlad.gradient(f, a),
    "jvp": lambda f, a: pyjlad.jvp(f, (a,), (np.ones_like(a),)),
    "hvp": lambda f, a: pyjlad.hvp(f, (a,), np.ones_like(a)),
}


def _own_error(func, a: np.ndarray) -> str:
    with pytest.raises(np.linalg.LinAlgError) as raised:
        func(a.copy())
    return str(raised.value)


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.parametrize(("func", "a"), CASES)
def test_rejected_matrix_raises_the_functions_error(func, a, transform) -> None:
    message = _own_error(func, a)
    before = a.copy()
    with pytest.raises(np.linalg.LinAlgError, match=message):
        TRANSFORMS[transform](func, a)
    np.testing.assert_array_equal(a, before)


def test_rejected_float32_matrix_raises_too() -> None:
    a = SINGULAR.astype(np.float32)
    with pytest.raises(np.linalg.LinAlgError, match=_own_error(inverse_sum, a)):
        pyjlad.gradient(inverse_sum, a)


def test_matrix_close_to_singular_still_differentiates() -> None:
    """``[[1, 2], [2, 4 + 1e-9]]``: accepted by LAPACK; d sum(B^2) / dA = -2 B^T B B^T with B = inv(A)."""
    a = np.array([[1.0, 2.0], [2.0, 4.0 + 1e-9]])
    b = np.linalg.inv(a)
    want = -2.0 * b.T @ b @ b.T
    got = pyjlad.gradient(inverse_sum, a.copy())
    np.testing.assert_allclose(got, want, rtol=1e-5)
