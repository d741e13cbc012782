"""Numba functions as JAX functions whose derivatives come from pyjlad.

``to_jax(f)`` returns a function of JAX arrays that ``jax.grad``, ``jax.vjp``
and ``jax.jit`` accept inside larger JAX programs: the primal runs ``f`` on the
host through ``jax.pure_callback``, and a ``jax.custom_vjp`` rule runs
pyjlad's reverse sweep (one Enzyme-compiled VJP) for the cotangent.

Enable 64-bit floats in JAX (``jax.config.update("jax_enable_x64", True)``) to
differentiate float64 Numba code; with JAX's default float32, ``f`` is compiled
and differentiated for float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MissingDependencyError

try:
    import jax
    import jax.numpy as jnp
except ImportError as exc:  # pragma: no cover - exercised only without JAX
    raise MissingDependencyError("pyjlad.interop.jax needs JAX: pip install jax") from exc

from ..export import as_numba_function
from ..products import vjp

__all__ = ["to_jax"]


def to_jax(f: Any, *, result_shape: Any = None, engine: str | None = None) -> Any:
    """Wrap ``f`` (float and float-array arguments) as a differentiable JAX function.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` or plain Python function.
    result_shape : jax.ShapeDtypeStruct, optional
        Shape and dtype of ``f``'s result; default: a scalar of the first
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
    """
    numba_f = as_numba_function(f)

    def shape_of(args):
        if result_shape is not None:
            return result_shape
        return jax.ShapeDtypeStruct((), jnp.result_type(args[0]))

    def host_value(*args):
        return np.asarray(numba_f(*[np.asarray(a) for a in args]))

    def host_vjp(cotangent, *args):
        primals = tuple(np.array(a) if np.ndim(a) else float(a) for a in args)
        cot = np.asarray(cotangent)
        _, cots = vjp(f, primals, cot if cot.ndim else float(cot), engine=engine)
        return tuple(np.asarray(c, dtype=np.asarray(a).dtype) for c, a in zip(cots, args))

    @jax.custom_vjp
    def call(*args):
        return jax.pure_callback(host_value, shape_of(args), *args)

    def call_fwd(*args):
        return call(*args), args

    def call_bwd(args, cotangent):
        shapes = tuple(jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)) for a in args)
        return jax.pure_callback(host_vjp, shapes, cotangent, *args)

    call.defvjp(call_fwd, call_bwd)
    return call
