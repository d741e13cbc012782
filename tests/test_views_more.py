"""Flips, rotations, axis swaps, transposes in a given order and rolls, against JAX in float64.

* ``np.roll`` of a 2-D array aborted Enzyme's forward mode ("found ==
  gutils->invertedPointers.end()"): Numba writes the exit block of ``np.roll``
  before the block computing the element count it stores, and Enzyme v0.0.289
  visits blocks in written order. pyjlad lays out the blocks in dominance
  order before every Enzyme run (:mod:`pyjlad.block_order`).
* ``np.swapaxes``, ``np.transpose(x, axes)``, ``x.transpose(...)`` and ``np.rot90``
  with ``k`` = 1 or 3 (which Numba writes with ``np.swapaxes``) stay refused: Numba
  permutes the shape and strides in ``numba.np.arrayobj.permute_arrays``, whose
  check for a repeated axis builds a ``set`` (``NRT_MemInfo_varsize_alloc``, a
  runtime call Enzyme cannot see into). Making that integer-only function inactive
  differentiates them, but the set it then builds inside the derivative mixes
  pyjlad's portable MemInfos with Numba's runtime, and a later Numba call of
  ``np.rot90`` crashed: so the refusal names the construct and the rewrite that
  differentiates (``np.flipud(x.T)`` for ``np.rot90(x)``), checked here.

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


REORDERINGS = [
    pytest.param(njit(lambda x: np.rot90(x) * x), "np.rot90", SQUARE, id="rot90"),
    pytest.param(njit(lambda x: np.rot90(x, 3) * 2.0), "np.rot90", WIDE, id="rot90 k=3"),
    pytest.param(njit(lambda x: np.swapaxes(x, 0, 2) * 2.0), "np.swapaxes", CUBE, id="swapaxes 3-D"),
    pytest.param(njit(lambda x: np.transpose(x, (1, 2, 0)) * 2.0), "np.transpose", CUBE, id="transpose axes"),
]


@pytest.mark.parametrize("f, label, x", REORDERINGS)
def test_an_axis_reordering_is_refused_with_its_rewrite(f, label, x):
    before = x.copy()
    with pytest.raises(pyjlad.EnzymeError) as info:
        pyjlad.jacobian(f, x)
    message = str(info.value)
    assert message.splitlines()[0].endswith("it uses an axis reordering (np.swapaxes, np.rot90 with k=1 or 3, "
                                            "np.transpose(x, axes), x.transpose(axes), np.moveaxis: Numba checks "
                                            "the new axis order with a set) (Numba implements it with "
                                            "NRT_MemInfo_varsize_alloc, which Enzyme cannot see into).")
    assert label in message.splitlines()[1]  # the user's line
    assert "np.flipud(x.T)" in message and "known limit" in message
    assert x.tobytes() == before.tobytes()


@pytest.mark.parametrize("f, jf, x", [CASES[4], CASES[1], CASES[-2]], ids=["flipud(x.T)", "flipud", "roll 2-D"])
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
