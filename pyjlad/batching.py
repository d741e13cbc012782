"""Batched derivatives on all cores: :func:`vmap`, a ``prange`` loop over a leading axis.

``pyjlad.vmap(pyjlad.grad(f), in_axes=(0, None))(X, theta)`` computes
``grad(f)(X[i], theta)`` for every ``i`` in an ``@njit(parallel=True)`` loop,
``for i in prange(n)``, that calls the derivative as machine code
(:mod:`pyjlad.numba_calls`): no Python runs per sample, and the samples are
spread over Numba's threading layer (``numba.get_num_threads()`` threads).
Each sample is computed exactly as a serial loop computes it, so the results
equal the serial loop's bit for bit.

Conventions are JAX's ``vmap``: ``in_axes`` is ``0`` or ``None`` for all
arguments, or a tuple with one of them per argument (``0``: the argument is
mapped over its leading axis; ``None``: it is passed whole to every sample).
Results are stacked along a new leading axis (``out_axes=0``): a scalar result
becomes a 1-D array, an array result one more dimension, a tuple result a tuple
of those. Results go to new arrays; the caller's arrays are never written.

The batched function is ``f`` itself when ``f`` is any callable Numba can call
from ``@njit`` code: a ``pyjlad.grad`` or ``pyjlad.value_and_grad`` callable, or
a plain ``@njit`` function. The loop is compiled once per argument types (Numba
dispatches on them), the derivative for the per-sample argument types.

Thread safety: the sweep's large blocks come from :mod:`pyjlad.engines.pool`,
one spin-locked table shared by all threads, and its out-of-memory guard keeps
its ``jmp_buf`` per thread; small blocks and Numba's arrays come from the C
library and Numba's runtime, both thread safe. The derivative keeps no other
state between calls, so concurrent samples do not interact.

>>> import numpy as np, pyjlad
>>> from numba import njit
>>> @njit
... def loss(x, w):
...     return w * np.sum(x * x)
>>> per_sample = pyjlad.vmap(pyjlad.grad(loss), in_axes=(0, None))
>>> per_sample(np.array([[1.0, 2.0], [3.0, 4.0]]), 0.5).tolist()
[[1.0, 2.0], [3.0, 4.0]]
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import types
from numba.core.errors import TypingError
from numba.np.numpy_support import as_dtype

from .errors import ArgumentError, ArgumentTypeError, DifferentiatedFunctionError, UnsupportedFunctionError

__all__ = ["vmap", "Batched"]

InAxes = int | None | tuple[int | None, ...]
#: A result leaf: where it sits in the result (indices into nested tuples) and its Numba type.
_Leaf = tuple[tuple[int, ...], types.Type]


def _check_axis(axis: Any, where: str) -> int | None:
    """One ``in_axes`` entry: 0 or None (JAX's other axes are not supported)."""
    if axis is None or (isinstance(axis, int) and not isinstance(axis, bool) and axis == 0):
        return axis
    if isinstance(axis, int) and not isinstance(axis, bool):
        raise ArgumentError(f"{where} is {axis}: pyjlad.vmap maps over the leading axis only; "
                            "use 0 (mapped) or None (not mapped), and move the axis first (np.moveaxis)")
    raise ArgumentTypeError(f"{where} must be 0 or None, got {axis!r}")


def _normalize_in_axes(in_axes: Any) -> int | None | tuple[int | None, ...]:
    """``in_axes`` checked: 0, None, or a tuple of them."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple):
        return tuple(_check_axis(a, f"in_axes[{k}]") for k, a in enumerate(in_axes))
    return _check_axis(in_axes, "in_axes")


def _axes_for(in_axes: int | None | tuple[int | None, ...], nargs: int) -> tuple[int | None, ...]:
    """One axis per argument of a call with ``nargs`` arguments."""
    if not isinstance(in_axes, tuple):
        axes = (in_axes,) * nargs
    elif len(in_axes) != nargs:
        raise ArgumentError(f"in_axes has {len(in_axes)} entries but the batched function was called with "
                            f"{nargs} argument(s); give one entry (0 or None) per argument")
    else:
        axes = in_axes
    if 0 not in axes:
        raise ArgumentError("in_axes maps no argument (all None): at least one argument must have axis 0")
    return axes


def _batch_size(args: tuple[Any, ...], axes: tuple[int | None, ...]) -> int:
    """The common length of the mapped arguments' leading axis."""
    sizes = {}
    for k, (arg, axis) in enumerate(zip(args, axes)):
        if axis is None:
            continue
        if not isinstance(arg, np.ndarray) or arg.ndim == 0:
            raise ArgumentError(f"argument {k} is mapped over axis 0 (in_axes) but is "
                                f"{type(arg).__name__ if not isinstance(arg, np.ndarray) else 'a 0-d array'}, "
                                "which has no leading axis; pass an array of samples or use in_axes None for it")
        sizes[k] = arg.shape[0]
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"argument {k}: {n}" for k, n in sizes.items())
        raise ArgumentError(f"the mapped arguments have different leading sizes ({listed}); "
                            "every argument with in_axes 0 must hold the same number of samples")
    n = next(iter(sizes.values()))
    if n == 0:
        raise ArgumentError("the mapped arguments hold 0 samples; pyjlad.vmap needs at least one")
    return n


