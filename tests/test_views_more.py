"""Flips, rotations, axis swaps, transposes in a given order and rolls, against JAX in float64.

* ``np.roll`` of a 2-D array aborted Enzyme's forward mode ("found ==
  gutils->invertedPointers.end()"): Numba writes the exit block of ``np.roll``
  before the block computing the element count it stores, and Enzyme v0.0.289
  visits blocks in written order. pyjlad lays out the blocks in dominance
  order before every Enzyme run (:mod:`pyjlad.block_order`).
* ``np.swapaxes``, ``np.transpose(x, axes)``, ``x.transpose(axes)``, ``np.moveaxis`` and
  ``np.rot90`` with ``k`` = 1 or 3 (which Numba writes with ``np.swapaxes``) were refused
  until 2026-12-06: Numba permutes the shape and strides in
  ``numba.np.arrayobj.permute_arrays``, whose check for a repeated axis builds a ``set``
  (``NRT_MemInfo_varsize_alloc``, then undefined in pyjlad's runtime), and ``np.moveaxis``
  sorts ``zip(destination, source)`` into a list grown in Numba's ``list.extend``. pyjlad's
  runtime now grows a set's table itself, and :mod:`pyjlad.list_growth` follows a list into
  the function that grows it. The set's history: made inactive with Numba's own runtime
  underneath, a later Numba ``np.rot90`` call crashed (runtimes mixed, before each loaded
  derivative's definitions were renamed); ``test_numba_reorderings_run_after_their_derivatives``
  calls Numba's own after each derivative.

Every derivative is compared with JAX's in float64 (computed from copies of the
inputs taken before pyjlad sees them); the caller's arrays are checked unchanged.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.block_order import dominance_ordered
from pyjlad.toolchain import locate

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261124)
SQUARE = RNG.standard_normal((3, 3))
WIDE = RNG.standard_normal((3, 4))
CUBE = RNG.standard_normal((2, 3, 4))
VECTOR = RNG.standard_normal(7)


def _case(name, numba_body, jax_body, x):
    return pytest.param(njit(numba_body), jax_body, x, id=name)


# (Numba function, JAX twin, argument): each returns an array that depends on x's layout.
CASES = [
    _case("fliplr", lambda x: np.fliplr(x) * x, lambda x: jnp.fliplr(x) * x, WIDE),
    _case("flipud", lambda x: np.flipud(x) * 2.0, lambda x: jnp.flipud(x) * 2.0, WIDE),
    _case("rot90 k=2", lambda x: np.rot90(x, 2) * x, lambda x: jnp.rot90(x, 2) * x, WIDE),
    _case("rot90 k=4", lambda x: np.rot90(x, 4) * 2.0, lambda x: jnp.rot90(x, 4) * 2.0, WIDE),
    _case("rot90 k=1 written np.flipud(x.T)", lambda x: np.sin(np.flipud(x.T)), lambda x: jnp.sin(jnp.rot90(x)), WIDE),
    _case("rot90 k=3 written np.fliplr(x.T)", lambda x: np.fliplr(x.T) ** 2, lambda x: jnp.rot90(x, 3) ** 2, WIDE),
    _case("fliplr + rot90 written np.flipud(x.T)", lambda x: np.fliplr(x) + np.flipud(x.T),
          lambda x: jnp.fliplr(x) + jnp.rot90(x), SQUARE),
    _case("roll 1-D", lambda x: np.roll(x, 2) * x, lambda x: jnp.roll(x, 2) * x, VECTOR),
    _case("roll 1-D negative shift", lambda x: np.roll(x, -3) ** 2, lambda x: jnp.roll(x, -3) ** 2, VECTOR),
    _case("roll 2-D flattened", lambda x: np.roll(x, 2) * x, lambda x: jnp.roll(x, 2) * x, WIDE),
    _case("roll 3-D flattened", lambda x: np.sin(np.roll(x, 5)), lambda x: jnp.sin(jnp.roll(x, 5)), CUBE),
]

# Axis reorderings Numba checks with a set (and np.moveaxis with a list sorted from a zip).
REORDERINGS = [
    _case("rot90", lambda x: np.rot90(x) * x, lambda x: jnp.rot90(x) * x, SQUARE),
    _case("rot90 k=3", lambda x: np.cos(np.rot90(x, 3)), lambda x: jnp.cos(jnp.rot90(x, 3)), WIDE),
    _case("swapaxes 3-D", lambda x: np.swapaxes(x, 0, 2) * 2.0, lambda x: jnp.swapaxes(x, 0, 2) * 2.0, CUBE),
    _case("transpose axes", lambda x: np.sin(np.transpose(x, (1, 2, 0))) * np.arange(24.0).reshape(3, 4, 2),
          lambda x: jnp.sin(jnp.transpose(x, (1, 2, 0))) * jnp.arange(24.0).reshape(3, 4, 2), CUBE),
    _case("x.transpose(axes)", lambda x: x.transpose((2, 0, 1)) ** 2, lambda x: x.transpose((2, 0, 1)) ** 2, CUBE),
    _case("moveaxis", lambda x: np.moveaxis(x, 0, -1)[..., 0] * 3.0, lambda x: jnp.moveaxis(x, 0, -1)[..., 0] * 3.0,
          CUBE),
    _case("moveaxis two axes", lambda x: np.exp(np.moveaxis(x, (0, 1), (2, 0))),
          lambda x: jnp.exp(jnp.moveaxis(x, (0, 1), (2, 0))), CUBE),
]
CASES += REORDERINGS


def _weights(shape):
    return np.linspace(-1.0, 2.0, int(np.prod(shape))).reshape(shape)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
@pytest.mark.parametrize("f, jf, x", CASES)
def test_jacobian_of_a_view(f, jf, x, mode):
    before = x.copy()
    expected = jax.jacfwd(jf)(jnp.asarray(before))
    got = pyjlad.jacobian(f, x, mode=mode)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-12, atol=1e-12)
    assert x.tobytes() == before.tobytes()


@pytest.mark.parametrize("f, jf, x", CASES)
def test_jvp_and_vjp_of_a_view(f, jf, x):
    before = x.copy()
    tangent = _weights(x.shape)
    value, jvp = pyjlad.jvp(f, (x,), (tangent,))
    expected_value, expected_jvp = jax.jvp(jf, (jnp.asarray(before),), (jnp.asarray(tangent),))
    np.testing.assert_allclose(value, np.asarray(expected_value), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(jvp, np.asarray(expected_jvp), rtol=1e-12, atol=1e-12)
    cotangent = _weights(value.shape)[::-1].copy()
    _, (vjp,) = pyjlad.vjp(f, (x,), cotangent)
    expected_vjp = jax.vjp(jf, jnp.asarray(before))[1](jnp.asarray(cotangent))[0]
    np.testing.assert_allclose(vjp, np.asarray(expected_vjp), rtol=1e-12, atol=1e-12)
    assert x.tobytes() == before.tobytes()


@njit
def rotated_energy(x):
    return np.sum(np.flipud(x.T) * np.roll(x, 1) + x.T ** 2)


def test_gradient_through_rotations_rolls_and_transposes():
    x = WIDE[:3, :3].copy()
    before = x.copy()
    expected = jax.grad(lambda x: jnp.sum(jnp.rot90(x) * jnp.roll(x, 1) + x.T ** 2))(jnp.asarray(before))
    np.testing.assert_allclose(pyjlad.gradient(rotated_energy, x), np.asarray(expected), rtol=1e-12, atol=1e-12)
    assert x.tobytes() == before.tobytes()


@pytest.mark.parametrize("f, jf, x", REORDERINGS[:1] + REORDERINGS[3:4])
def test_hessian_through_an_axis_reordering(f, jf, x):
    before = x.copy()
    weights = _weights(f(before).shape)

    def scalar(x):
        return np.sum(np.sin(f(x)) * weights)

    expected = jax.hessian(lambda x: jnp.sum(jnp.sin(jf(x)) * weights))(jnp.asarray(before))
    got = pyjlad.hessian(njit(scalar), x)
    np.testing.assert_allclose(got.reshape(expected.shape), np.asarray(expected), rtol=1e-11, atol=1e-11)
    assert x.tobytes() == before.tobytes()


@njit
def _numba_reorderings(x):
    return np.rot90(x)[0, 0] + np.swapaxes(x, 0, 1)[0, 1] + np.transpose(x, (1, 0))[1, 0] + np.moveaxis(x, 0, 1)[1, 1]


def test_numba_reorderings_run_after_their_derivatives():
    """Numba's own functions that build sets and sorted lists keep running (and agreeing with NumPy) between and
    after derivatives of the same constructs: no runtime of a loaded derivative is reached by Numba's code."""
    x = SQUARE.copy()
    want = np.rot90(x)[0, 0] + np.swapaxes(x, 0, 1)[0, 1] + np.transpose(x, (1, 0))[1, 0] + np.moveaxis(x, 0, 1)[1, 1]
    for f, _, y in [p.values for p in REORDERINGS] * 2:
        pyjlad.vjp(f, (y,), _weights(f(y).shape))
        for _ in range(50):
            assert _numba_reorderings(x) == want
            np.testing.assert_allclose(f(y), f.py_func(y), rtol=1e-14, atol=0)


