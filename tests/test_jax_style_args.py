"""JAX-style arguments of grad/value_and_grad/gradient/value_and_gradient (issue 18, part 3).

Negative ``wrt`` and its ``argnums`` alias, ``has_aux=True``, tuple and NamedTuple arguments (nested)
with gradients in the same structure, keyword arguments passed through, and clear errors for the
rest. Every derivative is checked against ``jax.grad`` in float64 on the equivalent JAX program,
computed from copies of the inputs taken before the pyjlad call; the caller's arrays are checked
unchanged.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections import namedtuple
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import cfunc, njit
from numba.core.errors import TypingError

import pyjlad

jax.config.update("jax_enable_x64", True)

rng = np.random.default_rng(18)


class Params(NamedTuple):
    w: np.ndarray
    b: float


class Layer(NamedTuple):
    params: Params
    steps: int  # an integer leaf: a constant


Pair = namedtuple("Pair", "a c")


def assert_tree_close(got, want, rtol=1e-12, atol=1e-14):
    """``got`` (pyjlad) equals ``want`` (JAX) leaf by leaf, with the same container types."""
    if isinstance(want, tuple):
        assert type(got) is type(want), (type(got), type(want))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_tree_close(g, w, rtol, atol)
        return
    if want is None:
        assert got is None
        return
    want = np.asarray(want)
    if want.ndim:
        assert isinstance(got, np.ndarray) and got.shape == want.shape
    else:
        assert isinstance(got, float)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def snapshot(tree):
    return copy.deepcopy(tree)


def assert_unchanged(before, after):
    if isinstance(before, tuple):
        for b, a in zip(before, after):
            assert_unchanged(b, a)
    elif isinstance(before, np.ndarray):
        np.testing.assert_array_equal(before, after)
    else:
        assert before == after


def to_jax(tree):
    """The same tree with arrays as jnp arrays (NamedTuples stay NamedTuples)."""
    if isinstance(tree, tuple):
        parts = [to_jax(x) for x in tree]
        return type(tree)._make(parts) if hasattr(type(tree), "_fields") else tuple(parts)
    return jnp.asarray(tree) if isinstance(tree, np.ndarray) else tree


# ------------------------------------------------------------------ negative wrt and argnums
@njit
def three(x, y, z):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i] * y) * z[i] ** 2
    return s * y


def three_jax(x, y, z):
    return jnp.sum(jnp.sin(x * y) * z ** 2) * y


@pytest.mark.parametrize("wrt", [-1, -2, -3, (-1, 0), (0, -2, 2)])
@pytest.mark.parametrize("spelling", ["wrt", "argnums"])
def test_negative_positions_count_from_the_end_like_jax_argnums(wrt, spelling) -> None:
    x, y, z = rng.normal(size=4), 0.7, rng.normal(size=4)
    before = snapshot((x, y, z))
    want = jax.grad(three_jax, argnums=wrt)(*to_jax(before))
    got = pyjlad.grad(three, **{spelling: wrt})(x, y, z)
    assert_tree_close(got, tuple(want) if isinstance(want, tuple) else want)
    value, got2 = pyjlad.value_and_gradient(three, x, y, z, **{spelling: wrt})
    assert value == pytest.approx(float(three_jax(*to_jax(before))), rel=1e-12)
    assert_tree_close(got2, tuple(want) if isinstance(want, tuple) else want)
    assert_unchanged(before, (x, y, z))


@pytest.mark.parametrize("wrt", [-1, -3])
def test_hessian_hvp_and_jacobian_count_negative_positions_from_the_end(wrt) -> None:
    x, y, z = rng.normal(size=4), 0.7, rng.normal(size=4)
    before = snapshot((x, y, z))
    args = to_jax(before)
    hess = jax.hessian(three_jax, argnums=wrt)(*args)
    assert_tree_close(pyjlad.hessian(three, x, y, z, wrt=wrt), np.asarray(hess))
    v = rng.normal(size=4)
    assert_tree_close(pyjlad.hvp(three, (x, y, z), v.copy(), wrt=wrt), np.asarray(hess) @ v)
    jac = jax.jacobian(three_jax, argnums=(wrt, 1))(*args)
    got = pyjlad.jacobian(three, x, y, z, wrt=(wrt, -2))
    assert len(got) == 2
    for g, j in zip(got, jac):
        np.testing.assert_allclose(g, np.asarray(j), rtol=1e-12, atol=1e-14)
    assert_unchanged(before, (x, y, z))
    with pytest.raises(pyjlad.ArgumentTypeError, match="-3..-1 from the end"):
        pyjlad.hessian(three, x, y, z, wrt=-4)


def test_a_position_named_twice_gets_its_own_array() -> None:
    x, z = rng.normal(size=4), rng.normal(size=4)
    want = jax.grad(three_jax, argnums=2)(jnp.asarray(x), 0.3, jnp.asarray(z))
    g1, g2 = pyjlad.grad(three, wrt=(-1, 2))(x, 0.3, z)
    assert g1 is not g2 and not np.shares_memory(g1, g2)
    assert_tree_close(g1, want)
    assert_tree_close(g2, want)


def test_wrt_and_argnums_together_are_refused() -> None:
    with pytest.raises(pyjlad.ArgumentTypeError, match="wrt or argnums"):
        pyjlad.grad(three, wrt=0, argnums=0)
    with pytest.raises(pyjlad.ArgumentTypeError, match="wrt or argnums"):
        pyjlad.gradient(three, np.ones(2), 1.0, np.ones(2), wrt=0, argnums=1)


@pytest.mark.parametrize("wrt", [-4, (0, -5), 3])
def test_positions_beyond_the_call_are_refused(wrt) -> None:
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="out of range"):
        pyjlad.grad(three, wrt=wrt)(np.ones(2), 1.0, np.ones(2))


def test_negative_position_of_an_integer_argument_is_refused_in_the_users_terms() -> None:
    with pytest.raises(pyjlad.UnsupportedFunctionError, match=r"argument 1 of .*int.*constant"):
        pyjlad.grad(njit(lambda x, n: x * n), wrt=-1)(2.0, 3)


# ------------------------------------------------------------------ has_aux
@njit
def loss_with_float_aux(x, y):
    r = x * y
    return np.sum(r * r), np.max(r)


@njit
def loss_with_array_aux(x, y):
    r = np.tanh(x) * y
    return np.sum(r ** 3), r * 2.0


@njit
def loss_with_tuple_aux(x, y):
    r = np.exp(x) * y
    return np.sum(r), (r, np.sum(x), x.shape[0])


def float_aux_jax(x, y):
    r = x * y
    return jnp.sum(r * r), jnp.max(r)


def array_aux_jax(x, y):
    r = jnp.tanh(x) * y
    return jnp.sum(r ** 3), r * 2.0


def tuple_aux_jax(x, y):
    r = jnp.exp(x) * y
    return jnp.sum(r), (r, jnp.sum(x), x.shape[0])


CASES_AUX = [(loss_with_float_aux, float_aux_jax), (loss_with_array_aux, array_aux_jax),
             (loss_with_tuple_aux, tuple_aux_jax)]


@pytest.mark.parametrize("f, f_jax", CASES_AUX, ids=["float", "array", "tuple"])
@pytest.mark.parametrize("wrt", [0, (0, 1), -1])
def test_has_aux_matches_jax(f, f_jax, wrt) -> None:
    x, y = rng.normal(size=5), 1.3
    before = snapshot((x, y))
    (want_value, want_aux), want_grad = jax.value_and_grad(f_jax, argnums=wrt, has_aux=True)(*to_jax(before))
    want_grad = tuple(want_grad) if isinstance(want_grad, tuple) else want_grad
    (value, aux), grads = pyjlad.value_and_grad(f, wrt=wrt, has_aux=True)(x, y)
    assert value == pytest.approx(float(want_value), rel=1e-12)
    assert_tree_close(grads, want_grad)
    aux_want = tuple(want_aux) if isinstance(want_aux, tuple) else want_aux
    if isinstance(aux_want, tuple):
        assert isinstance(aux, tuple) and len(aux) == len(aux_want)
        for a, b in zip(aux, aux_want):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-12)
    else:
        np.testing.assert_allclose(aux, np.asarray(aux_want), rtol=1e-12)
    g, aux2 = pyjlad.grad(f, argnums=wrt, has_aux=True)(x, y)
    assert_tree_close(g, want_grad)
    np.testing.assert_allclose(np.asarray(aux2[0] if isinstance(aux2, tuple) else aux2),
                               np.asarray(aux_want[0] if isinstance(aux_want, tuple) else aux_want), rtol=1e-12)
    assert pyjlad.gradient(f, x, y, wrt=wrt, has_aux=True)[1] is not None
    assert_unchanged(before, (x, y))


def test_has_aux_with_a_function_that_writes_its_argument_sees_the_callers_values() -> None:
    @njit
    def scales_in_place(x):
        s = np.sum(x * x)
        x *= 2.0  # the function's own write: done once by the sweep, never by aux's evaluation
        return s, s + 1.0

    x = np.array([1.0, 2.0])
    (value, aux), g = pyjlad.value_and_grad(scales_in_place, has_aux=True)(x)
    assert (value, aux) == (5.0, 6.0)
    np.testing.assert_allclose(g, [2.0, 4.0])


@pytest.mark.parametrize("body, match", [
    (lambda x: np.sum(x), r"must return a pair \(value, aux\).*float64"),
    (lambda x: (np.sum(x), 1.0, 2.0), r"must return a pair \(value, aux\).*tuple of 3"),
    (lambda x: (x * 2.0, 1.0), r"first entry .* is array.*real scalar"),
])
def test_has_aux_refuses_results_that_are_not_value_aux_pairs(body, match) -> None:
    with pytest.raises(pyjlad.UnsupportedFunctionError, match=match):
        pyjlad.grad(njit(body), has_aux=True)(np.ones(3))


def test_has_aux_must_be_a_bool() -> None:
    with pytest.raises(pyjlad.ArgumentTypeError, match="has_aux"):
        pyjlad.grad(three, has_aux=1)


def test_tuple_result_without_has_aux_says_to_use_it() -> None:
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="has_aux=True"):
        pyjlad.grad(loss_with_float_aux)(np.ones(3), 2.0)


# ------------------------------------------------------------------ tuples and NamedTuples
@njit
def model_loss(layer, data, pair):
    p = layer.params
    s = 0.0
    for i in range(data[0].shape[0]):
        pred = np.sum(p.w * data[0][i]) + p.b
        s += (pred - data[1][i]) ** 2
    return s / layer.steps + pair.a * pair.c ** 2 + math.sin(pair.c)


def model_loss_jax(layer_float, data, pair, steps):
    p = layer_float
    pred = data[0] @ p.w + p.b
    return jnp.sum((pred - data[1]) ** 2) / steps + pair.a * pair.c ** 2 + jnp.sin(pair.c)


def model_args():
    layer = Layer(Params(rng.normal(size=3), 0.25), 4)
    data = (rng.normal(size=(6, 3)), rng.normal(size=6))
    return layer, data, Pair(1.5, -0.4)


@pytest.mark.parametrize("wrt", [0, 1, 2, (0, 2), (2, 0, 1), -3])
def test_nested_namedtuples_and_tuples_get_gradients_in_their_structure(wrt) -> None:
    layer, data, pair = args = model_args()
    before = snapshot(args)

    def jax_loss(params, data, pair):
        return model_loss_jax(params, data, pair, before[0].steps)

    jax_wrt = tuple(p % 3 for p in wrt) if isinstance(wrt, tuple) else wrt % 3
    want = jax.grad(jax_loss, argnums=jax_wrt)(to_jax(before[0].params), to_jax(before[1]), to_jax(before[2]))
    # Layer's integer leaf has no gradient: its place holds None.
    def as_pyjlad(position, g):
        return Layer(g, None) if position == 0 else g

    if isinstance(wrt, tuple):
        want = tuple(as_pyjlad(p, g) for p, g in zip(jax_wrt, want))
    else:
        want = as_pyjlad(jax_wrt, want)
    got = pyjlad.grad(model_loss, wrt=wrt)(layer, data, pair)
    assert_tree_close(got, want)
    value, got2 = pyjlad.value_and_grad(model_loss, wrt=wrt)(layer, data, pair)
    assert value == pytest.approx(float(model_loss_jax(to_jax(before[0].params), to_jax(before[1]),
                                                         to_jax(before[2]), before[0].steps)), rel=1e-12)
    assert_tree_close(got2, want)
    assert_unchanged(before, args)


def test_the_gradient_of_a_namedtuple_is_that_namedtuple_type() -> None:
    g = pyjlad.gradient(model_loss, *model_args())
    assert type(g) is Layer and type(g.params) is Params and g.steps is None
    assert type(pyjlad.gradient(model_loss, *model_args(), wrt=2)) is Pair


@njit
def tuple_mix(t, scale):
    (a, (b, x)), y = t
    return scale * (a * b + np.sum(np.cos(x) * y))


def tuple_mix_jax(t, scale):
    (a, (b, x)), y = t
    return scale * (a * b + jnp.sum(jnp.cos(x) * y))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_nested_plain_tuples_with_float32_and_strided_arrays(dtype) -> None:
    big = rng.normal(size=(4, 8)).astype(dtype)
    t = ((1.5, (-0.5, big[:, ::2][1])), big[::-1, 3])  # strided and reversed views
    before = snapshot(t)
    want = jax.grad(tuple_mix_jax)(to_jax(before), 2.0)
    got = pyjlad.grad(tuple_mix)(t, 2.0)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    assert got[1].dtype == dtype and got[0][1][1].dtype == dtype
    assert_tree_close(got, want, rtol=rtol, atol=1e-6 if dtype == np.float32 else 1e-14)
    assert_unchanged(before, t)


def test_integer_and_bool_leaves_get_none() -> None:
    @njit
    def f(t):
        x, n, flag, idx = t
        return np.sum(x[idx] ** 2) * n if flag else 0.0

    x = np.array([1.0, 2.0, 3.0])
    g = pyjlad.grad(f)((x, 3, True, np.array([0, 2])))
    assert g[1] is None and g[2] is None and g[3] is None
    np.testing.assert_allclose(g[0], [6.0, 0.0, 18.0])


def test_a_tuple_without_floats_named_in_wrt_is_refused() -> None:
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="argument 1 .* no float"):
        pyjlad.grad(njit(lambda x, t: x * t[0]), wrt=1)(2.0, (1, 2))


def test_a_constant_tuple_argument_passes_through() -> None:
    x = rng.normal(size=3)
    g = pyjlad.grad(njit(lambda x, t: np.sum(x * t[0]) + t[1]))(x, (np.arange(3.0), 2.0))
    np.testing.assert_allclose(g, np.arange(3.0))


def test_empty_tuple_argument() -> None:
    assert pyjlad.grad(njit(lambda t, x: x * len(t)), wrt=1)((), 2.0) == 0.0


# ------------------------------------------------------------------ keyword arguments
@njit
def with_options(x, scale=1.0, offset=(0.0, 0.0), power=2):
    return scale * np.sum((x - offset[0]) ** power) + offset[1]


def with_options_jax(x, scale=1.0, offset=(0.0, 0.0), power=2):
    return scale * jnp.sum((x - offset[0]) ** power) + offset[1]


@pytest.mark.parametrize("kwargs", [{}, {"scale": 2.5}, {"power": 3}, {"offset": (0.5, 1.0), "scale": -1.0}])
def test_keyword_arguments_are_passed_through_and_defaults_filled(kwargs) -> None:
    x = rng.normal(size=4)
    before = x.copy()
    want_value, want = jax.value_and_grad(with_options_jax)(jnp.asarray(before), **kwargs)
    value, got = pyjlad.value_and_grad(with_options)(x, **kwargs)
    assert value == pytest.approx(float(want_value), rel=1e-12)
    assert_tree_close(got, want)
    assert_tree_close(pyjlad.gradient(with_options, x, **kwargs), want)
    np.testing.assert_array_equal(x, before)


def test_keyword_arguments_with_a_negative_position() -> None:
    x, y = rng.normal(size=3), 0.9
    want = jax.grad(lambda x, y, scale: scale * jnp.sum(x * y ** 2), argnums=-1)(jnp.asarray(x), y, scale=3.0)
    got = pyjlad.grad(njit(lambda x, y, scale=1.0: scale * np.sum(x * y ** 2)), argnums=-1)(x, y, scale=3.0)
    assert got == pytest.approx(float(want), rel=1e-12)


def test_keyword_arguments_are_not_differentiated() -> None:
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="keyword arguments are never differentiated"):
        pyjlad.grad(with_options, wrt=1)(np.ones(2), scale=2.0)


def test_unknown_keyword_is_refused_in_the_functions_terms() -> None:
    with pytest.raises(pyjlad.ArgumentTypeError, match="with_options.*scal"):
        pyjlad.grad(with_options)(np.ones(2), scal=2.0)


# ------------------------------------------------------------------ what is refused
@pytest.mark.parametrize("bad, match", [
    ({"w": np.ones(2)}, r"argument 0 is a dict.*NamedTuple"),
    ([np.ones(2), 1.0], r"argument 0 is a list.*tuple.*NumPy array"),
    ((np.ones(2), {"b": 1.0}), r"argument 0\[1\] is a dict.*NamedTuple"),
    ((np.ones(2), [1.0]), r"argument 0\[1\] is a list"),
    (Params(np.ones(2), "text"), r"argument 0.b is str"),
    ((np.ones(2), np.ones(2, complex)), r"argument 0\[1\] is an array of complex128.*real and imaginary"),
    ((np.ones(2), None), r"argument 0\[1\] is NoneType"),
])
def test_containers_pyjlad_cannot_pass_are_refused_with_what_to_use(bad, match) -> None:
    with pytest.raises(pyjlad.ArgumentTypeError, match=match):
        pyjlad.grad(njit(lambda p: 1.0))(bad)


def test_a_dict_keyword_argument_is_refused() -> None:
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"keyword argument 'offset' is a dict.*NamedTuple"):
        pyjlad.grad(with_options)(np.ones(2), offset={"a": 1.0})


def test_extended_derivatives_called_from_njit_code_give_a_clear_typing_error() -> None:
    df = pyjlad.grad(three, wrt=-1)

    @njit
    def uses(x):
        return df(x, 1.0, x)

    with pytest.raises(TypingError, match="cannot be called from @njit code.*non-negative wrt"):
        uses(np.ones(2))


def test_jacobian_hessian_and_hvp_refuse_tuple_arguments_with_what_to_do() -> None:
    f = njit(lambda t: t[0] * t[1])
    for call in (lambda: pyjlad.jacobian(f, (1.0, 2.0)), lambda: pyjlad.hessian(f, (1.0, 2.0)),
                 lambda: pyjlad.hvp(f, ((1.0, 2.0),), (1.0, 1.0))):
        with pytest.raises(pyjlad.ArgumentTypeError, match=r"argument 0 is a tuple.*pyjlad.grad"):
            call()


def test_hvp_refuses_a_vector_given_per_argument() -> None:
    """``v`` is the vector of argument ``wrt`` alone; a tuple of one entry per argument (as ``jvp`` takes)
    used to end in NumPy's "inhomogeneous shape" ValueError."""
    f = njit(lambda x, n: np.sum(x ** 3) * n)
    x = np.ones(3)
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"v is a tuple.*one vector of argument 0"):
        pyjlad.hvp(f, (x, 2), (np.ones(3), None))
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"tangent of argument 0 is not a float or an array"):
        pyjlad.jvp(f, (x, 2), ([np.ones(3), np.ones(2)], None))  # ragged


