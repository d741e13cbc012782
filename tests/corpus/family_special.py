"""Special and elementary scalar functions: one program per ``math``/NumPy/builtin function.

Every function of ``special_table.SPECIALS`` (every scalar function Numba compiles for floats)
as a loop ``s += f(x[i])`` over points inside its domain, away from kinks and poles; NumPy
functions also as the array expression ``np.sum(f(x))``; a few in float32. The oracle is the
same function in JAX (``special_table``'s twin), summed. Gradients and forward-mode products
are checked for all; Hessian-vector products for the smooth functions whose derivatives pyjlad
supplies itself (``lgamma``, ``gamma``: pyjlad's digamma) and a few Enzyme differentiates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numba import njit
from special_table import SPECIALS, Special

from corpus.program import program

FAMILY = "special"

#: Smooth functions whose Hessian-vector products are checked too.
SECOND_ORDER = {"math.lgamma", "math.gamma", "math.erfc", "math.erf", "math.atan2", "np.logaddexp", "np.sinc",
                "np.cbrt", "np.float_power", "math.hypot"}


def _numba(spec: Special, array: bool) -> Callable[..., Any]:
    params = "x, y" if spec.nargs == 2 else "x"
    if array:
        body = f"    return np.sum({spec.array})\n"
    else:
        pick = "        a = x[i]\n" + ("        b = y[i]\n" if spec.nargs == 2 else "")
        body = f"    s = 0.0\n    for i in range(x.shape[0]):\n{pick}        s += {spec.call}\n    return s\n"
    namespace: dict[str, Any] = {"math": math, "np": np}
    exec(f"def f({params}):\n{body}", namespace)  # noqa: S102
    return njit(namespace["f"])


def _oracle(spec: Special) -> Callable[..., Any]:
    summed = jax.vmap(spec.oracle)

    def oracle(*args: Any) -> Any:
        return jnp.sum(summed(*args))

    return oracle


def _args(spec: Special, dtype: type) -> Callable[[np.random.Generator], tuple[np.ndarray, ...]]:
    columns = [np.ascontiguousarray(c, dtype=dtype) for c in np.array(spec.points).T]
    if dtype == np.float32:  # points whose value and derivative stay finite and moderate in float32
        keep = np.ones(len(spec.points), dtype=bool)
        values = jax.vmap(spec.oracle)(*(jnp.asarray(c, dtype=jnp.float64) for c in columns))
        grads = jax.vmap(jax.grad(spec.oracle, argnums=tuple(range(spec.nargs))))(
            *(jnp.asarray(c, dtype=jnp.float64) for c in columns))
        keep &= np.abs(np.asarray(values)) < 1e30
        for g in grads:
            keep &= np.abs(np.asarray(g)) < 1e30
        columns = [c[keep] for c in columns]

    def make_args(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        return tuple(c.copy() for c in columns)  # the domain decides the points, not the seed

    return make_args


for _spec in SPECIALS:
    _wrt = tuple(range(_spec.nargs))
    _transforms = ("gradient", "jvp", "hvp") if _spec.name in SECOND_ORDER else ("gradient", "jvp")
    program(FAMILY, _spec.name, _numba(_spec, array=False), _oracle(_spec), _args(_spec, np.float64),
            wrt=_wrt, transforms=_transforms, rtol=1e-11, atol=1e-12,
            notes=f"derivative: {_spec.derivative}")
    if _spec.array:
        program(FAMILY, f"{_spec.name}[array]", _numba(_spec, array=True), _oracle(_spec),
                _args(_spec, np.float64), wrt=_wrt, transforms=("gradient", "jvp"), rtol=1e-11, atol=1e-12,
                notes=f"derivative: {_spec.derivative}")
    if _spec.float32:
        program(FAMILY, f"{_spec.name}[float32]", _numba(_spec, array=False), _oracle(_spec),
                _args(_spec, np.float32), wrt=_wrt, transforms=("gradient",), rtol=1e-4, atol=1e-5,
                notes=f"derivative: {_spec.derivative}")
