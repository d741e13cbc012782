"""The Python source of one product call inside ``@njit`` code, for the argument types Numba inferred.

:func:`generate` writes a function of the call's arguments out of
:class:`~pyjlad.numba_calls.sweeps.RawSweep` calls, the same sweeps
:mod:`pyjlad.products` runs from Python: a function returning a float is swept
itself; one returning a float array is swept through a generated wrapper that
copies its result into a flat output buffer (whose shadow is seeded or read).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from numba import njit, types
from numba.core.errors import TypingError

from ..activity import Activity
from ..memo import cached_for
from ..sweep import Sweep
from .sweeps import raw_sweep

__all__ = ["accepts", "generate"]

_DIRECTIONS = {"jvp": "tangents", "vjp": "cotangent", "hvp": "v"}


def accepts(product: Any) -> str:
    """What ``product`` accepts inside ``@njit`` code, in the user's terms."""
    f = getattr(product.f, "py_func", product.f)
    name = getattr(f, "__name__", "f")
    try:
        params = ", ".join(inspect.signature(f).parameters)
    except (TypeError, ValueError):
        params = "..."
    floats = "float64/float32 scalars or arrays"
    if product.kind in ("jacrev", "jacfwd"):
        return (f"{product!r} accepts the arguments of {name}({params}), positionally, with argument(s) "
                f"{product.wrt} {floats}, and {name} must return a float or a float array")
    head = f"{product!r} accepts (primals, {_DIRECTIONS[product.kind]}): primals a tuple of the arguments of {name}({params})"
    if product.kind == "jvp":
        return f"{head}, tangents a tuple with one tangent per argument (None for one held constant); {name} must " \
               "return a float or a float array"
    if product.kind == "vjp":
        return f"{head}, cotangent shaped like {name}'s result (a float or a float array)"
    return f"{head}, v shaped like argument {product.wrt}, and {name} must return a float"


def _is_float(t: types.Type) -> bool:
    return isinstance(t, types.Float) and t.bitwidth in (32, 64)


def _is_float_array(t: types.Type) -> bool:
    return isinstance(t, types.Array) and _is_float(t.dtype)


def _differentiable(t: types.Type) -> bool:
    return _is_float(t) or _is_float_array(t)


def _writer(func: Any, nargs: int) -> Any:
    """``w(out, *args)``: ``func(*args)`` copied into the flat C array ``out`` (one per function and arity)."""
    def make() -> Any:
        args = ", ".join(f"a{i}" for i in range(nargs))
        text = (f"def writer(out, {args}):\n"
                f"    v = np.ascontiguousarray(f({args}{',' if nargs == 1 else ''})).ravel()\n"
                "    for k in range(out.size):\n"
                "        out[k] = v[k]\n")
        namespace: dict[str, Any] = {"f": func, "np": np}
        exec(text, namespace)  # noqa: S102 - generated from integers only
        return njit(namespace["writer"])
    return cached_for(func, ("njit-writer", nargs), make)


class _Source:
    """The lines and namespace of one generated function."""

    def __init__(self, product: Any, func: Any, params: list[str]) -> None:
        self.product, self.func = product, func
        self.lines = [f"def call({', '.join(params)}):"]
        self.namespace: dict[str, Any] = {"np": np, "f": func}

    def add(self, *lines: str) -> None:
        self.lines += [f"    {line}" for line in lines]

    def sweep(self, name: str, kind: str, mode: str, acts: tuple[Activity, ...], wrt: int = -1,
              writer: int | None = None) -> str:
        """Put the raw sweep into the namespace as ``name``: of ``f``, or of its writer for ``writer`` args."""
        func = self.func if writer is None else _writer(self.func, writer)
        self.namespace[name] = raw_sweep(func, Sweep(kind, mode, acts, wrt))
        return name

    def compile(self) -> Any:
        exec("\n".join(self.lines) + "\n", self.namespace)  # noqa: S102 - generated from names we control
        return self.namespace["call"]


