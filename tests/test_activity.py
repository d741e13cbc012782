"""pyjlad.autodiff with Enzyme's activities, against hand-derived derivatives."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad import Active, Const, Duplicated, DuplicatedNoNeed, Forward, Reverse


@njit
def weighted(x, w, c, n):
    s = 0.0
    for i in range(n):
        s += w[i] * math.sin(c * x[i])
    return s


def _data():
    rng = np.random.default_rng(3)
    return rng.normal(size=6), rng.normal(size=6), 0.8


def test_reverse_active_duplicated_const() -> None:
    x, w, c = _data()
    dx = np.zeros(6)
    derivs, value = pyjlad.autodiff(Reverse, weighted, Duplicated(x, dx), Const(w), Active(c), 6)
    assert value == pytest.approx(float(np.sum(w * np.sin(c * x))), rel=1e-14)
    assert derivs[0] is None and derivs[1] is None and derivs[3] is None
    assert derivs[2] == pytest.approx(float(np.sum(w * x * np.cos(c * x))), rel=1e-12)
    np.testing.assert_allclose(dx, w * c * np.cos(c * x), rtol=1e-12)


def test_reverse_shadows_accumulate_like_enzyme() -> None:
    x, w, c = _data()
    dx = np.ones(6)
    pyjlad.autodiff(Reverse, weighted, Duplicated(x, dx), w, c, 6)
    pyjlad.autodiff(Reverse, weighted, Duplicated(x, dx), w, c, 6)
    np.testing.assert_allclose(dx, 1.0 + 2 * w * c * np.cos(c * x), rtol=1e-12)


def test_duplicated_no_need() -> None:
    x, w, c = _data()
    dx, dw = np.zeros(6), np.zeros(6)
    pyjlad.autodiff("reverse", weighted, DuplicatedNoNeed(x, dx), Duplicated(w, dw), c, 6)
    np.testing.assert_allclose(dx, w * c * np.cos(c * x), rtol=1e-12)
    np.testing.assert_allclose(dw, np.sin(c * x), rtol=1e-12)


def test_forward_mode_tangents() -> None:
    x, w, c = _data()
    v = np.linspace(-1.0, 1.0, 6)
    tangent, value = pyjlad.autodiff(Forward, weighted, Duplicated(x, v), w, Duplicated(c, 2.0), 6)
    expected = float(np.sum(w * c * np.cos(c * x) * v) + 2.0 * np.sum(w * x * np.cos(c * x)))
    assert tangent == pytest.approx(expected, rel=1e-12)
    assert value == pytest.approx(float(np.sum(w * np.sin(c * x))), rel=1e-14)


@njit
def scale_into(out, x, k):
    for i in range(x.shape[0]):
        out[i] = k * x[i] * x[i]


def test_function_returning_nothing_is_seeded_through_its_shadows() -> None:
    x = np.array([1.0, 2.0, 3.0])
    out, dout, dx = np.zeros(3), np.array([1.0, 0.0, 2.0]), np.zeros(3)
    derivs, value = pyjlad.autodiff(Reverse, scale_into, Duplicated(out, dout), Duplicated(x, dx), Active(0.5))
    assert value is None
    np.testing.assert_allclose(out, 0.5 * x * x)
    np.testing.assert_allclose(dx, np.array([1.0, 0.0, 2.0]) * 2 * 0.5 * x)
    assert derivs[2] == pytest.approx(1.0 * 1.0 + 2.0 * 9.0)
    np.testing.assert_array_equal(dout, 0.0)  # consumed, as in Enzyme
    tout = np.zeros(3)
    tangent, value = pyjlad.autodiff(Forward, scale_into, Duplicated(np.zeros(3), tout), Duplicated(x, np.ones(3)), 0.5)
    assert tangent is None and value is None
    np.testing.assert_allclose(tout, x)


def test_strided_shadow_is_written_back() -> None:
    base = np.arange(1.0, 9.0)
    x = base[::2]
    dx = np.zeros(4)  # contiguous, unlike x
    pyjlad.autodiff(Reverse, njit(lambda x: np.sum(x * x)), Duplicated(x, dx))
    np.testing.assert_allclose(dx, 2 * x)


def test_activity_errors() -> None:
    x, w, c = _data()
    with pytest.raises(TypeError, match="Active wraps a float scalar"):
        pyjlad.autodiff(Reverse, weighted, Active(x), w, c, 6)
    with pytest.raises(TypeError, match="mark it Active"):
        pyjlad.autodiff(Reverse, weighted, x, w, Duplicated(c, 1.0), 6)
    with pytest.raises(TypeError, match="Active applies"):
        pyjlad.autodiff(Forward, weighted, x, w, Active(c), 6)
    with pytest.raises(ValueError, match="shadow must be an ndarray of shape"):
        pyjlad.autodiff(Reverse, weighted, Duplicated(x, np.zeros(3)), w, c, 6)
    with pytest.raises(ValueError, match="mode"):
        pyjlad.autodiff("sideways", weighted, x, w, c, 6)
    with pytest.raises(TypeError, match="Active wraps a float scalar"):
        pyjlad.autodiff(Reverse, weighted, x, w, c, Active(6))
    with pytest.raises(TypeError, match="integers and bools have no derivative"):
        pyjlad.autodiff(Forward, weighted, x, w, c, Duplicated(6, 1))


def test_one_activity_enum_for_sweeps_and_drivers() -> None:
    # Sweep keeps Activity members whether given members or their string values: the two spellings are
    # one memo key, and an unknown value is refused where the sweep is described.
    from pyjlad.activity import Activity
    from pyjlad.engines.driver import ad_driver
    from pyjlad.errors import ArgumentError
    from pyjlad.export import export, numba_argtypes
    from pyjlad.sweep import Sweep

    spelled = Sweep("ad", "reverse", ("dup", "const", "active", "const"))
    members = Sweep("ad", "reverse", (Activity.DUP, Activity.CONST, Activity.ACTIVE, Activity.CONST))
    assert spelled == members and hash(spelled) == hash(members)
    assert all(type(a) is Activity for a in spelled.activities)
    with pytest.raises(ArgumentError, match="unknown activity 'out'"):
        Sweep("ad", "reverse", ("dup", "out"))
    with pytest.raises(ArgumentError, match="no Enzyme marker"):
        _ = Activity.DIFF.marker
    # The driver is the same module for either spelling, and names Enzyme's marker of each activity.
    x, w, c = _data()
    abi = export(weighted, numba_argtypes((x, w, c, 6))).abi
    driver = ad_driver(abi, "reverse", spelled.activities, salt="s")
    assert driver.text == ad_driver(abi, "reverse", ("dup", "const", "active", "const"), salt="s").text
    assert driver.active_scalars == (2,) and driver.shadow_args == (0,)
    # Parameters: x as meminfo, parent, nitems, itemsize, data (%p4), shape, stride; w as %p7..%p13;
    # c %p14; n %p15.
    call = next(line for line in driver.text.splitlines() if "call" in line and "@__enzyme_autodiff(" in line)
    assert "ptr @enzyme_dup, ptr %p4, ptr %shadow0," in call and "ptr @enzyme_out, double %p14," in call
    assert call.count("@enzyme_out") == 1 and "ptr @enzyme_const, ptr %p11," in call
    noneed = ad_driver(abi, "reverse", (Activity.DUPNONEED, "const", "active", "const"), salt="s").text
    assert "ptr @enzyme_dupnoneed, ptr %p4, ptr %shadow0," in noneed


@pytest.mark.parametrize("mode", [pyjlad.Reverse, pyjlad.Forward])
def test_a_read_only_shadow_is_refused_in_pyjlads_terms(mode) -> None:
    """Was NumPy's own ValueError ("assignment destination is read-only"), no PyjladError (a user-style probe)."""
    x, dx = np.array([1.0, 2.0]), np.zeros(2)
    dx.flags.writeable = False
    with pytest.raises(pyjlad.ArgumentError, match=r"argument 0: the shadow is read-only .* pass a writable array"):
        pyjlad.autodiff(mode, lambda a: np.sum(a * a), pyjlad.Duplicated(x, dx))
    np.testing.assert_array_equal(x, [1.0, 2.0])
