"""Derivatives Enzyme builds only with loose types are checked against finite differences before they are
trusted (pyjlad/engines/loose_check.py).

The wrong derivative the check must catch is a real one: the median of a slice of a sorted copy, which
Enzyme v0.0.289 differentiated into a zero gradient before pyjlad typed such copies (session fix,
tests/test_sorted_copies.py). With that typing switched off for one test (``_copies_typed`` made the
identity, the disk cache off so that no other test can load the wrong derivative), Enzyme builds the same
wrong derivative again, with loose types; the check must refuse it. With the typing on, the same function's
loose-typed derivative is right (against ``jax.grad``) and must pass. Oracles: ``jax.grad`` in float64 and
hand-derived directional derivatives.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad import cache
from pyjlad.activity import Activity
from pyjlad.engines import compiled_sweep, differentiate, embedded, loose_check, objects
from pyjlad.engines.loose_check import LooseDerivativeCheck, LooseHessianCheck, directional_mismatch
from pyjlad.export import numba_argtypes
from pyjlad.sweep import Sweep
from tests.test_copies_as_loops import _newton_steps

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

X = np.array([0.3, -1.2, 2.5, 0.9, 1.7, -0.4, 3.1, 0.05])  # no ties


def median_of_sorted_tail(x):
    y = x.copy()
    y.sort()
    return np.median(y[2:]) * np.sum(x * x)


def median_of_sorted_tail_jax(x):
    return jnp.median(jnp.sort(x)[2:]) * jnp.sum(x * x)


def _built(f, args):
    """The reverse-mode sweep of ``f`` pyjlad builds for ``args`` (its Enzyme build)."""
    compiled = compiled_sweep(f, Sweep("ad", "reverse", (Activity.DUP,) * len(args)), None)
    return compiled._build_once(numba_argtypes(args))


def test_a_wrong_loose_typed_derivative_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setattr(differentiate, "_copies_typed", lambda m: m.decode() if isinstance(m, bytes) else m)
    f = njit(median_of_sorted_tail)
    x = X.copy()
    with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted") as info:
        pyjlad.grad(f)(x)
    assert "loose types" in str(info.value) and "central differences" in info.value.diagnostics
    with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted"):  # and on every later call
        pyjlad.grad(f)(x)
    np.testing.assert_array_equal(x, X)
    assert _built(f, (x,)).loose_types


def test_a_right_loose_typed_derivative_passes_the_check() -> None:
    f = njit(median_of_sorted_tail)
    x = X.copy()
    got = pyjlad.grad(f)(x)
    np.testing.assert_allclose(got, np.asarray(jax.grad(median_of_sorted_tail_jax)(jnp.asarray(X))), rtol=1e-13)
    np.testing.assert_array_equal(x, X)
    assert _built(f, (x,)).loose_types  # (so the check ran on its first call)


def test_a_derivative_built_without_loose_types_is_recorded_so_and_kept_on_disk() -> None:
    # A function of its own, so that its derivative is built here: its record says no loose types. The twin
    # (another dispatcher, the same code) finds the derivative on disk, and the record with it.
    def smooth(x):
        return np.sum(np.sin(x) * x)

    first, again = njit(smooth), njit(smooth)
    assert not _built(first, (X.copy(),)).loose_types
    assert not _built(again, (X.copy(),)).loose_types
    np.testing.assert_allclose(pyjlad.grad(again)(X.copy()), np.sin(X) + X * np.cos(X), rtol=1e-14)


def test_the_marker_reaches_the_loaded_library_through_the_machine_code_entry() -> None:
    # One module twice, marked and not, each compiled to machine code under a key of its own and loaded again
    # from that entry in a fresh state (as a later process would).
    from test_native import LOOP_IR, _bitcode

    for marked in (False, True):
        bitcode = _bitcode(LOOP_IR)
        bitcode = objects.mark_loose_types(bitcode) if marked else bitcode
        key = cache.cache_key("test-loose-marker", secrets.token_hex(16))
        built = embedded._load_library(key, lambda b=bitcode: b, "driver", "a marked module")
        assert objects.built_with_loose_types(built) is marked
        if cache.get(objects._object_key(key)) is not None:  # (unless the disk cache is off here)
            again = embedded._load_library(key, lambda: b"", "driver", "a marked module")  # from the cache
            assert objects.built_with_loose_types(again) is marked


def _cubes(a):
    return float(np.sum(a[0] ** 3))


def test_directional_mismatch_accepts_a_right_derivative_and_catches_a_lost_one() -> None:
    x, v = np.array([1.0, 2.0, -0.5]), np.array([1.0, -1.0, 2.0])
    exact = float(np.sum(3 * x * x * v))  # hand-derived: d/dt sum((x + t v)^3) at 0
    assert directional_mismatch(_cubes, (x,), {0: v}, exact) is None
    assert directional_mismatch(_cubes, (x,), {0: v}, exact * (1 + 1e-9)) is None  # rounding
    found = directional_mismatch(_cubes, (x,), {0: v}, 0.0)
    assert found is not None and found[0] == 0.0 and found[1] == pytest.approx(exact, rel=1e-8)
    partial = exact - 3 * x[2] ** 2 * v[2]  # one component's adjoint lost
    assert directional_mismatch(_cubes, (x,), {0: v}, partial) is not None
    np.testing.assert_array_equal(x, [1.0, 2.0, -0.5])  # differences taken on copies


def test_directional_mismatch_says_nothing_where_it_cannot_judge() -> None:
    v = {0: np.array([1.0])}
    kink = np.array([0.0])  # |x| at 0: the central differences (0) agree, the one-sided ones (1, -1) do not
    assert directional_mismatch(lambda a: float(abs(a[0][0])), (kink,), v, 1.0) is None
    tie = np.array([0.7, 0.7])  # a tie in a sort: the median of two moves with the larger one
    assert directional_mismatch(lambda a: float(np.max(a[0])), (tie,), {0: np.array([1.0, -1.0])}, 1.0) is None
    jump = np.array([1e-7])  # a step inside the wider difference only: the two steps disagree
    assert directional_mismatch(lambda a: float(a[0][0] > 0), (jump,), v, 0.0) is None

    def fails(a):
        if a[0][0] > 1.0:
            raise ValueError("outside the domain")
        return float(a[0][0])

    assert directional_mismatch(fails, (np.array([1.0]),), v, 5.0) is None
    assert directional_mismatch(lambda a: float(np.log(a[0][0] - 1.0)), (np.array([1.0]),), v, 5.0) is None


def _squares(x):
    return float(np.sum(x * x))


def _checked(gradient: np.ndarray, x: np.ndarray) -> None:
    """``LooseDerivativeCheck.after`` for a sweep of ``_squares`` at ``x`` that added ``gradient`` to a zero shadow."""
    check = LooseDerivativeCheck(_squares, "squares", shadow_args=(0,), active_scalars=())
    check.before((x,), (np.zeros_like(x),))
    check.after((gradient,), (), 1.0)


def test_an_error_orthogonal_to_the_first_direction_is_caught_by_another(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.array([1.0, 2.0, 3.0])
    first = np.random.default_rng(20261130).standard_normal(3)  # the check's first direction
    error = np.cross(first, [1.0, 0.0, 0.0])  # orthogonal to it: that direction alone agrees exactly
    wrong = 2.0 * x + 0.5 * error / np.linalg.norm(error)
    _checked(2.0 * x, x)  # the right gradient (hand-derived) passes
    monkeypatch.setattr(loose_check, "DIRECTIONS", 1)
    _checked(wrong, x)  # one direction misses it
    monkeypatch.setattr(loose_check, "DIRECTIONS", 3)
    with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted"):
        _checked(wrong, x)


# Hessian-vector products (reverse over forward) built with loose types -------------------------------------------

def median_of_sorted_tail_squared(x):
    y = x.copy()
    y.sort()
    return np.median(y[2:]) ** 2 + np.sum(np.sin(x))


def smallest_squares_times_exp_sum(x):
    y = np.sort(x)
    return np.sum(y[:3] * y[:3]) * np.sum(np.exp(x))


def test_a_wrong_loose_typed_hessian_vector_product_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real one, with pyjlad's typing on (a user-style probe, 2026-12-04): Enzyme v0.0.289 needs loose types for
    the Hessian-vector product of ``np.median`` of a sorted copy, and that product lost the term
    ``grad m (grad s . v)`` (entries 3 and 4 off by 1.69 against ``jax``) while the gradient and the jvp were
    right. Refused, then and later; and so is ``hessian``, whose first column alone (``e_0``) is blind to it."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    x, v = X.copy(), np.linspace(-1.0, 1.0, 8)
    f = njit(median_of_sorted_tail)
    with pytest.raises(pyjlad.EnzymeError, match="Hessian-vector product of median_of_sorted_tail cannot be trusted"):
        pyjlad.hvp(f, (x,), v)
    with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted"):  # and on every later call
        pyjlad.hvp(f, (x,), v)
    np.testing.assert_array_equal(x, X)
    g = njit(median_of_sorted_tail_squared)
    with pytest.raises(pyjlad.EnzymeError, match="Hessian-vector product of median_of_sorted_tail_squared"):
        pyjlad.hessian(g, X.copy())


def test_a_right_loose_typed_hessian_vector_product_passes_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sum of the three smallest squares times a sum of exponentials: loose types too, and right (``jax``)."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    f = njit(smallest_squares_times_exp_sum)
    assert _built(f, (X,)).loose_types  # (the gradient's build: the product's is loose-typed as well)

    def twin(x):
        y = jnp.sort(x)
        return jnp.sum(y[:3] * y[:3]) * jnp.sum(jnp.exp(x))

    v = np.random.default_rng(5).standard_normal(8)
    expected = np.asarray(jax.jvp(jax.grad(twin), (jnp.asarray(X),), (jnp.asarray(v),))[1])
    np.testing.assert_allclose(pyjlad.hvp(f, (X.copy(),), v.copy()), expected, rtol=1e-10)
    np.testing.assert_allclose(pyjlad.hessian(f, X.copy()), np.asarray(jax.hessian(twin)(jnp.asarray(X))), rtol=1e-10)


def _quartic(x):
    return float(np.sum(x ** 4)) + float(x[0] * x[1])


def _quartic_hessian(x):
    """Hand-derived: diag(12 x^2) plus 1 at (0, 1) and (1, 0)."""
    h = np.diag(12.0 * x * x)
    h[0, 1] = h[1, 0] = 1.0
    return h


def _hessian_checked(x, v, hv, hessian_at=None):
    """``LooseHessianCheck.after`` for a product ``hv`` of ``_quartic`` at ``x`` along ``v``; ``hessian_at(x)``: the
    derivative's Hessian at other points (its products through ``again``)."""
    check = LooseHessianCheck(_quartic, "quartic", wrt=0)
    check.before((x,), (v, np.zeros_like(x), np.zeros_like(x)))
    again = None if hessian_at is None else (lambda point, w: ([w, None, hessian_at(point[0]) @ w], []))
    check.after((v, np.zeros_like(x), hv), (), 0.0, again=again)