def _primals(src: _Source, types_: tuple[types.Type, ...], sources: list[str]) -> list[types.Type]:
    """Bind ``a0, a1, ...``: the arguments, arrays copied where not C-contiguous and writable."""
    out = []
    for i, (t, expr) in enumerate(zip(types_, sources)):
        if isinstance(t, types.Array) and (t.layout != "C" or not t.mutable):
            src.add(f"a{i} = {expr}.copy()")
            t = t.copy(layout="C", readonly=False)
        else:
            src.add(f"a{i} = {expr}")
        out.append(t)
    return out


def _result_type(product: Any, func: Any, context: Any, argtypes: list[types.Type]) -> types.Type:
    try:
        sig = context.resolve_function_type(types.Dispatcher(func), tuple(argtypes), {})
    except TypingError as exc:
        raise TypingError(f"{product!r}: {func.__name__} cannot be called with ({', '.join(map(str, argtypes))}): "
                          f"{exc}; {accepts(product)}") from None
    result = sig.return_type
    if _is_float(result) or _is_float_array(result):
        return result
    raise TypingError(f"{product!r}: {func.__name__} returns {result} for ({', '.join(map(str, argtypes))}); "
                      f"inside @njit code it must return a float or a float array; {accepts(product)}")


def _tuple_arg(product: Any, t: types.Type, what: str) -> tuple[types.Type, ...]:
    if not isinstance(t, types.BaseTuple):
        raise TypingError(f"{product!r}: {what} must be a tuple inside @njit code, got {t}; {accepts(product)}")
    return tuple(t)


def _check_wrt(product: Any, argtypes: list[types.Type], wrt: tuple[int, ...]) -> None:
    for index in wrt:
        if index >= len(argtypes):
            raise TypingError(f"{product!r} called with {len(argtypes)} argument(s) inside @njit code, "
                              f"but wrt names argument {index}; {accepts(product)}")
        if not _differentiable(argtypes[index]):
            raise TypingError(f"argument {index} of {product!r} has type {argtypes[index]}, which has no "
                              f"derivative; {accepts(product)}")


def generate(product: Any, func: Any, context: Any, args: tuple[types.Type, ...]) -> Any:
    """The Python function implementing ``product`` for the argument types ``args``."""
    from . import product_kinds

    if product.kind in ("jacrev", "jacfwd"):
        params = [f"p{i}" for i in range(len(args))]
        src = _Source(product, func, params)
        argtypes = _primals(src, args, params)
        wrt = (product.wrt,) if isinstance(product.wrt, int) else product.wrt
        _check_wrt(product, argtypes, wrt)
        result = _result_type(product, func, context, argtypes)
        product_kinds.jacobian(src, argtypes, result, wrt, isinstance(product.wrt, int))
        return src.compile()
    if len(args) != 2:
        raise TypingError(f"{product!r} called with {len(args)} argument(s) inside @njit code; {accepts(product)}")
    primals = _tuple_arg(product, args[0], "primals")
    src = _Source(product, func, ["primals", "direction"])
    argtypes = _primals(src, primals, [f"primals[{i}]" for i in range(len(primals))])
    result = _result_type(product, func, context, argtypes)
    if product.kind == "jvp":
        tangents = _tuple_arg(product, args[1], "tangents")
        if len(tangents) != len(argtypes):
            raise TypingError(f"{product!r}: tangents has {len(tangents)} entries; primals has {len(argtypes)}")
        diff = tuple(i for i, t in enumerate(tangents) if not isinstance(t, types.NoneType))
        _check_wrt(product, argtypes, diff)
        product_kinds.jvp(src, argtypes, result, tangents, diff)
    elif product.kind == "vjp":
        product_kinds.vjp(src, argtypes, result, args[1])
    else:
        _check_wrt(product, argtypes, (product.wrt,))
        if not _is_float(result):
            raise TypingError(f"{product!r}: {func.__name__} returns {result}; {accepts(product)}")
        product_kinds.hvp(src, argtypes, product.wrt, args[1])
    return src.compile()
