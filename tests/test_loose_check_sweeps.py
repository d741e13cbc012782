"""Loose-typed reverse sweeps of functions returning nothing or an array (``vjp``, reverse ``jacobian``, a function
writing its output) and loose-typed forward sweeps (``jvp``, forward ``jacobian``) are checked against finite
differences before they are trusted; loose-typed vector sweeps are not used (pyjlad/engines/loose_check.py).

The wrong derivative the check must catch is a real one: the median of a slice of a sorted copy, times the
array, whose copy Enzyme v0.0.289 takes for integers unless pyjlad types it (``_copies_typed``, switched off here
with the disk cache off so that no other test can load the wrong derivative): its ``vjp`` and reverse Jacobian
were returned wrong (entries off by more than 0.5 against ``jax``: ``test_the_refused_vjp_is_wrong_indeed``) before
the check covered them. The right loose-typed
derivatives (typing on) must pass, against ``jax`` in float64. Oracles: ``jax`` and hand-derived derivatives.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.engines import differentiate, embedded
from pyjlad.engines.loose_check import LooseDerivativeCheck, LooseTangentCheck

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

X = np.array([0.3, -1.2, 2.5, 0.9, 1.7, -0.4, 3.1, 0.05])  # no ties


def median_of_sorted_tail_times(x):
    y = x.copy()
    y.sort()
    return np.median(y[2:]) * x


def median_of_sorted_tail_times_jax(x):
    return jnp.median(jnp.sort(x)[2:]) * x


def test_wrong_loose_typed_vjp_and_reverse_jacobian_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setattr(differentiate, "_copies_typed", lambda m: m.decode() if isinstance(m, bytes) else m)
    f = njit(median_of_sorted_tail_times)
    x, ct = X.copy(), np.linspace(-1.0, 1.0, 8)
    right = np.asarray(jax.vjp(median_of_sorted_tail_times_jax, jnp.asarray(X))[1](jnp.asarray(ct))[0])
    assert np.max(np.abs(right)) > 0.5  # (what a lost adjoint would change)
    with pytest.raises(pyjlad.EnzymeError, match="vector-Jacobian product of median_of_sorted_tail_times cannot be "
                                                 "trusted") as info:
        pyjlad.vjp(f, (x,), ct)
    assert "central differences" in info.value.diagnostics
    with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted"):  # and later: the vector sweeps too
        pyjlad.jacobian(f, x, mode="reverse")
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(ct, np.linspace(-1.0, 1.0, 8))


def test_the_refused_vjp_is_wrong_indeed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The product the test above refuses, returned with the check switched off (as before it covered such
    sweeps): wrong, its entries off by more than 0.5 against ``jax`` (not a false alarm)."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setattr(differentiate, "_copies_typed", lambda m: m.decode() if isinstance(m, bytes) else m)
    monkeypatch.setattr(embedded, "loose_derivative_check", lambda *args, **kwargs: None)
    ct = np.linspace(-1.0, 1.0, 8)
    right = np.asarray(jax.vjp(median_of_sorted_tail_times_jax, jnp.asarray(X))[1](jnp.asarray(ct))[0])
    unchecked = pyjlad.vjp(njit(median_of_sorted_tail_times), (X.copy(),), ct.copy())[1][0]
    assert np.max(np.abs(unchecked - right)) > 0.5


def sorted_head_times_exp_sum(x):
    y = np.sort(x)
    return y[:3] * np.sum(np.exp(x))


def sorted_head_times_exp_sum_into(x, out):
    y = np.sort(x)
    out[:] = y[:3] * np.sum(np.exp(x))


def _twin(x):
    return jnp.sort(x)[:3] * jnp.sum(jnp.exp(x))


def test_right_loose_typed_products_of_an_array_result_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loose-typed (the checks ran: recorded below), right against ``jax``: every product of an array result, and
    of the same function writing it into an argument (which ``jvp`` and ``vjp`` write as a call does). The
    Jacobians go one direction per sweep (the vector sweeps, loose-typed, are not used)."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    made: list[tuple[str, int, str]] = []
    original = embedded.loose_derivative_check

    def recorded(sweep, *args, **kwargs):
        check = original(sweep, *args, **kwargs)
        made.append((sweep.mode, sweep.width, type(check).__name__))
        return check

    monkeypatch.setattr(embedded, "loose_derivative_check", recorded)
    f, g = njit(sorted_head_times_exp_sum), njit(sorted_head_times_exp_sum_into)
    x, v, ct = X.copy(), np.linspace(-1.0, 1.0, 8), np.array([1.0, -2.0, 0.5])
    jx = jnp.asarray(X)
    vjp_expected = np.asarray(jax.vjp(_twin, jx)[1](jnp.asarray(ct))[0])
    jvp_expected = np.asarray(jax.jvp(_twin, (jx,), (jnp.asarray(v),))[1])
    jacobian_expected = np.asarray(jax.jacrev(_twin)(jx))
    np.testing.assert_allclose(pyjlad.vjp(f, (x,), ct)[1][0], vjp_expected, rtol=1e-12)
    np.testing.assert_allclose(pyjlad.jvp(f, (x,), (v,))[1], jvp_expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pyjlad.jacobian(f, x, mode="reverse"), jacobian_expected, rtol=1e-12)
    np.testing.assert_allclose(pyjlad.jacobian(f, x, mode="forward"), jacobian_expected, rtol=1e-12)
    out = np.zeros(3)
    np.testing.assert_allclose(pyjlad.vjp(g, (x, out), ct)[1][0], vjp_expected, rtol=1e-12)
    np.testing.assert_allclose(pyjlad.jvp(g, (x, out), (v, None))[1], jvp_expected, rtol=1e-12, atol=1e-12)
    assert {("reverse", 1, "LooseDerivativeCheck"), ("forward", 1, "LooseTangentCheck")} <= set(made)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(v, np.linspace(-1.0, 1.0, 8))
    np.testing.assert_array_equal(ct, [1.0, -2.0, 0.5])
    np.testing.assert_allclose(out, np.asarray(_twin(jx)), rtol=1e-14)  # written as a call writes it


# The checks alone, on hand-made sweeps of small functions (hand-derived derivatives) -------------------------------

def _cubes_into(x, out):
    out[:] = x ** 3


def test_a_reverse_sweep_of_a_function_writing_its_output_is_judged_by_the_cotangent() -> None:
    """Shadows: ``x``'s starts at 0, the output's at the cotangent ``c``; after the sweep, ``3 x^2 c`` and 0."""
    x, c = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.0, -2.0])

    def swept(x_shadow_after):
        check = LooseDerivativeCheck(_cubes_into, "cubes", shadow_args=(0, 1), active_scalars=(),
                                     what="vector-Jacobian product")
        check.before((x, np.zeros(3)), (np.zeros(3), c))
        check.after((x_shadow_after, np.zeros(3)), (), 0.0)

    swept(3.0 * x * x * c)  # right
    lost = 3.0 * x * x * c
    lost[2] = 0.0
    with pytest.raises(pyjlad.EnzymeError, match="vector-Jacobian product of cubes cannot be trusted"):
        swept(lost)


def _cube_sum(x, s):
    return float(np.sum(x ** 3)) * s


def test_a_forward_sweep_is_judged_by_its_result_and_what_it_writes() -> None:
    """``sum(x^3) s`` along ``(t, ds)``: ``3 x^2 . t s + sum(x^3) ds``; ``x^3`` written along ``t``: ``3 x^2 t``."""
    x, t = np.array([1.0, -2.0, 0.5]), np.array([0.7, 0.2, -1.0])
    right = float(np.sum(3 * x * x * t)) * 1.5 + float(np.sum(x ** 3)) * 0.25

    def judged(dret):
        check = LooseTangentCheck(_cube_sum, "cube_sum", shadow_args=(0, 1))
        check.before((x, 1.5), (t, 0.25))
        check.after((t, 0.25), (), 0.0, dret=dret)

    judged(right)
    with pytest.raises(pyjlad.EnzymeError, match="forward-mode derivative of cube_sum cannot be trusted"):
        judged(right - float(np.sum(x ** 3)) * 0.25)  # the scalar's tangent lost

    def written(tangent_out, again=None):
        check = LooseTangentCheck(_cubes_into, "cubes", shadow_args=(0, 1), returns_value=False)
        check.before((x, np.zeros(3)), (t, np.zeros(3)))
        check.after((t, tangent_out), (), 0.0, again=again, dret=0.0)

    written(3 * x * x * t)
    lost = 3 * x * x * t
    lost[1] = 0.0
    with pytest.raises(pyjlad.EnzymeError, match="forward-mode derivative of cubes cannot be trusted"):
        written(lost)


def test_a_forward_sweep_blind_along_the_first_tangent_is_judged_along_others() -> None:
    """Along ``e_0`` a derivative that lost the second component's tangent agrees; at a point near it along
    random tangents (through ``again``) it does not."""
    x, e0 = np.array([1.0, -2.0, 0.5]), np.array([1.0, 0.0, 0.0])

    def lossy(point, start):
        tangent = 3 * point[0] ** 2 * start[0]
        tangent[1] = 0.0
        return [start[0], tangent], [], 0.0

    def right(point, start):
        return [start[0], 3 * point[0] ** 2 * start[0]], [], 0.0

    for again, fails in ((None, False), (right, False), (lossy, True)):
        check = LooseTangentCheck(_cubes_into, "cubes", shadow_args=(0, 1), returns_value=False)
        check.before((x, np.zeros(3)), (e0, np.zeros(3)))
        if fails:
            with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted"):
                check.after((e0, 3 * x * x * e0), (), 0.0, again=again, dret=0.0)
        else:
            check.after((e0, 3 * x * x * e0), (), 0.0, again=again, dret=0.0)


def median_of_sorted_tail_by_squares(x):
    y = x.copy()
    y.sort()
    return np.median(y[2:]) * np.sum(x * x)


def _summing_loop(derivative):
    """An ``@njit`` loop summing ``derivative`` over the rows of its argument."""
    @njit
    def loop(xs):
        s = 0.0
        for k in range(xs.shape[0]):
            s += np.sum(derivative(xs[k]))
        return s
    return loop


def test_a_loose_typed_derivative_called_from_njit_code_is_said_to_be_unchecked(monkeypatch) -> None:
    """Called from ``@njit`` code a derivative runs with no Python around it, so no check: where it needed loose
    types, an :class:`~pyjlad.UncheckedDerivativeWarning` says so when the caller compiles (here the wrong one,
    with copy typing off), once; a derivative built without loose types raises none."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    typed_loop = _summing_loop(pyjlad.grad(njit(lambda x: np.sum(x * x * x))))
    xs = np.stack([X, X + 0.1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", pyjlad.UncheckedDerivativeWarning)
        assert typed_loop(xs) == pytest.approx(float(np.sum(3.0 * xs * xs)), rel=1e-12)  # hand-derived

    monkeypatch.setattr(differentiate, "_copies_typed", lambda m: m.decode() if isinstance(m, bytes) else m)
    loose_loop = _summing_loop(pyjlad.grad(njit(median_of_sorted_tail_by_squares)))

    with pytest.warns(pyjlad.UncheckedDerivativeWarning, match="reverse-mode derivative of "
                                                               "median_of_sorted_tail_by_squares .* loose types") as said:
        loose_loop(xs)
    assert {w.filename for w in said if issubclass(w.category, pyjlad.UncheckedDerivativeWarning)} == {__file__}
    np.testing.assert_array_equal(xs[0], X)