@njit
def layer_outputs(layer, x):
    p = layer.params
    y = np.tanh(x * p.w + p.b)
    return y * layer.steps, np.sum(y ** 2), layer.steps


def layer_outputs_jax(params, x, steps):
    y = jnp.tanh(x * params.w + params.b)
    return y * steps, jnp.sum(y ** 2)


def test_vjp_of_tuple_and_namedtuple_arguments_matches_jax() -> None:
    layer = Layer(Params(rng.normal(size=3), 0.3), 2)
    x = rng.normal(size=3)
    before = snapshot((layer, x))
    cot = (rng.normal(size=3), 0.7, None)
    value, cots = pyjlad.vjp(layer_outputs, (layer, x), cot)
    want_value, pullback = jax.vjp(lambda p, x: layer_outputs_jax(p, x, before[0].steps),
                                   to_jax(before[0].params), jnp.asarray(before[1]))
    want_params, want_x = pullback((jnp.asarray(cot[0]), cot[1]))
    np.testing.assert_allclose(value[0], np.asarray(want_value[0]), rtol=1e-12)
    assert value[2] == 2
    assert_tree_close(cots, (Layer(want_params, None), want_x))
    assert_unchanged(before, (layer, x))


def test_jvp_of_tuple_and_namedtuple_arguments_matches_jax() -> None:
    layer = Layer(Params(rng.normal(size=3), 0.3), 2)
    x = rng.normal(size=3)
    before = snapshot((layer, x))
    t_params = Params(rng.normal(size=3), -0.5)
    value, tangent = pyjlad.jvp(layer_outputs, (layer, x), (Layer(t_params, None), None))
    want_value, want_tangent = jax.jvp(lambda p: layer_outputs_jax(p, jnp.asarray(before[1]), before[0].steps),
                                       (to_jax(before[0].params),), (to_jax(t_params),))
    np.testing.assert_allclose(tangent[0], np.asarray(want_tangent[0]), rtol=1e-12)
    assert tangent[1] == pytest.approx(float(want_tangent[1]), rel=1e-12)
    assert tangent[2] is None
    assert_unchanged(before, (layer, x))