def _lost_corner(x):
    wrong = _quartic_hessian(x)
    wrong[2, 2] = 0.0  # a lost term e_0 cannot see
    return wrong


def test_the_hessian_check_judges_the_calls_vector_and_others_from_the_derivative() -> None:
    x = np.array([0.5, -1.0, 2.0])
    e0 = np.array([1.0, 0.0, 0.0])
    _hessian_checked(x, e0, _quartic_hessian(x) @ e0, hessian_at=_quartic_hessian)  # right (hand-derived)
    _hessian_checked(x, e0, _lost_corner(x) @ e0)  # the call's own vector alone is blind to it
    with pytest.raises(pyjlad.EnzymeError, match="Hessian-vector product of quartic cannot be trusted"):
        _hessian_checked(x, e0, _lost_corner(x) @ e0, hessian_at=_lost_corner)
    v = np.array([0.3, 1.0, -2.0])
    with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted"):
        _hessian_checked(x, v, _lost_corner(x) @ v)


def _weighted_squares(x, u):
    return float(np.sum(u * x * x))


def test_a_first_call_where_the_lost_term_vanishes_is_judged_at_a_point_near_it_too() -> None:
    """At ``u = 0`` a derivative that lost ``2 u x`` agrees with the differences (both 0); the derivative at the
    moved point (through ``again``) does not. Hand-derived gradient: ``2 u x``."""
    x, u = np.array([1.0, -2.0]), np.zeros(2)
    check = LooseDerivativeCheck(_weighted_squares, "weighted", shadow_args=(0,), active_scalars=())
    check.before((x, u), (np.zeros(2),))
    check.after((np.zeros(2),), (), 1.0)  # the first point alone passes
    check.before((x, u), (np.zeros(2),))
    check.after((np.zeros(2),), (), 1.0, again=lambda point, start: ([2.0 * point[1] * point[0]], []))  # right
    check.before((x, u), (np.zeros(2),))
    with pytest.raises(pyjlad.EnzymeError, match="gradient of weighted cannot be trusted"):
        check.after((np.zeros(2),), (), 1.0, again=lambda point, start: ([np.zeros(2)], []))


