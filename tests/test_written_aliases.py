"""The same array passed twice to a function that writes one of the two (``gs(u, u, w)``): refused by every transform.

Until 2026-12-06 ``gradient`` and ``jvp`` of such a call were silently wrong (matching neither the aliased call
nor two separate arrays), while ``jacobian`` and ``hessian`` gave the separate arrays' answer
(:mod:`pyjlad.written_aliases`). Now each transform raises an ``ArgumentError`` saying what to write, before
anything runs; the two rewrites it names are checked against JAX (float64, from copies taken before the call), and
arrays that share memory but are only read still differentiate.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)

U = np.array([0.3, -1.2, 0.8, 0.5, -0.7, 1.1])
W = 0.9


@njit
def sweep(u, out, w):
    for i in range(1, u.size - 1):
        out[i] = 0.5 * (u[i - 1] + u[i + 1]) * w + 0.1 * u[i] ** 2
    return np.sum(out ** 2)


@njit
def in_place(u, w):
    """The rewrite the refusal names for the update in place: the function passes the array twice itself."""
    return sweep(u, u, w)


def in_place_jax(u, w):
    for i in range(1, u.size - 1):
        u = u.at[i].set(0.5 * (u[i - 1] + u[i + 1]) * w + 0.1 * u[i] ** 2)
    return jnp.sum(u ** 2)


def separate_jax(u, out, w):
    i = np.arange(1, u.size - 1)
    out = out.at[i].set(0.5 * (u[i - 1] + u[i + 1]) * w + 0.1 * u[i] ** 2)
    return jnp.sum(out ** 2)


@njit
def gram(a, b):
    total = 0.0
    for i in range(a.size):
        for j in range(b.size):
            total += np.exp(-(a[i] - b[j]) ** 2) * a[i]
    return total


def gram_jax(a, b):
    return jnp.sum(jnp.exp(-(a[:, None] - b[None, :]) ** 2) * a[:, None])


TRANSFORMS = {
    "gradient": lambda u: pyjlad.gradient(sweep, u, u, W),
    "value_and_grad": lambda u: pyjlad.value_and_grad(sweep, wrt=(0, 1))(u, u, W),
    "grad_of_the_output": lambda u: pyjlad.grad(sweep, wrt=1)(u, u, W),
    "gradient_of_a_scalar": lambda u: pyjlad.gradient(sweep, u, u, W, wrt=2),
    "jvp": lambda u: pyjlad.jvp(sweep, (u, u, W), (np.ones(6), None, None)),
    "vjp": lambda u: pyjlad.vjp(sweep, (u, u, W), 1.0),
    "jacobian_reverse": lambda u: pyjlad.jacobian(sweep, u, u, W),
    "jacobian_forward": lambda u: pyjlad.jacobian(sweep, u, u, W, mode="forward"),
    "hessian": lambda u: pyjlad.hessian(sweep, u, u, W),
    "hvp": lambda u: pyjlad.hvp(sweep, (u, u, W), np.ones(6)),
}


@pytest.mark.parametrize("transform", TRANSFORMS.values(), ids=TRANSFORMS.keys())
def test_the_same_array_as_input_and_written_output_is_refused(transform):
    u = U.copy()
    with pytest.raises(pyjlad.ArgumentError) as info:
        transform(u)
    message = str(info.value)
    assert "arguments 0 and 1 of sweep are the same memory" in message and "writes argument 1" in message
    assert "calls sweep with the same array as arguments 0 and 1 itself" in message and "np.copy" in message
    assert u.tobytes() == U.tobytes()  # refused before anything ran


def test_overlapping_views_with_a_write_are_refused():
    x = np.linspace(-1.0, 1.0, 8)
    before = x.copy()
    with pytest.raises(pyjlad.ArgumentError, match="overlapping views of one array"):
        pyjlad.gradient(sweep, x[1:], x[:-1], W)
    assert x.tobytes() == before.tobytes()


def test_the_update_in_place_differentiates_as_the_refusal_says():
    expected = np.asarray(jax.grad(in_place_jax)(jnp.asarray(U), W))
    np.testing.assert_allclose(pyjlad.gradient(in_place, U.copy(), W), expected, rtol=1e-12, atol=1e-14)
    u = U.copy()
    np.testing.assert_allclose(pyjlad.hessian(in_place, u, W), jax.hessian(in_place_jax)(jnp.asarray(U), W),
                               rtol=1e-12, atol=1e-14)
    assert u.tobytes() == U.tobytes()  # hessian runs on copies (gradient, like a call, writes the caller's u)


def test_a_copy_as_the_output_differentiates_as_two_arrays():
    u, out = U.copy(), U.copy()
    expected = jax.grad(separate_jax, argnums=(0, 1))(jnp.asarray(U), jnp.asarray(U), W)
    gu, gout = pyjlad.gradient(sweep, u, out, W, wrt=(0, 1))
    np.testing.assert_allclose(gu, expected[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gout, expected[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("second", [lambda a: a, lambda a: a[::-1]], ids=["same", "reversed"])
def test_arrays_sharing_memory_that_are_only_read_still_differentiate(second):
    a = np.linspace(-0.8, 1.2, 5)
    before = a.copy()
    b = second(a)
    expected = jax.grad(gram_jax, argnums=(0, 1))(jnp.asarray(before), jnp.asarray(second(before)))
    ga, gb = pyjlad.gradient(gram, a, b, wrt=(0, 1))
    np.testing.assert_allclose(ga, expected[0], rtol=1e-12)
    np.testing.assert_allclose(gb, expected[1], rtol=1e-12)
    value, tangent = pyjlad.jvp(gram, (a, b), (np.ones(5), None))
    np.testing.assert_allclose(tangent, float(jnp.sum(expected[0])), rtol=1e-12)
    assert a.tobytes() == before.tobytes()


def test_interleaved_views_share_no_element_and_differentiate():
    x = np.linspace(-1.0, 1.0, 12)
    before = x.copy()
    u, out = x[::2], x[1::2]
    expected = jax.grad(separate_jax, argnums=(0, 1))(jnp.asarray(before[::2]), jnp.asarray(before[1::2]), W)
    gu, gout = pyjlad.gradient(sweep, u, out, W, wrt=(0, 1))
    np.testing.assert_allclose(gu, expected[0], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gout, expected[1], rtol=1e-12, atol=1e-14)


@njit
def sweep_values(u, out, w):
    """``sweep`` returning the written array's values times ``u``: an array result."""
    sweep(u, out, w)
    return out * u