def test_jvp_tangent_of_the_wrong_structure_is_refused() -> None:
    with pytest.raises(pyjlad.ArgumentError, match=r"tangent of argument 0 must have the structure.*2 entries"):
        pyjlad.jvp(njit(lambda t: t[0] * t[1]), ((1.0, 2.0),), ((1.0,),))


def test_extended_transforms_pickle() -> None:
    df = pyjlad.value_and_grad(loss_with_float_aux, argnums=-2, has_aux=True)
    again = pickle.loads(pickle.dumps(df))
    x = np.array([0.5, -1.0])
    (v1, a1), g1 = df(x, 2.0)
    (v2, a2), g2 = again(x, 2.0)
    assert (v1, a1) == (v2, a2)
    np.testing.assert_array_equal(g1, g2)
    assert "has_aux=True" in repr(again)


def test_an_omitted_default_is_filled_in_as_in_jax() -> None:
    f = njit(lambda x, y=2.0: x * y)
    assert pyjlad.gradient(f, 1.0) == float(jax.grad(lambda x, y=2.0: x * y)(1.0)) == 2.0
    assert pyjlad.gradient(f, 1.0, wrt=-1) == 2.0


def test_one_array_twice_in_a_tuple_gets_a_gradient_per_entry_like_jax() -> None:
    x = rng.normal(size=3)
    want = jax.grad(lambda t: jnp.sum(t[0] * t[1] ** 2))((jnp.asarray(x), jnp.asarray(x)))
    assert_tree_close(pyjlad.grad(njit(lambda t: np.sum(t[0] * t[1] ** 2)))((x, x)), tuple(want))