@pytest.mark.parametrize("f, jf, x", [c for c in CASES if c.id in ("rot90 k=1 written np.flipud(x.T)", "flipud",
                                                                    "roll 2-D flattened")])
def test_float32_views(f, jf, x):
    x32 = x.astype(np.float32)
    before = x32.copy()
    expected = jax.jacfwd(jf)(jnp.asarray(before, dtype=jnp.float64))
    for mode in ("reverse", "forward"):
        got = pyjlad.jacobian(f, x32, mode=mode)
        assert got.dtype == np.result_type(f(before).dtype, np.float32)  # as Numba computes it
        np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-5, atol=1e-6)
    assert x32.tobytes() == before.tobytes()


_OUT_OF_ORDER = """\
define i64 @f(i64 %n) {
entry:
  br label %1
2:
  %3 = add i64 %0, 1
  ret i64 %3
1:
  %0 = mul i64 %n, 2
  br label %2
}
"""


def test_blocks_are_laid_out_after_their_dominators():
    """Numbered values and blocks are renamed, so LLVM reads the reordered function; the code is the same."""
    text = _OUT_OF_ORDER.replace("%0 = mul", "%4 = mul").replace("%0, 1", "%4, 1")
    ordered = dominance_ordered(text)
    assert ordered.index(".pj1:") < ordered.index(".pj2:")
    assert "%.pj3 = add i64 %.pj4, 1" in ordered
    opt = locate().opt
    subprocess.run([str(opt), "-passes=verify", "-disable-output"], input=ordered.encode(), check=True)


def test_ordered_functions_are_left_as_they_are():
    text = "define void @g() {\nentry:\n  br label %next\nnext:\n  ret void\n}\n"
    assert dominance_ordered(text) == text