def test_a_wrong_hessian_first_called_at_a_state_of_zeros_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A user-style probe (2026-12-04): ``A @ (...)`` in a fixed loop inside a loop of ``nsteps``. Its
    Hessian-vector product needs loose types and is wrong in Enzyme v0.0.289 (Hessian ``[[0.564, 8.52], [8.52,
    99.3]]`` against ``jax``'s ``[[0.694, 10.2], [10.2, 108.25]]`` at ``u0 = [0.1, 0.5, 0.9, 0.3]``); first
    called at ``u0 = 0``, where it and the differences are both 0, it passed the check and every later call
    was wrong. Now judged at a point near the first one too: refused. Since the copy of ``u0`` is a loop for
    Enzyme the product builds typed and right (``tests/test_copies_as_loops.py``); with that rewrite switched off
    here (``_copies_looped`` the identity), the wrong loose-typed product is built again and must be refused."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setattr(differentiate, "_copies_looped", lambda m: m.decode() if isinstance(m, bytes) else m)
    f = njit(_newton_steps)
    p = np.array([1.3, 0.7])
    with pytest.raises(pyjlad.EnzymeError, match="Hessian-vector product of _newton_steps cannot be trusted"):
        pyjlad.hvp(f, (p, np.zeros(4), 3), np.array([1.0, 0.0]))
    with pytest.raises(pyjlad.EnzymeError, match="cannot be trusted"):
        pyjlad.hessian(f, p, np.array([0.1, 0.5, 0.9, 0.3]), 3)


def test_a_hessian_vector_product_of_a_max_that_enzyme_gets_wrong_is_refused(monkeypatch) -> None:
    """``hvp`` of ``np.max(x * x)`` needed loose types and Enzyme v0.0.289's product was all zeros (``jax``:
    ``2 w_k`` at ``k = argmax x^2``): refused since the check covers products (found by this check in the
    test suite's own run, 2026-12-04). Since the float accesses are typed before loose types it builds typed and
    right (``tests/test_float_accesses.py``); with that typing switched off here (``_floats_typed`` the
    identity), the wrong loose-typed product is built again and must still be refused."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setattr(differentiate, "_floats_typed", lambda m: m.decode() if isinstance(m, bytes) else m)
    f = njit(lambda x: np.max(x * x))
    with pytest.raises(pyjlad.EnzymeError, match="Hessian-vector product of .* cannot be trusted"):
        pyjlad.hvp(f, (np.array([0.3, -2.0, 1.0, 0.7]),), np.array([0.5, 1.0, -1.0, 0.25]))