def test_fortran_broadcast_and_float32_scalar_leaves() -> None:
    a = np.asfortranarray(rng.normal(size=(2, 3)))
    b = np.broadcast_to(rng.normal(size=1), (3,))
    before = snapshot((a, np.array(b), 2.0))

    def loss_jax(t):
        return jnp.sum(t[0] * t[0]) * t[2] + jnp.sum(t[1] * jnp.arange(3.0))

    want = jax.grad(loss_jax)(to_jax(before))
    got = pyjlad.grad(njit(lambda t: np.sum(t[0] * t[0]) * t[2] + np.sum(t[1] * np.arange(3.0))))(
        (a, b, np.float32(2.0)))
    assert_tree_close(got[:2], tuple(want)[:2], rtol=1e-12)
    assert got[2] == pytest.approx(float(want[2]), rel=1e-6)  # a float32 argument's adjoint is a float32
    np.testing.assert_array_equal(a, before[0])


def test_cfunc_takes_negative_wrt_and_refuses_tuples_and_keywords_clearly() -> None:
    c = cfunc("float64(float64, float64)")(lambda x, y: x * x * y)
    assert pyjlad.grad(c, wrt=-1)(3.0, 2.0) == 9.0
    assert pyjlad.grad(c, argnums=(-2, 1))(3.0, 2.0) == (12.0, 9.0)
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"argument 0 is a tuple.*@cfunc"):
        pyjlad.grad(c)((3.0, 1.0), 2.0)
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"@cfunc.*pass y positionally"):
        pyjlad.grad(c)(3.0, y=2.0)