ARRAY_RESULT_TRANSFORMS = {
    "jacobian_reverse": lambda u, v: pyjlad.jacobian(sweep_values, u, v, W),
    "jacobian_forward": lambda u, v: pyjlad.jacobian(sweep_values, u, v, W, mode="forward"),
    "vjp": lambda u, v: pyjlad.vjp(sweep_values, (u, v, W), np.ones(u.size)),
    "jvp": lambda u, v: pyjlad.jvp(sweep_values, (u, v, W), (np.ones(u.size), None, None)),
    "batched_jvp": lambda u, v: pyjlad.jvp(sweep_values, (u, v, W), (np.eye(u.size), None, None), batched=True),
}


@pytest.mark.parametrize("views", ["same", "overlapping"])
@pytest.mark.parametrize("transform", ARRAY_RESULT_TRANSFORMS.values(), ids=ARRAY_RESULT_TRANSFORMS.keys())
def test_a_function_returning_an_array_is_refused_for_its_aliases_too(transform, views):
    """Until 2026-12-06 the refusal asked for a scalar result (which the transform does not need) and never
    named the aliasing (a user-style probe)."""
    x = np.linspace(-1.0, 1.0, 8)
    before = x.copy()
    u, v = (x, x) if views == "same" else (x[1:], x[:-1])
    with pytest.raises(pyjlad.ArgumentError, match="writes argument 1"):
        transform(u, v)
    assert x.tobytes() == before.tobytes()
    expected = jax.jacobian(lambda a: separate_values_jax(a, jnp.asarray(before[:u.size]), W))(jnp.asarray(before[:u.size]))
    np.testing.assert_allclose(pyjlad.jacobian(sweep_values, before[:u.size].copy(), before[:u.size].copy(), W),
                               expected, rtol=1e-12, atol=1e-14)


def separate_values_jax(u, out, w):
    i = np.arange(1, u.size - 1)
    out = out.at[i].set(0.5 * (u[i - 1] + u[i + 1]) * w + 0.1 * u[i] ** 2)
    return out * u


