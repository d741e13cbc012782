"""Recursive ``@njit`` functions differentiate (pyjlad/export_recursion.py).

Numba compiles a call into a function whose compilation is under way (recursion, mutual recursion) as an
indirect call through a global it fills at run time (``.numba.unresolved$...``); Enzyme refused that
("cannot compute with global variable that doesn't have marked shadow global") and pyjlad called it a
defect. pyjlad now links the callee's IR in and calls it directly. Oracles: ``jax.grad``/``jax.jvp``/
``jax.hessian``/``jax.jacobian`` in float64 of the same recursions written in JAX, from copies taken before
the call; the caller's arrays are checked unchanged. The divide-and-conquer sum and the powers by squaring
are the corpus programs ``control/recursive-halves`` and ``control/recursive-powers``.
"""

from __future__ import annotations

import re
import warnings

import jax
import numpy as np
import pytest
from corpus.family_control import _power_by_squaring as power_by_squaring
from corpus.family_control import recursive_halves as divide_and_conquer
from corpus.family_control import recursive_halves_jax as divide_and_conquer_jax
from numba import njit, prange

import pyjlad
from pyjlad.export_recursion import resolve_recursion, unresolved_symbols
from pyjlad.openmp import libomp_path

jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

X = np.random.default_rng(17).normal(size=16)


@njit
def nested_sin(n, x):
    if n == 0:
        return x
    return np.sin(nested_sin(n - 1, x))


@njit
def three_sines(x):
    return nested_sin(3, x)


@njit
def even_step(n, x):
    if n == 0:
        return x
    return odd_step(n - 1, x * 1.5) + np.tanh(x)


@njit
def odd_step(n, x):
    if n == 0:
        return -x
    return even_step(n - 1, x) * x


@njit
def mutual(x):
    return even_step(5, x)


def mutual_jax(x, n=5, even=True):
    if even:
        return x if n == 0 else mutual_jax(x * 1.5, n - 1, False) + jnp.tanh(x)
    return -x if n == 0 else mutual_jax(x, n - 1, True) * x


@njit
def seventh_powers(x):
    return np.sum(power_by_squaring(x, 7))


def _grad_checked(f, x, oracle):
    copy = np.array(x, copy=True) if isinstance(x, np.ndarray) else x
    got = pyjlad.grad(f)(x)
    np.testing.assert_allclose(got, oracle(copy), rtol=1e-10, atol=1e-12)
    if isinstance(x, np.ndarray):
        np.testing.assert_array_equal(x, copy)


def test_self_recursion_of_a_scalar():
    _grad_checked(three_sines, 0.7, jax.grad(lambda x: jnp.sin(jnp.sin(jnp.sin(x)))))


def test_divide_and_conquer_over_an_array():
    _grad_checked(divide_and_conquer, X.copy(), lambda x: jax.grad(divide_and_conquer_jax)(jnp.asarray(x)))


def test_mutual_recursion():
    _grad_checked(mutual, 0.4, jax.grad(mutual_jax))


def test_recursion_allocating_arrays():
    _grad_checked(seventh_powers, X.copy(), lambda x: jax.grad(lambda y: jnp.sum(y ** 7))(jnp.asarray(x)))


def test_forward_mode_hessian_and_jacobian_of_recursions():
    value, tangent = pyjlad.jvp(three_sines, (0.7,), (1.0,))
    want = jax.jvp(lambda x: jnp.sin(jnp.sin(jnp.sin(x))), (0.7,), (1.0,))
    np.testing.assert_allclose((value, tangent), want, rtol=1e-12)
    x = X.copy()
    np.testing.assert_allclose(pyjlad.hessian(divide_and_conquer, x),
                               jax.hessian(divide_and_conquer_jax)(jnp.asarray(X)), rtol=1e-9, atol=1e-12)
    for mode in ("reverse", "forward"):
        np.testing.assert_allclose(pyjlad.jacobian(power_by_squaring, x, 5, mode=mode),
                                   jax.jacobian(lambda y: y ** 5)(jnp.asarray(X)), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(x, X)


@njit(parallel=True)
def sines_in_prange(x):
    out = np.empty(x.shape[0])
    for i in prange(x.shape[0]):
        out[i] = nested_sin(2, x[i])
    return np.sum(out)


@pytest.mark.skipif(libomp_path() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed")
def test_recursion_inside_prange_is_parallel_and_right(parallel_two_threads):
    """The recursion's exception path once made Enzyme refuse the parallel derivative ("No create nofree of
    unknown value"); since :func:`pyjlad.parfor_bodies.returning_error_paths` it is built in parallel:
    a fallback warning is an error here."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pyjlad.ParallelFallbackWarning)
        x = X.copy()
        got = pyjlad.grad(sines_in_prange)(x)
    np.testing.assert_allclose(got, jax.grad(lambda x: jnp.sum(jnp.sin(jnp.sin(x))))(jnp.asarray(X)), rtol=1e-12)
    np.testing.assert_array_equal(x, X)


def test_resolved_module_calls_the_function_directly():
    three_sines(0.5)
    cres = next(iter(three_sines.overloads.values()))
    text = cres.library.get_llvm_str()
    assert unresolved_symbols(text), "Numba no longer calls recursion through a pointer: this module is moot"
    resolved = resolve_recursion(text, cres, "three_sines")
    symbol = unresolved_symbols(text)[0]
    assert "load ptr, ptr @\".numba.unresolved$" not in resolved
    assert f"call i32 @{symbol}(" in resolved
    assert re.search(r"^define [^\n]*@" + re.escape(symbol) + r"\(", resolved, re.M)


def test_a_function_it_cannot_find_is_refused_clearly():
    text = '@".numba.unresolved$_ZN4nowhere5recurExd" = external global ptr\n'
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="write the recursion as a loop"):
        resolve_recursion(text, None, "f")
