"""Guards whose discarded side LLVM computed anyway: ``np.nanvar``/``np.nanstd`` of data holding a NaN.

Numba's O3 writes ``if not isnan(v): ssd += (v - m) ** 2`` as straight-line code and a ``select``; Enzyme's
adjoint of the discarded side is ``0 * (v - m)``, NaN where ``v`` is: the gradient was NaN in every entry,
the Hessian too (found by a user-style probe, 2026-12-04). pyjlad writes such a ``select`` as a branch again
(``pyjlad/guarded_selects.py``, pass ``guarded-selects``). Oracle: ``jax`` in float64 on the entries that
are not NaN (the NaN entries' derivatives are 0: they do not enter the value), checked on copies taken
before the calls.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.guarded_selects import branch_guarded_selects

jax.config.update("jax_enable_x64", True)

DATA = np.array([0.1, np.nan, 0.7, 0.2, -0.4, np.nan, 1.3])
KEPT = ~np.isnan(DATA)


@njit
def nanvar(x):
    return np.nanvar(x)


@njit
def nanstd(x):
    return np.nanstd(x)


@njit
def nan_summary(x):
    return np.nansum(x) + np.nanmean(x) * np.nanstd(x)


@njit
def skip_nans_by_hand(x, m):
    s = 0.0
    for i in range(x.shape[0]):
        d = x[i] - m
        if not np.isnan(d):
            s += d * d * d
    return s


TWINS = {
    "nanvar": (nanvar, jnp.var),
    "nanstd": (nanstd, jnp.std),
    "nan_summary": (nan_summary, lambda y: jnp.sum(y) + jnp.mean(y) * jnp.std(y)),
}


def _scattered(values: np.ndarray) -> np.ndarray:
    out = np.zeros(DATA.shape + values.shape[1:]) if values.ndim == 1 else np.zeros((DATA.size, DATA.size))
    if values.ndim == 1:
        out[KEPT] = values
    else:
        out[np.ix_(KEPT, KEPT)] = values
    return out


@pytest.mark.parametrize("name", list(TWINS))
def test_gradient_and_hessian_of_nan_aware_reductions(name: str) -> None:
    f, twin = TWINS[name]
    x = DATA.copy()
    kept = jnp.asarray(DATA[KEPT])
    want_grad = _scattered(np.asarray(jax.grad(twin)(kept)))
    want_hess = _scattered(np.asarray(jax.hessian(twin)(kept)))
    value, gradient = pyjlad.value_and_grad(f)(x)
    assert value == pytest.approx(float(twin(kept)), rel=1e-13)
    np.testing.assert_allclose(gradient, want_grad, rtol=1e-12, atol=1e-14)
    _, (cotangent,) = pyjlad.vjp(f, (x,), 2.0)
    np.testing.assert_allclose(cotangent, 2.0 * want_grad, rtol=1e-12, atol=1e-14)
    v = np.linspace(-1.0, 1.0, DATA.size)
    np.testing.assert_allclose(pyjlad.hvp(f, (x,), v), want_hess @ v, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(pyjlad.hessian(f, x), want_hess, rtol=1e-11, atol=1e-13)
    np.testing.assert_array_equal(x, DATA)


def test_a_guard_written_by_hand() -> None:
    x = DATA.copy()
    grads = pyjlad.grad(skip_nans_by_hand, wrt=(0, 1))(x, 0.25)
    d = DATA[KEPT] - 0.25
    np.testing.assert_allclose(grads[0], _scattered(3.0 * d * d), rtol=1e-13)
    assert grads[1] == pytest.approx(-3.0 * float(np.sum(d * d)), rel=1e-13)


def test_only_selects_whose_discarded_side_multiplies_are_branched() -> None:
    loads = """define double @f(i1 %c, ptr %p) {
entry:
  %q = getelementptr double, ptr %p, i64 -1
  %v = load double, ptr %q, align 8
  %r = select i1 %c, double %v, double 0.000000e+00
  ret double %r
}"""
    assert branch_guarded_selects(loads) == loads  # u[i - 1] if i > 0 else 0.0: nothing to differentiate
    used_twice = loads.replace("  ret double %r", "  %w = fadd double %v, %r\n  ret double %w").replace(
        "%v = load double, ptr %q, align 8", "%v = fmul double %x, %x").replace("ptr %p)", "ptr %p, double %x)")
    assert branch_guarded_selects(used_twice) == used_twice  # %v is read after the select too: not moved