def _typing_context() -> Any:
    from numba.core.registry import cpu_target

    context = cpu_target.typing_context
    context.refresh()
    return context


def _sample_type(context: Any, arg: types.Type) -> types.Type:
    """The Numba type of ``arg[i]``."""
    return context.resolve_function_type(operator.getitem, (arg, types.intp), {}).return_type


def _result_type(f: Any, ftype: types.Type, sample_types: tuple[types.Type, ...]) -> types.Type:
    """What ``f`` returns, inside @njit code, for one sample's argument types."""
    context = _typing_context()
    try:
        sig = context.resolve_function_type(ftype, sample_types, {})
    except TypingError as exc:
        raise UnsupportedFunctionError(f"pyjlad.vmap cannot call {f!r} with one sample's arguments "
                                       f"({', '.join(map(str, sample_types))}): {exc}") from None
    if sig is None:
        raise UnsupportedFunctionError(f"pyjlad.vmap cannot call {f!r} with one sample's arguments "
                                       f"({', '.join(map(str, sample_types))}) inside @njit code")
    return sig.return_type


def _leaves(result: types.Type, f: Any, path: tuple[int, ...] = ()) -> list[_Leaf]:
    """The numbers and arrays ``result`` is made of, with their paths through nested tuples."""
    if isinstance(result, types.BaseTuple):
        return [leaf for k, t in enumerate(result.types) for leaf in _leaves(t, f, (*path, k))]
    if isinstance(result, (types.Number, types.Boolean)) or (
            isinstance(result, types.Array) and isinstance(result.dtype, (types.Number, types.Boolean))):
        return [(path, result)]
    raise UnsupportedFunctionError(f"pyjlad.vmap cannot stack the results of {f!r}: it returns {result}, and "
                                   "only numbers, arrays of numbers and tuples of them can be stacked")


def _scalar_class(leaf: types.Type) -> type:
    return as_dtype(leaf.dtype if isinstance(leaf, types.Array) else leaf).type


def _call_source(axes: tuple[int | None, ...], i: str) -> str:
    """``f`` called on sample ``i``: ``f(a0[i], a1, ...)`` for ``axes``."""
    return "f(" + ", ".join(f"a{k}[{i}]" if axis == 0 else f"a{k}" for k, axis in enumerate(axes)) + ",)"


