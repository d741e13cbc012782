"""JAX-style arguments for the gradient transforms: tuples, NamedTuples and keyword arguments.

Enzyme differentiates a function whose arguments are floats, ints, bools and arrays of them
(:mod:`pyjlad.abi`). A call whose arguments are nested tuples or NamedTuples of those ("pytrees",
as JAX calls them), or that passes keyword arguments, is flattened at the Python boundary: its
leaves become the positional arguments of a generated ``@njit`` wrapper that rebuilds the call::

    @njit
    def loss_flattened(l0, l1, l2, l3):            # f(Params(w, b), (x, n), scale=s)
        return f(T0(l0, l1), (l2, l3,), scale=l3)

The wrapper only packs values into tuples, so its derivative with respect to a leaf is exactly
``f``'s with respect to that leaf; gradients are rebuilt in the structure of the argument (a
NamedTuple comes back as the same NamedTuple type). Integer and bool leaves are constants: their
place in a gradient holds ``None``. Keyword arguments are passed through (Numba fills in defaults
and maps names to positions); as in JAX, they are never differentiated.

A dict or a list argument is refused with what to use instead (a NamedTuple; a tuple or an array).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
from numba import types as nbtypes
from numba.core.ccallback import CFunc
from numba.core.dispatcher import Dispatcher

from .errors import ArgumentError, ArgumentTypeError, UnsupportedFunctionError
from .export import as_numba_function, describe_function
from .memo import cached_for

__all__ = ["CONTAINERS", "CallTree", "flatten_call", "has_container", "is_namedtuple", "resolve_wrt", "check_aux_result", "tangent_leaves"]

#: Values whose presence among a call's arguments sends it through the flattening path.
CONTAINERS = (tuple, list, dict)
_LEAF_KINDS = "fiub"  # NumPy dtype kinds a leaf array may have: float, int, unsigned, bool


def has_container(args: Sequence[Any]) -> bool:
    """Whether any of ``args`` is a tuple, list or dict (the per-call test of the fast path)."""
    for value in args:
        if isinstance(value, CONTAINERS):
            return True
    return False


def is_namedtuple(value: Any) -> bool:
    """Whether ``value`` is an instance of a ``collections.namedtuple``/``typing.NamedTuple`` class."""
    return isinstance(value, tuple) and hasattr(type(value), "_fields") and hasattr(type(value), "_make")


def _is_float_leaf(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype in (np.float64, np.float32)
    return isinstance(value, (float, np.floating)) and not isinstance(value, bool)


def _refuse_leaf(path: str, value: Any) -> None:
    """Refuse a value that cannot be a leaf of an argument, saying what to pass instead."""
    if isinstance(value, dict):
        raise ArgumentTypeError(
            f"{path} is a dict, which Numba cannot pass to compiled code: use a typing.NamedTuple "
            "(or collections.namedtuple) with the same fields, e.g. Params(w=..., b=...); its gradient "
            "comes back as the same NamedTuple"
        )
    if isinstance(value, list):
        raise ArgumentTypeError(
            f"{path} is a list: pass a tuple (a fixed group of values, e.g. (w, b)) or a NumPy array "
            "(numbers of one type, e.g. np.array(values))"
        )
    if isinstance(value, np.ndarray):
        if value.dtype.kind in _LEAF_KINDS and value.dtype != np.float16 and value.dtype.itemsize <= 8:
            return
        what = f"an array of {value.dtype}"
    elif isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        if not isinstance(value, np.floating) or value.dtype.itemsize in (4, 8):
            return
        what = f"a {value.dtype} scalar"
    else:
        what = type(value).__name__
    advice = ("split complex values into real and imaginary float arrays" if np.iscomplexobj(value) else
              "pass floats, ints, bools, NumPy arrays of them (float64/float32 to differentiate), or "
              "tuples and NamedTuples of those")
    raise ArgumentTypeError(f"{path} is {what}, which pyjlad cannot pass to a differentiated function: {advice}")


# A tree describes one argument's structure: ("leaf",), ("tuple", children) or ("named", cls, children).
Tree = tuple


def _flatten(value: Any, path: str, leaves: list[Any]) -> Tree:
    """``value``'s structure, its leaves appended to ``leaves`` (depth first, in order)."""
    if isinstance(value, tuple):
        children = tuple(_flatten(v, f"{path}[{k}]" if not is_namedtuple(value) else f"{path}.{value._fields[k]}",
                                  leaves) for k, v in enumerate(value))
        return ("named", type(value), children) if is_namedtuple(value) else ("tuple", children)
    _refuse_leaf(path, value)
    leaves.append(value)
    return ("leaf",)


def _count(tree: Tree) -> int:
    if tree[0] == "leaf":
        return 1
    return sum(_count(child) for child in tree[-1])


