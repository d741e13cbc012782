"""Numba functions as JAX functions whose derivatives come from pyjlad.

``to_jax(f)`` returns a function of JAX arrays that JAX's transforms accept
inside larger JAX programs. The primal runs ``f`` on the host through
``jax.pure_callback``.

* A scalar ``f`` (a loss, the default) gets a ``jax.custom_jvp`` rule whose
  tangent is ``sum(gradient * tangent)``, the gradient coming from one pyjlad
  reverse sweep (``value_and_gradient``). The rule is linear in the tangent, so
  JAX transposes it: ``jax.grad``, ``jax.vjp``, ``jax.jacrev``, ``jax.jvp``,
  ``jax.jacfwd`` and ``jax.linearize`` all work, under ``jax.jit`` too. The
  gradient's own rule multiplies the tangent by pyjlad's Hessian, so
  ``jax.hessian`` and ``jax.grad`` of ``jax.grad`` work for functions of one
  float argument (the Hessian is formed: one Hessian-vector sweep per element).
* An array-valued ``f`` (``result_shape`` given) gets a ``jax.custom_vjp`` rule
  running pyjlad's ``vjp`` (one reverse sweep per cotangent): ``jax.grad`` of a
  JAX loss of it, ``jax.vjp``, ``jax.jacrev``. JAX refuses forward mode
  (``jax.jvp``, ``jax.jacfwd``) of such a function; call ``pyjlad.jvp`` or
  ``pyjlad.jacobian(..., mode="forward")`` instead.
* ``jax.vmap`` of the value and of first derivatives of a scalar ``f`` runs
  :func:`pyjlad.vmap`: one ``prange`` loop over the samples on all cores
  (:mod:`pyjlad.interop.jax_callbacks`); the rest loops over the samples.

Enable 64-bit floats in JAX (``jax.config.update("jax_enable_x64", True)``) to
differentiate float64 Numba code; with JAX's default float32, ``f`` is compiled
and differentiated for float32. Integer arguments are constants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import MissingDependencyError, UnsupportedFunctionError

try:
    import jax
    import jax.numpy as jnp
except ImportError as exc:  # pragma: no cover - exercised only without JAX
    raise MissingDependencyError("pyjlad.interop.jax needs JAX: pip install jax") from exc

from ..batching import vmap
from ..export import as_numba_function
from ..products import hessian, vjp
from ..transforms import value_and_grad, value_and_gradient
from . import batches_with_pyjlad_vmap, written_positions
from .jax_callbacks import Written, batched_callback, host_argument, host_arguments

__all__ = ["to_jax"]


def to_jax(f: Any, *, result_shape: Any = None, engine: str | None = None) -> Any:
    """Wrap ``f`` (float, integer and array arguments) as a differentiable JAX function.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` or plain Python function.
    result_shape : jax.ShapeDtypeStruct, optional
        Shape and dtype of ``f``'s result; default: a scalar of the first float
        argument's dtype (a loss).
    engine : str, optional
        pyjlad engine.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, numpy as np, pyjlad
    >>> from pyjlad.interop.jax import to_jax
    >>> jax.config.update("jax_enable_x64", True)
    >>> loss = to_jax(lambda x: np.sum(np.sin(x) * x))
    >>> g = jax.grad(lambda x: 2.0 * loss(x))(jnp.array([0.0, 1.0]))
    >>> np.allclose(g, 2 * (np.cos([0.0, 1.0]) * [0.0, 1.0] + np.sin([0.0, 1.0])))
    True
    >>> per_sample = jax.vmap(jax.grad(loss))(jnp.ones((3, 2)))   # pyjlad.vmap: a prange loop
    >>> per_sample.shape
    (3, 2)
    >>> h = jax.hessian(loss)(jnp.array([0.5, 2.0]))   # d2/dx2 sin(x) x = 2 cos(x) - x sin(x)
    >>> np.allclose(h, np.diag(2 * np.cos([0.5, 2.0]) - [0.5, 2.0] * np.sin([0.5, 2.0])), rtol=1e-13)
    True
    """
    numba_f = as_numba_function(f)
    if result_shape is not None and tuple(result_shape.shape) != ():
        return _array_function(f, numba_f, result_shape, engine)
    return _scalar_function(numba_f, None if result_shape is None else result_shape.dtype, engine)


def _float_positions(args: Sequence[Any]) -> tuple[int, ...]:
    return tuple(i for i, a in enumerate(args) if jnp.issubdtype(jnp.result_type(a), jnp.floating))


def _shape_of(a: Any) -> Any:
    return jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))


def _sample_loop(single: Callable[..., tuple[Any, ...]]) -> Callable[[tuple[Any, ...]], Callable[..., Any]]:
    """Batching by a plain loop over the samples (for what :func:`pyjlad.vmap` cannot batch)."""

    def batched(in_axes: tuple[Any, ...]) -> Callable[..., tuple[np.ndarray, ...]]:
        def run(*args: Any) -> tuple[np.ndarray, ...]:
            n = next(len(a) for a, axis in zip(args, in_axes) if axis == 0)
            rows = [single(*(a[i] if axis == 0 else a for a, axis in zip(args, in_axes))) for i in range(n)]
            return tuple(np.stack([np.asarray(r[k]) for r in rows]) for k in range(len(rows[0])))

        return run

    return batched


def _contract(gradients: Sequence[Any], tangents: Sequence[Any], wrt: tuple[int, ...], dtype: Any) -> Any:
    """``sum(gradient * tangent)`` over the float arguments: linear in the tangents, so JAX transposes it."""
    total = jnp.zeros((), dtype)
    for g, k in zip(gradients, wrt):
        total = total + jnp.sum(g * tangents[k]).astype(dtype)
    return total


def _written_by(numba_f: Any) -> Written:
    """Which of one call's host arguments ``numba_f`` writes: each is given to it as a copy (JAX's buffers are
    read-only, and not ``f``'s to write)."""
    return lambda args: written_positions(numba_f, args)


def _scalar_function(numba_f: Any, dtype: Any, engine: str | None) -> Any:
    """A scalar ``f`` as a ``jax.custom_jvp`` function (see the module's docstring)."""
    pyjlad_batches = batches_with_pyjlad_vmap(engine)
    written = _written_by(numba_f)
    vmaps: dict[Any, Any] = {}

    def result_dtype(args: Sequence[Any]) -> Any:
        floats = _float_positions(args)
        return dtype if dtype is not None else (jnp.result_type(args[floats[0]]) if floats else jnp.result_type(float))

    def pyjlad_vmap(fn: Any, key: Any) -> Callable[[tuple[Any, ...]], Callable[..., Any]]:
        def batched(in_axes: tuple[Any, ...]) -> Callable[..., Any]:
            if (key, in_axes) not in vmaps:
                vmaps[key, in_axes] = vmap(fn, in_axes=in_axes)
            return vmaps[key, in_axes]
        return batched

    def value_single(*args: Any) -> tuple[Any, ...]:
        return (numba_f(*args),)

    def values(args: Sequence[Any]) -> Any:
        if pyjlad_batches:
            by_vmap = pyjlad_vmap(numba_f, "value")
            batched = lambda axes: (lambda *a: (by_vmap(axes)(*a),))  # noqa: E731
        else:
            batched = _sample_loop(value_single)
        (value,) = batched_callback(value_single, batched, (jax.ShapeDtypeStruct((), result_dtype(args)),), args,
                                    written)
        return value

    def value_and_gradients(args: Sequence[Any]) -> tuple[Any, ...]:
        wrt = _float_positions(args)

        def single(*a: Any) -> tuple[Any, ...]:
            value, grads = value_and_gradient(numba_f, *a, wrt=wrt, engine=engine)
            return (value, *grads)

        if pyjlad_batches:
            by_vmap = pyjlad_vmap(value_and_grad(numba_f, wrt=wrt), ("value_and_grad", wrt))

            def batched(axes: tuple[Any, ...]) -> Callable[..., Any]:
                def run(*a: Any) -> tuple[Any, ...]:
                    value, grads = by_vmap(axes)(*a)
                    return (value, *grads)
                return run
        else:
            batched = _sample_loop(single)
        shapes = (jax.ShapeDtypeStruct((), result_dtype(args)), *(_shape_of(args[k]) for k in wrt))
        return tuple(batched_callback(single, batched, shapes, args, written))

    def hessian_of(args: Sequence[Any], k: int) -> Any:
        def single(*a: Any) -> tuple[Any, ...]:
            return (hessian(numba_f, *a, wrt=k, engine=engine),)

        shape = jax.ShapeDtypeStruct(jnp.shape(args[k]) * 2, jnp.result_type(args[k]))
        (h,) = batched_callback(single, _sample_loop(single), (shape,), args, written)
        return h

    @jax.custom_jvp
    def call(*args: Any) -> Any:
        return values(args)

    @call.defjvp
    def call_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        value, *grads = gradients(*primals)
        return value, _contract(grads, tangents, _float_positions(primals), value.dtype)

    @jax.custom_jvp
    def gradients(*args: Any) -> tuple[Any, ...]:
        return value_and_gradients(args)

    @gradients.defjvp
    def gradients_jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        value, *grads = gradients(*primals)
        wrt = _float_positions(primals)
        t_value = _contract(grads, tangents, wrt, value.dtype)
        if len(wrt) != 1:
            raise UnsupportedFunctionError(
                f"second derivatives through pyjlad.interop.jax.to_jax are computed for functions of one float "
                f"argument; {getattr(numba_f, '__name__', 'f')} has {len(wrt)} (positions {wrt}). Pass the "
                "other arguments as constants (a closure), or use pyjlad.hvp / pyjlad.hessian directly")
        h, t = hessian_of(primals, wrt[0]), tangents[wrt[0]]
        return (value, *grads), (t_value, jnp.tensordot(h, t, axes=jnp.ndim(t)).astype(h.dtype))

    return call


def _array_function(f: Any, numba_f: Any, result_shape: Any, engine: str | None) -> Any:
    """An array-valued ``f`` as a ``jax.custom_vjp`` function (reverse mode; see the module's docstring)."""

    written = _written_by(numba_f)

    def host_value(*args: Any) -> np.ndarray:
        return np.asarray(numba_f(*host_arguments(args, written)), dtype=result_shape.dtype)

    def host_vjp(cotangent: Any, *args: Any) -> tuple[np.ndarray, ...]:
        primals = tuple(host_arguments(args, written))
        _, cots = vjp(f, primals, host_argument(cotangent), engine=engine)
        return tuple(np.zeros(np.shape(a), np.asarray(a).dtype) if c is None else np.asarray(c, np.asarray(a).dtype)
                     for c, a in zip(cots, args))

    @jax.custom_vjp
    def call(*args: Any) -> Any:
        return jax.pure_callback(host_value, result_shape, *args, vmap_method="sequential")

    def call_fwd(*args: Any) -> tuple[Any, Any]:
        return call(*args), args

    def call_bwd(args: Any, cotangent: Any) -> Any:
        cots = jax.pure_callback(host_vjp, tuple(_shape_of(a) for a in args), cotangent, *args,
                                 vmap_method="sequential")
        return tuple(c if jnp.issubdtype(jnp.result_type(a), jnp.floating) else None for c, a in zip(cots, args))

    call.defvjp(call_fwd, call_bwd)
    return call