def _loop_source(axes: tuple[int | None, ...], leaves: list[_Leaf], nested: str) -> str:
    """The source of the parallel loop for ``axes``: ``(done, nested)``, with each leaf stacked.

    ``done[i]`` is set once sample ``i`` is stored: an exception raised in a
    ``prange`` body ends that thread's share of the loop without reaching the
    caller (Numba drops it), so the caller finds the samples left undone.
    """
    names = ", ".join(f"a{k}" for k in range(len(axes)))

    def at(var: str, path: tuple[int, ...]) -> str:
        return var + "".join(f"[{k}]" for k in path)

    lines = [f"def batched(f, n, {names}):", "    done = np.zeros(n, np.bool_)", f"    r = {_call_source(axes, '0')}"]
    for j, (path, leaf) in enumerate(leaves):
        shape = f"(n,) + {at('r', path)}.shape" if isinstance(leaf, types.Array) else "n"
        lines += [f"    o{j} = np.empty({shape}, _dtype{j})", f"    o{j}[0] = {at('r', path)}"]
    lines += ["    done[0] = True", "    for i in prange(1, n):", f"        ri = {_call_source(axes, 'i')}"]
    lines += [f"        o{j}[i] = {at('ri', path)}" for j, (path, _) in enumerate(leaves)]
    lines += ["        done[i] = True", f"    return done, {nested}"]
    return "\n".join(lines)


def _one_source(axes: tuple[int | None, ...]) -> str:
    """The source of a serial call of ``f`` on sample ``k`` (re-raises a sample's exception)."""
    names = ", ".join(f"a{k}" for k in range(len(axes)))
    return f"def one(f, k, {names}):\n    return {_call_source(axes, 'k')}"


def _nested(result: types.Type, counter: list[int]) -> str:
    """The return expression rebuilding ``result``'s tuple nesting from the stacked leaves ``o0, o1, ...``."""
    if isinstance(result, types.BaseTuple):
        return "(" + "".join(_nested(t, counter) + ", " for t in result.types) + ")"
    counter[0] += 1
    return f"o{counter[0] - 1}"


def _compile(source: str, name: str, parallel: bool, **names: Any) -> Any:
    """``name`` from ``source`` (made here, from in_axes and result types), compiled by Numba."""
    namespace: dict[str, Any] = {"np": np, "prange": numba.prange, **names}
    exec(compile(source, f"<pyjlad.vmap {name}>", "exec"), namespace)  # noqa: S102 - source built above
    return numba.njit(parallel=parallel)(namespace[name])


def _compile_loop(axes: tuple[int | None, ...], result: types.Type, leaves: list[_Leaf]) -> Any:
    """The ``@njit(parallel=True)`` loop for ``axes`` and ``result``'s shape."""
    dtypes = {f"_dtype{j}": _scalar_class(leaf) for j, (_, leaf) in enumerate(leaves)}
    return _compile(_loop_source(axes, leaves, _nested(result, [0])), "batched", True, **dtypes)


def _raise_first_failure(one: Any, f: Any, done: np.ndarray, args: tuple[Any, ...]) -> None:
    """Raise what the serial loop raises: the exception of the first sample not done, run alone."""
    k = int(np.argmin(done))
    try:
        one(f, k, *args)
    except Exception as exc:
        exc.add_note(f"raised by sample {k} of pyjlad.vmap({getattr(f, '__name__', f)!s})")
        raise
    raise DifferentiatedFunctionError(f"sample {k} of pyjlad.vmap({f!r}) failed in the parallel loop but "
                                      "raises nothing when run alone (please report it, with the function)")


def _numba_type(arg: Any, k: int) -> types.Type:
    """The Numba type of argument ``k``, or an error saying it cannot be passed to @njit code."""
    try:
        return numba.typeof(arg)
    except (ValueError, TypeError):
        raise ArgumentTypeError(f"argument {k} of the batched function is a {type(arg).__name__}, which Numba "
                                "cannot pass to @njit code; pass NumPy arrays, numbers or tuples of them") from None


def _check_numba_callable(f: Any) -> None:
    """Refuse ``f`` when Numba cannot call it from @njit code."""
    try:
        ftype = numba.typeof(f)
    except (ValueError, TypeError):
        ftype = None
    if not isinstance(ftype, types.Callable):
        raise UnsupportedFunctionError(f"pyjlad.vmap needs a function Numba can call from @njit code (a "
                                       f"pyjlad.grad/value_and_grad callable or an @njit function); got {f!r}")