def _source(tree: Tree, names: Iterator, classes: dict[type, str]) -> str:
    """The expression rebuilding ``tree`` from the leaf names ``names`` yields."""
    if tree[0] == "leaf":
        return next(names)
    parts = [_source(child, names, classes) for child in tree[-1]]
    if tree[0] == "tuple":
        return "(" + "".join(p + ", " for p in parts) + ")"
    cls = tree[1]
    name = classes.setdefault(cls, f"T{len(classes)}")
    return f"{name}({', '.join(parts)})"


def _rebuild(tree: Tree, leaves: Iterator) -> Any:
    """A value of structure ``tree`` with the leaves ``leaves`` yields."""
    if tree[0] == "leaf":
        return next(leaves)
    parts = [_rebuild(child, leaves) for child in tree[-1]]
    return tuple(parts) if tree[0] == "tuple" else tree[1]._make(parts)


@dataclass(frozen=True)
class CallTree:
    """One call's arguments, flattened.

    Attributes
    ----------
    positional : tuple of Tree
        The structure of each positional argument.
    keywords : tuple of (str, Tree)
        The name and structure of each keyword argument, in the call's order.
    leaves : tuple
        Every leaf, positional arguments' first, depth first.
    """

    positional: tuple[Tree, ...]
    keywords: tuple[tuple[str, Tree], ...]
    leaves: tuple[Any, ...]

    @property
    def signature(self) -> tuple:
        """What the generated wrapper depends on (the structure, not the leaves' types)."""
        return (self.positional, self.keywords)

    def leaf_range(self, position: int) -> range:
        """The leaves of positional argument ``position``."""
        start = sum(_count(t) for t in self.positional[:position])
        return range(start, start + _count(self.positional[position]))

    def rebuild(self, position: int, leaf_values: dict[int, Any]) -> Any:
        """Positional argument ``position``'s structure holding ``leaf_values`` (by leaf index; ``None``
        where missing)."""
        values = iter([leaf_values.get(k) for k in self.leaf_range(position)])
        return _rebuild(self.positional[position], values)

    def copied(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's positional and keyword arguments rebuilt with each array leaf copied."""
        leaves = iter(np.array(x, copy=True, order="K") if isinstance(x, np.ndarray) else x for x in self.leaves)
        args = tuple(_rebuild(tree, leaves) for tree in self.positional)
        return args, {name: _rebuild(tree, leaves) for name, tree in self.keywords}


def _bind_check(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse keyword arguments that do not fit ``func``'s Python signature, in its terms."""
    target = as_numba_function(func)
    py = getattr(target, "py_func", None)
    if py is None and not kwargs:
        return
    if py is None:
        raise ArgumentTypeError(
            f"{describe_function(func)} is a @cfunc, whose arguments are passed by position only: "
            f"pass {', '.join(kwargs)} positionally"
        )
    try:
        inspect.signature(py).bind(*args, **kwargs)
    except TypeError as exc:
        raise ArgumentTypeError(f"{describe_function(func)}{inspect.signature(py)}: {exc}") from None


def flatten_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallTree:
    """The call ``func(*args, **kwargs)`` flattened (each leaf checked, keywords checked against ``func``)."""
    _bind_check(func, args, kwargs)
    leaves: list[Any] = []
    positional = tuple(_flatten(value, f"argument {k}", leaves) for k, value in enumerate(args))
    target = as_numba_function(func)
    if isinstance(target, CFunc):
        for index, tree in enumerate(positional):
            if tree != ("leaf",):
                raise ArgumentTypeError(
                    f"argument {index} is a tuple, but {describe_function(func)} is a @cfunc of signature "
                    f"{target._sig}, which takes no tuples: pass its entries as the arguments the signature names"
                )
    keywords = tuple((name, _flatten(value, f"keyword argument {name!r}", leaves)) for name, value in kwargs.items())
    return CallTree(positional, keywords, tuple(leaves))


def resolve_wrt(requested: Sequence[int], nargs: int, nkeywords: int) -> tuple[int, ...]:
    """``requested`` argument positions with negative ones counted from the end of the ``nargs``
    positional arguments (as JAX's ``argnums``), each checked to be in range."""
    out = []
    for index in requested:
        position = index + nargs if index < 0 else index
        if not 0 <= position < nargs:
            hint = (" (keyword arguments are never differentiated, as in JAX: pass the argument to "
                    "differentiate by position)" if nkeywords else "")
            raise UnsupportedFunctionError(
                f"wrt={index} is out of range for a call with {nargs} positional argument(s){hint}"
            )
        out.append(position)
    return tuple(out)


def _identifier(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"f_{cleaned}"


def flattened_function(func: Any, call: CallTree, has_aux: bool) -> Any:
    """The ``@njit`` wrapper of ``func`` taking ``call``'s leaves (remembered per structure).

    With ``has_aux`` it returns the first entry of ``func``'s ``(value, aux)`` result.
    """
    return cached_for(func, ("flattened", call.signature, has_aux), lambda: _make_flattened(func, call, has_aux))


def _inlined(target: Any) -> Any:
    """A copy of the ``@njit`` function ``target`` that Numba inlines into its callers (same options).

    The ``has_aux`` wrapper keeps only the value of ``f``'s ``(value, aux)`` result. Where ``f`` is a
    separate function returning that pair through Numba's result pointer, the value's adjoint was lost
    when the other entry is an inactive float (``(np.sum(np.exp(x) * y), np.sum(x))`` differentiated
    with respect to ``y`` gave 0 for fewer than 8 elements: ``np.sum``'s code, unrolled by 8 at its first
    compile, is reused in Enzyme's copy, and Enzyme v0.0.289 mis-routes the adjoint at the unrolled
    loop's exit when only its remainder ran), so ``f`` is inlined into the wrapper.
    """
    if not isinstance(target, Dispatcher):
        return target

    def build() -> Any:
        options = {k: v for k, v in target.targetoptions.items() if k not in ("nopython", "inline")}
        return numba.njit(inline="always", **options)(target.py_func)

    return cached_for(target, ("inline-always",), build)


def _make_flattened(func: Any, call: CallTree, has_aux: bool) -> Any:
    target = as_numba_function(func)
    name = _identifier(describe_function(target).split(".")[-1]) + "_flattened"
    if has_aux:
        target = _inlined(target)
    leaves = [f"l{k}" for k in range(len(call.leaves))]
    names = iter(leaves)
    classes: dict[type, str] = {}
    parts = [_source(tree, names, classes) for tree in call.positional]
    parts += [f"{keyword}={_source(tree, names, classes)}" for keyword, tree in call.keywords]
    result = f"f({', '.join(parts)})" + ("[0]" if has_aux else "")
    source = f"def {name}({', '.join(leaves)}):\n    return {result}\n"
    namespace: dict[str, Any] = {"f": target, **{alias: cls for cls, alias in classes.items()}}
    exec(source, namespace)  # noqa: S102 - generated from names we control
    return numba.njit(namespace[name])


def differentiated_leaves(call: CallTree, positions: Sequence[int], describe: Callable[[], str]) -> tuple[int, ...]:
    """The float leaves of the positional arguments ``positions``; an argument without any is refused."""
    out: list[int] = []
    for position in positions:
        found = [k for k in call.leaf_range(position) if _is_float_leaf(call.leaves[k])]
        if not found:
            tree = call.positional[position]
            what = (f"{type(call.leaves[call.leaf_range(position)[0]]).__name__}" if tree[0] == "leaf"
                    else "a tuple with no float in it")
            raise UnsupportedFunctionError(
                f"argument {position} of {describe()} is {what}, which is a constant (integers and bools have no "
                "derivative): pass floats (e.g. 2.0 or x.astype(np.float64)) or do not differentiate with "
                "respect to it"
            )
        out += found
    return tuple(sorted(set(out)))


def tangent_leaves(tree: Tree, value: Any, path: str) -> list[Any]:
    """The leaves of ``value``, a tangent shaped like an argument of structure ``tree`` (``None`` entries
    hold leaves constant)."""
    if tree[0] == "leaf":
        return [value]
    children = tree[-1]
    if value is None:
        return [None] * _count(tree)
    if not isinstance(value, tuple) or len(value) != len(children):
        raise ArgumentError(
            f"{path} must have the structure of its argument: a tuple of {len(children)} entries, "
            f"got {type(value).__name__}{f' of {len(value)}' if isinstance(value, tuple) else ''}"
        )
    return [leaf for k, (child, part) in enumerate(zip(children, value))
            for leaf in tangent_leaves(child, part, f"{path}[{k}]")]


def check_aux_result(restype: nbtypes.Type, describe: Callable[[], str]) -> None:
    """Refuse a result type (a Numba type) that is not the ``(value, aux)`` pair of ``has_aux=True``."""
    if not isinstance(restype, nbtypes.BaseTuple) or len(restype) != 2:
        what = f"a tuple of {len(restype)}" if isinstance(restype, nbtypes.BaseTuple) else str(restype)
        raise UnsupportedFunctionError(
            f"has_aux=True: {describe()} must return a pair (value, aux), but returns {what}: return "
            "(value, aux) with value the real scalar to differentiate, or drop has_aux=True"
        )
    if not isinstance(restype[0], nbtypes.Float):
        raise UnsupportedFunctionError(
            f"has_aux=True: the first entry of {describe()}'s result is {restype[0]}; it must be the real "
            "scalar to differentiate (a float: e.g. float(...) or np.sum(...))"
        )
