"""Global and closure arrays read by a differentiated function: the derivative agrees with ``f`` as Numba runs it.

Numba freezes a global or closure array of at most 1 MB into ``f`` when it compiles ``f``; pyjlad's derivative
is built from copies of ``f`` compiled later. An array changed in place in between gave a derivative of the new
values beside an ``f`` of the old (found by a user-style probe, 2026-12-06): now refused, naming the array, and
after ``f.recompile()`` every derivative of ``f`` (transforms taken before included) uses the new values. Larger
arrays (Numba reads them where they are) were refused by Enzyme; now differentiated, reading them where they are
too. Oracles are hand-derived: ``d/dx sum(G * x * x) = 2 G x``.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.errors import UnsupportedFunctionError

X = np.array([0.5, -1.0, 2.0])


def _point() -> tuple[np.ndarray, np.ndarray]:
    """The point, and the copy taken before any call to check it unchanged after."""
    return X.copy(), X.copy()


G_REFUSED = np.array([1.0, 2.0, 3.0])


@njit
def _weighted_square(x):
    return np.sum(G_REFUSED * x * x)


def test_an_array_changed_after_numba_compiled_f_is_refused_until_f_is_recompiled() -> None:
    x, before = _point()
    assert _weighted_square(x) == pytest.approx(np.sum(np.array([1.0, 2.0, 3.0]) * X * X))  # Numba freezes G now
    G_REFUSED[:] = [10.0, 20.0, 30.0]
    with pytest.raises(UnsupportedFunctionError, match=r"`G_REFUSED`.*_weighted_square\.recompile\(\)"):
        pyjlad.value_and_grad(_weighted_square)(x)
    np.testing.assert_array_equal(x, before)
    _weighted_square.recompile()
    value, gradient = pyjlad.value_and_grad(_weighted_square)(x)
    assert value == pytest.approx(_weighted_square(x), rel=1e-15)
    assert value == pytest.approx(np.sum(G_REFUSED * X * X), rel=1e-15)
    np.testing.assert_allclose(gradient, 2.0 * G_REFUSED * X, rtol=1e-15)
    np.testing.assert_array_equal(x, before)


G_FOLLOWED = np.array([1.0, 2.0, 3.0])


@njit
def _followed(x):
    return np.sum(G_FOLLOWED * x * x)


def test_transforms_taken_before_a_recompile_use_the_new_values() -> None:
    x, before = _point()
    gradient, value_and_grad = pyjlad.grad(_followed), pyjlad.value_and_grad(_followed)
    np.testing.assert_allclose(gradient(x), 2.0 * G_FOLLOWED * X, rtol=1e-15)
    np.testing.assert_allclose(pyjlad.hessian(_followed, x), np.diag(2.0 * G_FOLLOWED), rtol=1e-15)
    for values in ([4.0, 5.0, 6.0], [-1.0, 0.5, 7.0]):
        G_FOLLOWED[:] = values
        _followed.recompile()
        np.testing.assert_allclose(gradient(x), 2.0 * G_FOLLOWED * X, rtol=1e-15)
        value, grad = value_and_grad(x)
        assert value == pytest.approx(_followed(x), rel=1e-15)
        np.testing.assert_allclose(grad, 2.0 * G_FOLLOWED * X, rtol=1e-15)
        np.testing.assert_allclose(pyjlad.hessian(_followed, x), np.diag(2.0 * G_FOLLOWED), rtol=1e-15)
        primal, tangent = pyjlad.jvp(_followed, (x,), (np.ones(3),))
        assert tangent == pytest.approx(np.sum(2.0 * G_FOLLOWED * X), rel=1e-14)
    np.testing.assert_array_equal(x, before)


def test_a_closure_array_changed_after_numba_compiled_f_is_refused() -> None:
    weights = np.array([1.0, 1.0, 1.0])

    @njit
    def f(x):
        return np.sum(weights * np.sin(x))

    x, before = _point()
    f(x)
    weights[:] = 5.0
    with pytest.raises(UnsupportedFunctionError, match=r"`weights`.*f\.recompile\(\)"):
        pyjlad.grad(f)(x)
    f.recompile()
    np.testing.assert_allclose(pyjlad.grad(f)(x), 5.0 * np.cos(X), rtol=1e-15)
    np.testing.assert_array_equal(x, before)


H_CALLEE = np.array([1.0, 2.0, 3.0])


@njit
def _reads_h(x):
    return np.sum(H_CALLEE * x * x)


@njit
def _calls_h(x):
    return 2.0 * _reads_h(x)


def test_an_array_of_a_called_function_is_followed_too() -> None:
    """The caller links its callee as Numba compiled it: recompiling the callee alone leaves the caller's old
    values, and the caller stays refused until it is recompiled too."""
    x, before = _point()
    _calls_h(x)
    H_CALLEE[:] = 100.0
    with pytest.raises(UnsupportedFunctionError, match=r"`H_CALLEE` \(read by _reads_h\).*"
                                                       r"_reads_h\.recompile\(\), then _calls_h\.recompile\(\)"):
        pyjlad.grad(_calls_h)(x)
    _reads_h.recompile()
    assert _calls_h(x) == pytest.approx(2.0 * np.sum(np.array([1.0, 2.0, 3.0]) * X * X))  # still the old values
    with pytest.raises(UnsupportedFunctionError, match="H_CALLEE"):
        pyjlad.grad(_calls_h)(x)
    _calls_h.recompile()
    np.testing.assert_allclose(pyjlad.grad(_calls_h)(x), 4.0 * H_CALLEE * X, rtol=1e-15)
    np.testing.assert_array_equal(x, before)


CONSTANTS = types.ModuleType("constants")
CONSTANTS.scale = np.array([1.0, 2.0, 3.0])
G_UNREAD = np.array([1.0, 2.0, 3.0])


@njit
def _reads_module_attribute(x):
    return np.sum(CONSTANTS.scale * x)


def test_arrays_read_as_module_attributes_and_arrays_not_read() -> None:
    x, before = _point()
    np.testing.assert_allclose(pyjlad.grad(_reads_module_attribute)(x), CONSTANTS.scale)
    _reads_module_attribute(x)
    G_UNREAD[:] = 0.0  # not read by the function: nothing refused
    np.testing.assert_allclose(pyjlad.grad(_reads_module_attribute)(x), [1.0, 2.0, 3.0])
    CONSTANTS.scale[:] = 7.0
    _reads_module_attribute.recompile()
    np.testing.assert_allclose(pyjlad.grad(_reads_module_attribute)(x), 7.0)
    np.testing.assert_array_equal(x, before)


def test_a_matrix_valued_jacobian_follows_a_recompile() -> None:
    scale = np.array([1.0, 2.0, 3.0])

    @njit
    def f(x):
        return scale * x * x

    x, before = _point()
    np.testing.assert_allclose(pyjlad.jacobian(f, x), np.diag(2.0 * scale * X), rtol=1e-15)
    scale[:] = [3.0, -2.0, 0.5]
    f.recompile()
    np.testing.assert_allclose(pyjlad.jacobian(f, x), np.diag(2.0 * scale * X), rtol=1e-15)
    np.testing.assert_allclose(pyjlad.jacobian(f, x, mode="forward"), np.diag(2.0 * scale * X), rtol=1e-15)
    np.testing.assert_array_equal(x, before)


BIG = np.ones(200_000)  # 1.6 MB: Numba reads it where it is, each call
STRIDED = np.arange(12.0)[::4]  # not contiguous: read where it is too


@njit
def _reads_big(x):
    return np.sum(BIG[:3] * x * x) + np.sum(STRIDED * x)


def test_arrays_numba_reads_where_they_are_differentiate_with_their_current_values() -> None:
    """Enzyme refused every function reading such an array until 2026-12-06 ("cannot compute with global
    variable that doesn't have marked shadow global")."""
    x, before = _point()
    assert STRIDED.tolist() == [0.0, 4.0, 8.0]
    for value in (1.0, 5.0):
        BIG[:3] = value
        assert _reads_big(x) == pytest.approx(value * np.sum(X * X) + np.dot(STRIDED, X), rel=1e-15)
        result, gradient = pyjlad.value_and_grad(_reads_big)(x)
        assert result == pytest.approx(_reads_big(x), rel=1e-15)
        np.testing.assert_allclose(gradient, 2.0 * value * X + STRIDED, rtol=1e-15)
        np.testing.assert_allclose(pyjlad.hessian(_reads_big, x), np.diag(np.full(3, 2.0 * value)), rtol=1e-15)
    np.testing.assert_array_equal(x, before)


SCALE = 2.0


@njit
def _scaled(x):
    return np.sum(SCALE * x * x)


def test_a_global_number_bound_anew_after_numba_compiled_f_is_refused_until_f_is_recompiled() -> None:
    global SCALE
    x, before = _point()
    _scaled(x)
    SCALE = 5.0
    with pytest.raises(UnsupportedFunctionError, match=r"value\(s\) `SCALE`.*_scaled\.recompile\(\)"):
        pyjlad.grad(_scaled)(x)
    _scaled.recompile()
    np.testing.assert_allclose(pyjlad.grad(_scaled)(x), 10.0 * X, rtol=1e-15)
    assert _scaled(x) == pytest.approx(5.0 * np.sum(X * X), rel=1e-15)
    np.testing.assert_array_equal(x, before)