@pytest.mark.parametrize("axes", [(0, 0), (0, None)], ids=["both_mapped", "one_unmapped"])
def test_vmap_of_a_gradient_refuses_a_sample_whose_arguments_alias(axes):
    """``vmap(grad(sweep))(U, U)``: the derivative runs inside the batch's @njit loop, which cannot check; until
    2026-12-06 each sample's gradient was silently wrong (6u where the aliased call's derivative is 8u)."""
    batch = np.stack([U, U[::-1]])
    before = batch.copy()
    second = batch if axes[1] == 0 else batch[0]
    with pytest.raises(pyjlad.ArgumentError, match=r"sample 0.*arguments 0 and 1 of sweep are the same memory"):
        pyjlad.vmap(pyjlad.grad(sweep), in_axes=(*axes, None))(batch, second, W)
    assert batch.tobytes() == before.tobytes()
    separate = before.copy()
    grads = pyjlad.vmap(pyjlad.grad(sweep), in_axes=(0, 0, None))(before.copy(), separate, W)
    for k in range(2):
        expected = jax.grad(separate_jax)(jnp.asarray(before[k]), jnp.asarray(before[k]), W)
        np.testing.assert_allclose(grads[k], expected, rtol=1e-12, atol=1e-14)


def _mapped_products(tangents, cotangents, vectors):
    """Each product of ``sweep`` under ``vmap``, called with ``(u batch, out batch)``; its JAX twin for one sample
    of separate arrays."""
    return {
        "jvp_fn": (lambda a, b: pyjlad.vmap(pyjlad.jvp_fn(sweep), in_axes=((0, 0, None), (0, None, None)))(
                       (a, b, W), (tangents, None, None))[1],
                   lambda k, u, out: jax.jvp(lambda x: separate_jax(x, out, W), (u,), (tangents[k],))[1]),
        "vjp_fn": (lambda a, b: pyjlad.vmap(pyjlad.vjp_fn(sweep), in_axes=((0, 0, None), 0))(
                       (a, b, W), cotangents)[1][0],
                   lambda k, u, out: cotangents[k] * jax.grad(separate_jax)(u, out, W)),
        "hvp_fn": (lambda a, b: pyjlad.vmap(pyjlad.hvp_fn(sweep), in_axes=((0, 0, None), 0))((a, b, W), vectors),
                   lambda k, u, out: jax.hessian(separate_jax)(u, out, W) @ vectors[k]),
        "jacrev": (lambda a, b: pyjlad.vmap(pyjlad.jacrev(sweep, wrt=1), in_axes=(0, 0, None))(a, b, W),
                   lambda k, u, out: jax.grad(separate_jax, argnums=1)(u, out, W)),
        "jacfwd": (lambda a, b: pyjlad.vmap(pyjlad.jacfwd(sweep), in_axes=(0, 0, None))(a, b, W),
                   lambda k, u, out: jax.grad(separate_jax)(u, out, W)),
    }


_RNG = np.random.default_rng(7)
_MAPPED = _mapped_products(_RNG.normal(size=(2, 6)), _RNG.normal(size=2), _RNG.normal(size=(2, 6)))


@pytest.mark.parametrize("product", _MAPPED.values(), ids=_MAPPED.keys())
def test_vmap_of_a_product_refuses_a_sample_whose_arguments_alias(product):
    """``vmap(jvp_fn(sweep))`` and the other products with one batch as ``u`` and ``out``: until 2026-12-06 only
    ``grad`` and ``value_and_grad`` were checked sample by sample, and the products ran, each sample's derivative
    mixing the aliased run with separate tangents (a probe). The same batches as separate arrays agree with JAX."""
    mapped, twin = product
    batch = np.stack([U, U[::-1]])
    before = batch.copy()
    with pytest.raises(pyjlad.ArgumentError, match=r"\(sample 0\): arguments 0 and 1 of sweep are the same memory"):
        mapped(batch, batch)
    assert batch.tobytes() == before.tobytes()
    result = mapped(before.copy(), before.copy())
    for k in range(2):
        expected = twin(k, jnp.asarray(before[k]), jnp.asarray(before[k]))
        np.testing.assert_allclose(result[k], expected, rtol=1e-12, atol=1e-14)
