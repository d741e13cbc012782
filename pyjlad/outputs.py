"""Functions with array or tuple results, turned into functions that write their outputs.

Enzyme seeds a reverse sweep through memory, and an array that a function
allocates and returns has no memory the caller could seed before the sweep. So
for a function ``f`` returning an array, a float or a tuple of those, pyjlad
differentiates a generated Numba wrapper instead::

    @njit
    def f_outputs(o0, o1, a0, a1):      # one buffer per float result (here a 1-D array and a float)
        r = f(a0, a1)
        v0 = np.ascontiguousarray(r[0])
        if v0.shape != o0.shape:        # a buffer sized for another result (pyjlad.vector_plan
            raise OutputShapeChanged    # sizes them from an earlier call): nothing written
        for i0 in range(o0.shape[0]):   # element by element, any strides (the buffer may be
            o0[i0] = v0[i0]             # a strided view, pyjlad.vector_lanes)
        o1[0] = r[1]                    # a float result, in a 1-element array

whose output buffers are ``Duplicated``: their shadows carry the cotangent
(reverse) or receive the tangent (forward). Integer and bool results get no
buffer (they have no derivative).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from .errors import ArgumentError, PyjladError, UnsupportedFunctionError
from .export import as_numba_function, describe_function
from .memo import cached_for
from .parallel_derivatives import PARALLEL_TWIN

__all__ = ["OutputLayout", "OutputShapeChanged", "output_layout", "output_wrapper"]


class OutputShapeChanged(PyjladError, ValueError):
    """A wrapper's buffer has another shape than the function's result: raised by the wrapper before
    it writes, so that a caller that sized the buffer from an earlier call (:func:`pyjlad.vector_plan.sweep_plan`)
    measures the result and sweeps again (never reaches the user)."""


@dataclass(frozen=True)
class OutputLayout:
    """The structure of a function's result.

    Attributes
    ----------
    kind : str
        ``"scalar"`` (one float), ``"none"``, ``"array"`` or ``"tuple"``.
    items : tuple
        For ``"array"``/``"tuple"``: one entry per element, ``("array", shape, dtype)``,
        ``("scalar", (), dtype)`` or ``("const", (), None)`` for ints/bools.
    """

    kind: str
    items: tuple[tuple[str, tuple[int, ...], Any], ...] = ()

    @property
    def buffers(self) -> list[tuple[int, tuple[int, ...], Any]]:
        """``(item index, buffer shape, dtype)`` for each float item (the wrapper's outputs)."""
        return [
            (i, shape if kind == "array" else (1,), dtype)
            for i, (kind, shape, dtype) in enumerate(self.items)
            if kind != "const"
        ]

    def signature(self) -> tuple:
        """What the generated wrapper depends on (not shapes)."""
        return (self.kind, tuple((kind, len(shape), str(dtype)) for kind, shape, dtype in self.items))

    def unpack(self, buffers: list[np.ndarray]) -> Any:
        """Build a value with this layout from per-buffer arrays (tangents or cotangents)."""
        it = iter(buffers)
        parts = []
        for kind, _, _ in self.items:
            if kind == "const":
                parts.append(None)
            elif kind == "scalar":
                parts.append(float(next(it)[0]))
            else:
                parts.append(next(it))
        return parts[0] if self.kind == "array" else tuple(parts)

    def seeds(self, cotangent: Any, name: str) -> list[np.ndarray]:
        """Per-buffer seed arrays (new buffers) from a cotangent with this layout; checks its structure."""
        parts = [cotangent] if self.kind == "array" else cotangent
        if self.kind == "tuple" and (not isinstance(cotangent, tuple) or len(cotangent) != len(self.items)):
            raise ArgumentError(
                f"the cotangent must be a tuple of {len(self.items)} entries, like {name}'s result"
            )
        out = []
        for position, (part, (kind, shape, dtype)) in enumerate(zip(parts, self.items)):
            what = "the cotangent" if self.kind == "array" else f"cotangent entry {position}"
            if kind == "const":
                continue
            if part is None and self.kind == "tuple":  # an entry not differentiated: a zero cotangent
                out.append(np.zeros(shape if kind == "array" else (1,), dtype=dtype))
                continue
            if kind == "scalar":
                if np.ndim(part) != 0:
                    raise ArgumentError(f"{what} must be a float, like {name}'s result")
                out.append(np.array([part], dtype=dtype))
            else:
                array = np.asarray(part, dtype=dtype)
                if array.shape != shape:
                    raise ArgumentError(
                        f"{what} has shape {array.shape}; {name}'s result has shape {shape}"
                    )
                # A fresh buffer, never the caller's array: Enzyme zeroes an output's
                # shadow once it has propagated the seed.
                out.append(np.array(array, dtype=dtype, order="C", copy=True))
        return out


def _item(value: Any, name: str) -> tuple[str, tuple[int, ...], Any]:
    if isinstance(value, np.ndarray):
        if value.dtype in (np.float64, np.float32):
            return ("array", value.shape, value.dtype)
        if value.dtype.kind in "iub":
            return ("const", (), None)
    elif isinstance(value, (float, np.floating)):
        return ("scalar", (), np.float32 if isinstance(value, np.float32) else np.float64)
    elif isinstance(value, (int, bool, np.integer, np.bool_)):
        return ("const", (), None)
    raise UnsupportedFunctionError(
        f"{name} returns {type(value).__name__}; pyjlad differentiates results that are floats, "
        "float arrays, or tuples of those"
    )


def output_layout(value: Any, name: str) -> OutputLayout:
    """The layout of ``value``, a result of the function called ``name``."""
    if value is None:
        return OutputLayout("none")
    if isinstance(value, tuple):
        return OutputLayout("tuple", tuple(_item(v, name) for v in value))
    kind, shape, dtype = _item(value, name)
    if kind == "array":
        return OutputLayout("array", ((kind, shape, dtype),))
    if kind == "scalar":
        return OutputLayout("scalar")
    raise UnsupportedFunctionError(f"{name} returns an integer or bool, which has no derivative")


def output_wrapper(func: Any, nargs: int, layout: OutputLayout) -> Any:
    """The generated ``@njit`` wrapper writing ``func``'s float results into buffers."""
    return cached_for(func, ("outputs", nargs, layout.signature()), lambda: _make_wrapper(func, nargs, layout))


def _make_wrapper(func: Any, nargs: int, layout: OutputLayout) -> Any:
    target = as_numba_function(func)
    name = describe_function(target).split(".")[-1]
    outs = [f"o{k}" for k in range(len(layout.buffers))]
    args = [f"a{k}" for k in range(nargs)]
    lines = [f"def {_identifier(name)}_outputs({', '.join(outs + args)}):",
             f"    r = f({', '.join(args)}{',' if nargs == 1 else ''})"]
    for k, (out, (item, _, _)) in enumerate(zip(outs, layout.buffers)):
        source = "r" if layout.kind == "array" else f"r[{item}]"
        if layout.items[item][0] == "array":
            # Element by element, any strides: the buffer may be a strided view (pyjlad.vector_lanes),
            # whose ravel() would be a copy.
            ndim = len(layout.items[item][1])
            index = ", ".join(f"i{d}" for d in range(ndim)) or "()"
            lines.append(f"    v{k} = np.ascontiguousarray({source})")
            lines.append(f"    if v{k}.shape != {out}.shape:")
            lines.append("        raise OutputShapeChanged")
            lines += [f"    {'    ' * d}for i{d} in range({out}.shape[{d}]):" for d in range(ndim)]
            lines.append(f"    {'    ' * ndim}{out}[{index}] = v{k}[{index}]")
        else:
            lines.append(f"    {out}[0] = {source}")
    source, wrapper_name = "\n".join(lines), f"{_identifier(name)}_outputs"
    wrapper = numba.njit(_defined(source, wrapper_name, target))
    wrapper.results_of = name  # type: ignore[attr-defined]  # (named so in messages about its derivative)
    if getattr(target, "targetoptions", {}).get("parallel"):
        twin = _parallel_twin(target, source, wrapper_name)
        twin.results_of = name  # type: ignore[attr-defined]
        setattr(wrapper, PARALLEL_TWIN, twin)
    return wrapper


def _defined(source: str, name: str, callee: Any) -> Any:
    """The Python function ``name`` that ``source`` defines, calling ``callee`` as ``f``."""
    namespace: dict[str, Any] = {"f": callee, "np": np, "OutputShapeChanged": OutputShapeChanged}
    exec(source, namespace)  # noqa: S102 - generated from names we control
    return namespace[name]


#: Options of a ``parallel=True`` function that its wrapper's parallel twin takes too (how its code is compiled).
_TWIN_OPTIONS = ("fastmath", "error_model", "boundscheck")


def _parallel_twin(target: Any, source: str, name: str) -> Callable[[], Any]:
    """The builder of the wrapper's ``parallel=True`` twin, whose call of ``target`` is inlined (Numba's
    ``inline="always"``): ``target``'s ``prange`` loops become the twin's own parallel loops, which
    :mod:`pyjlad.parallel_derivatives` differentiates (a call of another ``parallel=True`` function
    would run serially in it). Built on first use, once."""

    @functools.cache
    def twin() -> Any:
        options = {k: v for k, v in target.targetoptions.items() if k in _TWIN_OPTIONS}
        inlined = numba.njit(inline="always", **options)(target.py_func)
        return numba.njit(parallel=True, **options)(_defined(source, name, inlined))

    return twin


def _identifier(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"f_{cleaned}"
