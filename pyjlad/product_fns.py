"""Callable forms of the products: ``jacrev``, ``jacfwd``, ``jvp_fn``, ``vjp_fn``, ``hvp_fn``.

:mod:`pyjlad.products` computes at once (``pyjlad.jacobian(f, x)``); these
return a function to call later, JAX-style, and that function is also callable
from ``@njit``, ``@njit(parallel=True)`` and ``@cfunc`` code (passed as an
argument, or referenced as a global or closure variable: see
:mod:`pyjlad.numba_calls.products`).

Names follow JAX where JAX has a callable form: ``jax.jacrev(f)`` and
``jax.jacfwd(f)`` return the Jacobian function, and so do :func:`jacrev` and
:func:`jacfwd`. JAX's ``jvp``/``vjp`` have no callable form of the same
signature (``jax.linearize`` and ``jax.vjp`` close over one point), so
:func:`jvp_fn`, :func:`vjp_fn` and :func:`hvp_fn` are the immediate forms with
``f`` bound: ``pyjlad.jvp_fn(f)(primals, tangents) == pyjlad.jvp(f, primals,
tangents)``, a function of the point as well as of the direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import ArgumentError, ArgumentTypeError
from .export import describe_function
from .products import hvp, jacobian, jvp, vjp

__all__ = ["jacrev", "jacfwd", "jvp_fn", "vjp_fn", "hvp_fn", "ProductFunction"]


class ProductFunction:
    """A product of ``f`` to call later: ``kind`` is ``"jacrev"``, ``"jacfwd"``, ``"jvp"``, ``"vjp"`` or ``"hvp"``."""

    __slots__ = ("kind", "f", "wrt", "engine", "__wrapped__")

    def __init__(self, kind: str, f: Any, wrt: Any = 0, engine: str | None = None) -> None:
        if not callable(f):
            raise ArgumentTypeError(f"{kind} needs a function, got {type(f).__name__}")
        self.kind, self.f, self.wrt, self.engine = kind, f, wrt, engine
        self.__wrapped__ = f

    def __repr__(self) -> str:
        wrt = f", wrt={self.wrt!r}" if self.kind in ("jacrev", "jacfwd", "hvp") else ""
        name = self.kind if self.kind.startswith("jac") else f"{self.kind}_fn"
        return f"pyjlad.{name}({describe_function(self.f)}{wrt})"

    def __call__(self, *args: Any) -> Any:
        if self.kind in ("jacrev", "jacfwd"):
            mode = "reverse" if self.kind == "jacrev" else "forward"
            return jacobian(self.f, *args, wrt=self.wrt, mode=mode, engine=self.engine)
        if len(args) != 2:
            raise ArgumentError(f"{self!r} takes 2 arguments (primals and the {_direction(self.kind)}), "
                                f"got {len(args)}")
        primals, direction = args
        if self.kind == "jvp":
            return jvp(self.f, primals, direction, engine=self.engine)
        if self.kind == "vjp":
            return vjp(self.f, primals, direction, engine=self.engine)
        return hvp(self.f, primals, direction, self.wrt, engine=self.engine)


def _direction(kind: str) -> str:
    return {"jvp": "tangents", "vjp": "cotangent", "hvp": "vector v"}[kind]


def _checked_wrt(wrt: int | Sequence[int], single: bool = False) -> int | tuple[int, ...]:
    if isinstance(wrt, int) and not isinstance(wrt, bool) and wrt >= 0:
        return wrt
    if not single and isinstance(wrt, (tuple, list)) and wrt and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in wrt):
        return tuple(wrt)
    raise ArgumentTypeError(f"wrt must be {'an argument position' if single else 'an argument position or a tuple of them'}"
                            f", got {wrt!r}")


def jacrev(f: Any, wrt: int | Sequence[int] = 0, *, engine: str | None = None) -> ProductFunction:
    """The Jacobian of ``f`` as a function, by reverse sweeps (one per output element), as ``jax.jacrev``.

    ``jacrev(f, wrt)(*args) == pyjlad.jacobian(f, *args, wrt=wrt, mode="reverse")``:
    shape ``output.shape + argument.shape``, a tuple of those for a tuple ``wrt``.
    Callable from ``@njit`` code for an ``@njit`` ``f`` returning a float or a float array.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> jac = pyjlad.jacrev(njit(lambda x: x * x))
    >>> jac(np.array([1.0, 3.0])).tolist()
    [[2.0, 0.0], [0.0, 6.0]]
    >>> njit(lambda x: jac(x))(np.array([1.0, 3.0])).tolist()
    [[2.0, 0.0], [0.0, 6.0]]
    """
    return ProductFunction("jacrev", f, _checked_wrt(wrt), engine)


def jacfwd(f: Any, wrt: int | Sequence[int] = 0, *, engine: str | None = None) -> ProductFunction:
    """The Jacobian of ``f`` as a function, by forward sweeps (one per input element), as ``jax.jacfwd``.

    ``jacfwd(f, wrt)(*args) == pyjlad.jacobian(f, *args, wrt=wrt, mode="forward")``.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> pyjlad.jacfwd(njit(lambda x, y: x * y), wrt=1)(np.array([1.0, 3.0]), 2.0).tolist()
    [1.0, 3.0]
    """
    return ProductFunction("jacfwd", f, _checked_wrt(wrt), engine)


def jvp_fn(f: Any, *, engine: str | None = None) -> ProductFunction:
    """``pyjlad.jvp`` with ``f`` bound: ``jvp_fn(f)(primals, tangents) -> (value, tangent)``.

    From ``@njit`` code, ``primals`` and ``tangents`` are tuples (``None`` for an
    argument held constant).

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> value, tangent = pyjlad.jvp_fn(njit(lambda x: x * x))((np.array([1.0, 2.0]),), (np.array([1.0, 1.0]),))
    >>> tangent.tolist()
    [2.0, 4.0]
    """
    return ProductFunction("jvp", f, 0, engine)


def vjp_fn(f: Any, *, engine: str | None = None) -> ProductFunction:
    """``pyjlad.vjp`` with ``f`` bound: ``vjp_fn(f)(primals, cotangent) -> (value, cotangents)``.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> value, (ct,) = pyjlad.vjp_fn(njit(lambda x: x * x))((np.array([1.0, 2.0]),), np.array([1.0, 10.0]))
    >>> ct.tolist()
    [2.0, 40.0]
    """
    return ProductFunction("vjp", f, 0, engine)


def hvp_fn(f: Any, wrt: int = 0, *, engine: str | None = None) -> ProductFunction:
    """``pyjlad.hvp`` with ``f`` and ``wrt`` bound: ``hvp_fn(f, wrt)(primals, v) -> H @ v``.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> pyjlad.hvp_fn(njit(lambda x: np.sum(x ** 3)))((np.array([1.0, 2.0]),), np.array([1.0, 1.0])).tolist()
    [6.0, 12.0]
    """
    return ProductFunction("hvp", f, _checked_wrt(wrt, single=True), engine)