def test_has_aux_with_an_inactive_float_aux_keeps_the_values_adjoint() -> None:
    # Through a call of f, the adjoint of the value was lost (fewer than 8 elements: np.sum's unrolled code
    # in Enzyme's copy) when the other entry of the pair does not depend on y: has_aux inlines f.
    @njit
    def f(x, y):
        return np.sum(np.exp(x) * y), np.sum(x)

    x = rng.normal(size=5)
    want = jax.grad(lambda x, y: (jnp.sum(jnp.exp(x) * y), jnp.sum(x)), argnums=1, has_aux=True)(jnp.asarray(x), 1.3)
    g, aux = pyjlad.grad(f, wrt=1, has_aux=True)(x, 1.3)
    assert g == pytest.approx(float(want[0]), rel=1e-12)
    assert aux == pytest.approx(float(want[1]), rel=1e-12)


@pytest.mark.parametrize("n", [1, 3, 5, 7, 8, 9, 17])
def test_a_helpers_pair_with_an_inactive_float(n) -> None:
    # Was a strict xfail (a known wrong result in README): with fewer than 8 elements the adjoint of the called
    # function's first result was lost (np.sum's code unrolled by 8 in Enzyme's copy). Right since Enzyme's copy
    # is compiled without non-trivial loop unswitching and with small constant loops unrolled (610bf37).
    @njit
    def helper(x, y):
        return np.sum(np.exp(x) * y), np.sum(x)

    @njit
    def first(x, y):
        return helper(x, y)[0]

    x = rng.normal(size=n)
    x0 = x.copy()
    want = jax.grad(lambda x, y: jnp.sum(jnp.exp(x) * y), argnums=1)(jnp.asarray(x0), 1.3)
    assert pyjlad.grad(first, wrt=1)(x, 1.3) == pytest.approx(float(want), rel=1e-12)
    np.testing.assert_array_equal(x, x0)