class Batched:
    """The callable :func:`vmap` returns: ``f`` over the leading axis of the mapped arguments, in parallel."""

    def __init__(self, f: Callable[..., Any], in_axes: InAxes) -> None:
        self.__wrapped__ = f
        self.in_axes = _normalize_in_axes(in_axes)
        self._loops: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<pyjlad.vmap of {self.__wrapped__!r}, in_axes={self.in_axes!r}>"

    def _loop(self, axes: tuple[int | None, ...], args: tuple[Any, ...]) -> tuple[Any, Any]:
        """The compiled parallel loop and single-sample call for these argument types (made once per types)."""
        ftype = numba.typeof(self.__wrapped__)
        argtypes = tuple(_numba_type(a, k) for k, a in enumerate(args))
        key = (ftype, axes, argtypes)
        loop = self._loops.get(key)
        if loop is None:
            with self._lock:
                loop = self._loops.get(key)
                if loop is None:
                    context = _typing_context()
                    samples = tuple(_sample_type(context, t) if axis == 0 else t for t, axis in zip(argtypes, axes))
                    result = _result_type(self.__wrapped__, ftype, samples)
                    loop = _compile_loop(axes, result, _leaves(result, self.__wrapped__))
                    loop = self._loops[key] = (loop, _compile(_one_source(axes), "one", False))
        return loop

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise ArgumentTypeError("pyjlad.vmap's batched function takes positional arguments only; "
                                    f"got keyword argument(s) {', '.join(kwargs)}")
        axes = _axes_for(self.in_axes, len(args))
        n = _batch_size(args, axes)
        loop, one = self._loop(axes, args)
        done, result = loop(self.__wrapped__, n, *args)
        if not done.all():
            _raise_first_failure(one, self.__wrapped__, done, args)
        return result


def vmap(f: Callable[..., Any], in_axes: InAxes = 0, out_axes: int = 0) -> Batched:
    """Map ``f`` over the leading axis of its arguments, the samples run in parallel on all cores.

    Parameters
    ----------
    f : callable
        Anything Numba can call from ``@njit`` code: a ``pyjlad.grad`` or
        ``pyjlad.value_and_grad`` callable (per-sample gradients), or a plain
        ``@njit`` function.
    in_axes : 0, None or tuple of them
        Per argument: ``0`` maps it over its leading axis, ``None`` passes it
        whole to every sample. A single value applies to all arguments. At
        least one argument must be mapped; the mapped ones must hold the same
        number of samples (at least one).
    out_axes : int
        Only ``0``: results are stacked along a new leading axis.

    Returns
    -------
    Batched
        A callable: ``vmap(f, in_axes)(*args)[i] == f(*args_i)`` where ``args_i``
        takes sample ``i`` of each mapped argument, computed in an
        ``@njit(parallel=True)`` ``prange`` loop, equal to a serial loop bit for
        bit. Scalars stack into 1-D arrays, arrays gain a leading axis, tuples
        stay tuples of stacked results.

    Raises
    ------
    ArgumentError
        An ``in_axes`` entry or ``out_axes`` other than 0/None, an ``in_axes``
        tuple of the wrong length, mapped arguments of different sizes, a
        mapped argument with no leading axis (on the call).
    ArgumentTypeError
        ``f`` not callable, an ``in_axes`` entry of the wrong type, keyword
        arguments or an argument Numba cannot type (on the call).
    UnsupportedFunctionError
        ``f`` cannot be called from ``@njit`` code (a plain Python function),
        or not with one sample's arguments,
        or returns something other than numbers, arrays or tuples of them.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> @njit
    ... def f(x, w):
    ...     return w * x[0] * x[1]
    >>> vg = pyjlad.vmap(pyjlad.value_and_grad(f), in_axes=(0, None))
    >>> values, grads = vg(np.array([[1.0, 2.0], [3.0, 4.0]]), 2.0)
    >>> values.tolist(), grads.tolist()
    ([4.0, 24.0], [[4.0, 2.0], [8.0, 6.0]])
    """
    if isinstance(out_axes, bool) or out_axes != 0:
        raise ArgumentError(f"out_axes is {out_axes!r}: pyjlad.vmap stacks results along axis 0 only")
    if not callable(f):
        raise ArgumentTypeError(f"pyjlad.vmap needs a callable, got {type(f).__name__}")
    _check_numba_callable(f)
    return Batched(f, in_axes)
