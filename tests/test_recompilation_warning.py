"""A plain function made anew at each call is compiled and differentiated anew: pyjlad says so, once.

Before: ``pyjlad.gradient(lambda w: loss(w, X), w)`` in an optimisation loop built a new derivative on every
iteration (about 0.3 s and 2.2 MB that Numba never releases, each; a forward ``jacobian`` of such a lambda
around ``cholesky`` reached 6.4 GB in a user-style probe, 2026-12-07), silently. Now the third function
made from the same code raises a :class:`pyjlad.RecompilationWarning` naming the code and what to write
instead; the gradients stay right (hand formula ``2 X^T X w``, from copies taken before the calls).
"""

from __future__ import annotations

import warnings

import numpy as np
from numba import njit

import pyjlad
from pyjlad import export_compile


@njit
def _squared_residuals(w, x):
    return np.sum((x @ w) ** 2)


def _recompilation_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, pyjlad.RecompilationWarning)]


def test_a_lambda_made_at_each_call_is_warned_about_once() -> None:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((6, 3)), rng.standard_normal(3)
    x_before, w_before = x.copy(), w.copy()
    expected = 2.0 * x_before.T @ (x_before @ w_before)
    calls = export_compile.FUNCTIONS_OF_ONE_CODE_BEFORE_WARNING + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(calls):
            g = pyjlad.gradient(lambda v: _squared_residuals(v, x), w)  # a new function object each time
            np.testing.assert_allclose(g, expected, rtol=1e-12)
    said = _recompilation_warnings(caught)
    assert len(said) == 1, said
    # Attributed to the line making the lambda, not to pyjlad's inside (warnings.warn's stacklevel counted by hand).
    assert [w.filename for w in caught if issubclass(w.category, pyjlad.RecompilationWarning)] == [__file__]
    assert "test_recompilation_warning.py" in said[0] and "pass the data it captures as an argument" in said[0]
    np.testing.assert_array_equal(x, x_before)
    np.testing.assert_array_equal(w, w_before)


def test_one_function_reused_or_the_data_passed_is_not_warned_about() -> None:
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((6, 3)), rng.standard_normal(3)
    expected = 2.0 * x.T @ (x @ w)

    def loss(v):
        return _squared_residuals(v, x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(export_compile.FUNCTIONS_OF_ONE_CODE_BEFORE_WARNING + 1):
            np.testing.assert_allclose(pyjlad.gradient(loss, w), expected, rtol=1e-12)
            np.testing.assert_allclose(pyjlad.gradient(_squared_residuals, w, x), expected, rtol=1e-12)
    assert _recompilation_warnings(caught) == []


def test_fewer_functions_of_one_code_than_the_threshold_are_not_warned_about() -> None:
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((4, 2)), rng.standard_normal(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(export_compile.FUNCTIONS_OF_ONE_CODE_BEFORE_WARNING - 1):
            pyjlad.gradient(lambda v: _squared_residuals(v, x), w)
    assert _recompilation_warnings(caught) == []
