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


G_PLAIN = np.array([1.0, 2.0, 3.0])


def _plain_loss(x):  # a plain Python function: it reads G_PLAIN at each call
    return np.sum(G_PLAIN * x * x)


def test_a_plain_function_follows_its_globals_rebound_or_changed_in_place() -> None:
    """pyjlad compiles a plain function with ``numba.njit`` once; until 2026-12-06 its derivatives kept the arrays
    of that compile (the next cross-validation fold got the first fold's gradient; found by a user-style probe).
    Transforms taken before the change, an ``hvp`` and another dtype follow too."""
    global G_PLAIN
    x, before = _point()
    grad, value_and_grad = pyjlad.grad(_plain_loss), pyjlad.value_and_grad(_plain_loss)
    np.testing.assert_allclose(grad(x), 2.0 * np.array([1.0, 2.0, 3.0]) * X, rtol=1e-15)
    for weights in ([5.0, 5.0, 5.0], [0.5, -2.0, 4.0]):
        G_PLAIN = np.array(weights)  # bound anew
        value, gradient = value_and_grad(x)
        assert value == pytest.approx(np.sum(np.array(weights) * X * X), rel=1e-15)
        np.testing.assert_allclose(gradient, 2.0 * np.array(weights) * X, rtol=1e-15)
    G_PLAIN[:] = [3.0, 1.0, -1.0]  # changed in place
    np.testing.assert_allclose(grad(x), 2.0 * np.array([3.0, 1.0, -1.0]) * X, rtol=1e-15)
    np.testing.assert_allclose(pyjlad.hvp(_plain_loss, (x,), np.ones(3)), 2.0 * np.array([3.0, 1.0, -1.0]),
                               rtol=1e-15)
    np.testing.assert_allclose(grad(x.astype(np.float32)), 2.0 * np.array([3.0, 1.0, -1.0]) * X, rtol=1e-6)
    np.testing.assert_array_equal(x, before)


LAMBDA_NEW_TYPE = 1.0
G_NEW_TYPE = np.array([1.0, 2.0, 3.0])


@njit
def _new_type_loss(w):
    return LAMBDA_NEW_TYPE * np.sum((w - G_NEW_TYPE) ** 2)


def test_a_signature_numba_compiles_after_the_globals_changed_gets_their_new_values() -> None:
    """Numba compiles a new signature of ``f`` with the globals' values of then; until 2026-12-06 pyjlad's
    derivative for it used those of its first build (found by a user-style probe)."""
    global LAMBDA_NEW_TYPE, G_NEW_TYPE
    w = np.zeros(3)
    np.testing.assert_allclose(pyjlad.gradient(_new_type_loss, w), -2.0 * np.array([1.0, 2.0, 3.0]), rtol=1e-15)
    LAMBDA_NEW_TYPE, G_NEW_TYPE = 10.0, np.array([5.0, 5.0, 5.0])
    w32, strided = w.astype(np.float32), np.zeros(6)[::2]
    assert _new_type_loss(w32) == pytest.approx(750.0)  # Numba compiles float32 now, with the new values
    value, gradient = pyjlad.value_and_grad(_new_type_loss)(w32)
    assert value == pytest.approx(750.0, rel=1e-6)
    np.testing.assert_allclose(gradient, np.full(3, -100.0), rtol=1e-6)
    assert _new_type_loss(strided) == pytest.approx(750.0)
    np.testing.assert_allclose(pyjlad.gradient(_new_type_loss, strided), np.full(3, -100.0), rtol=1e-15)
    # float64, compiled before: Numba keeps the old values in f, and the derivative built then keeps them too
    assert _new_type_loss(w) == pytest.approx(14.0)
    assert pyjlad.jvp(_new_type_loss, (w,), (np.ones(3),))[1] == pytest.approx(-12.0, rel=1e-15)


def test_a_called_function_defined_anew_then_recompiled_is_followed() -> None:
    """A notebook cell defining the helper run again with a new body, then ``f.recompile()``: until 2026-12-06
    the gradient kept the old helper's (found by a user-style probe). The same body defined again is no change; before
    the recompile, ``f`` and its derivatives keep the old helper alike."""
    namespace: dict = {"njit": njit, "np": np}
    exec("@njit\ndef helper(w):\n    return np.sum(w ** 2)\n\n@njit\ndef loss(w):\n    return helper(w)\n",  # noqa: S102
         namespace)
    loss, w = namespace["loss"], np.full(3, 2.0)
    np.testing.assert_allclose(pyjlad.gradient(loss, w), 2.0 * w, rtol=1e-15)
    exec("@njit\ndef helper(w):\n    return np.sum(w ** 2)\n", namespace)  # noqa: S102  (the same body again)
    np.testing.assert_allclose(pyjlad.jvp(loss, (w,), (np.ones(3),))[1], np.sum(2.0 * w), rtol=1e-15)
    exec("@njit\ndef helper(w):\n    return np.sum(w ** 3)\n", namespace)  # noqa: S102
    assert loss(w) == pytest.approx(12.0)  # not compiled again: Numba's loss keeps the old helper, and so does
    np.testing.assert_allclose(pyjlad.jvp(loss, (w,), (np.ones(3),))[1], np.sum(2.0 * w), rtol=1e-15)  # this
    # Built now: not from the new helper (vector mode's strided views, which Numba compiles now, with the new
    # helper, are refused; the Hessian falls back to the sweeps built before, as loss is)
    np.testing.assert_allclose(pyjlad.hessian(loss, w), 2.0 * np.eye(3), rtol=1e-15)
    loss.recompile()
    assert loss(w) == pytest.approx(24.0)
    np.testing.assert_allclose(pyjlad.gradient(loss, w), 3.0 * w ** 2, rtol=1e-15)
    np.testing.assert_allclose(pyjlad.gradient(loss, w.astype(np.float32)), 3.0 * w ** 2, rtol=1e-6)
