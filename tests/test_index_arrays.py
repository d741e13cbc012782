"""Derivatives of functions that clamp an array of indices and gather with it, against ``jax`` (float64).

Piecewise-linear interpolation written out (``np.searchsorted``, then the index array clamped with ``np.clip``,
or with ``np.minimum`` and ``np.maximum`` as two statements) was refused until 2026-12-05: Enzyme v0.0.289,
not knowing that the array Numba fills with the clamped indices holds integers, took an index for a value with a
derivative ("Cannot deduce adding type of: load i64" in reverse mode, an assertion on the vectorized
``llvm.smin`` of ``np.clip``, "unknown intrinsic" ``llvm.smax`` in forward mode). pyjlad now retries such a
failure with the module's integer loads and stores typed (:func:`pyjlad.engines.differentiate._integer_taken_active`)
before loose types: each case here builds without them. Oracle: ``jax.grad``, ``jax.jvp`` and ``jax.hessian``
of twins written with ``jnp``, from copies taken before the call.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.activity import Activity
from pyjlad.engines import compiled_sweep
from pyjlad.export import numba_argtypes
from pyjlad.sweep import Sweep

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

XP = np.array([-2.0, -0.5, 0.0, 0.7, 1.5, 3.0])


def _interpolated(x, fp):
    # The segment to the right of a point (the last segment at the last point), as jnp.interp takes it.
    j = np.clip(np.searchsorted(XP, x, side="right") - 1, 0, XP.shape[0] - 2)
    slope = (fp[j + 1] - fp[j]) / (XP[j + 1] - XP[j])
    return np.sum((fp[j] + slope * (x - XP[j])) * x)


def _interpolated_jax(x, fp):
    return jnp.sum(jnp.interp(x, jnp.asarray(XP), fp) * x)


def _clamped_in_two_statements(x, fp):
    j = np.minimum(np.searchsorted(XP, x, side="right") - 1, 4)
    j = np.maximum(j, 0)
    return np.sum(fp[j] * x * x)


def _clamped_in_two_statements_jax(x, fp):
    j = jnp.maximum(jnp.minimum(jnp.searchsorted(jnp.asarray(XP), x, side="right") - 1, 4), 0)
    return jnp.sum(fp[j] * x * x)


def _chosen_then_clipped(x, fp):
    k = np.where(x > 0.0, 1, 0)
    k = np.clip(k + 2, 0, 5)
    return np.sum(fp[k] * fp[k] * x)


def _chosen_then_clipped_jax(x, fp):
    k = jnp.clip(jnp.where(x > 0.0, 1, 0) + 2, 0, 5)
    return jnp.sum(fp[k] * fp[k] * x)


CASES = {
    "interpolation with np.clip": (_interpolated, _interpolated_jax),
    "np.minimum then np.maximum": (_clamped_in_two_statements, _clamped_in_two_statements_jax),
    "np.where then np.clip": (_chosen_then_clipped, _chosen_then_clipped_jax),
}


def _arguments():
    # x on the points and between them (jnp.interp holds fp constant outside them; the twin written out does not).
    return np.array([-2.0, -0.5, 0.0, 0.3, 0.7, 3.0, 2.2, -1.1]), np.array([4.0, 0.25, 0.0, 0.49, 2.25, 9.0])


def assert_gradient_agrees(function, twin, x: np.ndarray, fp: np.ndarray) -> None:
    """``pyjlad.grad`` of ``function`` in both arguments equals ``jax.grad`` of ``twin``; neither is changed."""
    before = (x.copy(), fp.copy())
    got = pyjlad.grad(function, argnums=(0, 1))(x, fp)
    want = jax.grad(twin, argnums=(0, 1))(*map(jnp.asarray, before))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(fp, before[1])


@pytest.mark.parametrize("case", CASES)
def test_gradient(case: str) -> None:
    assert_gradient_agrees(*CASES[case], *_arguments())


@pytest.mark.parametrize("case", CASES)
def test_jvp(case: str) -> None:
    function, twin = CASES[case]
    x, fp = _arguments()
    tangents = (np.linspace(0.1, 0.8, x.shape[0]), np.linspace(-0.3, 0.3, fp.shape[0]))
    before = (x.copy(), fp.copy())
    _, got = pyjlad.jvp(function, (x, fp), tangents)
    _, want = jax.jvp(twin, tuple(map(jnp.asarray, before)), tuple(map(jnp.asarray, tangents)))
    np.testing.assert_allclose(got, float(want), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(fp, before[1])


@pytest.mark.parametrize("case", CASES)
def test_hessian(case: str) -> None:
    function, twin = CASES[case]
    x, fp = _arguments()
    before = (x.copy(), fp.copy())
    got = pyjlad.hessian(function, x, fp)
    want = jax.hessian(twin)(*map(jnp.asarray, before))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(fp, before[1])


@pytest.mark.parametrize("case", CASES)
def test_built_without_loose_types(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    f = njit(CASES[case][0])
    args = _arguments()
    for mode in ("reverse", "forward"):
        sweep = Sweep("ad", mode, (Activity.DUP, Activity.DUP))
        assert not compiled_sweep(f, sweep, None)._build_once(numba_argtypes(args)).loose_types, mode
