"""Batched derivatives on all cores: :func:`vmap`, a ``prange`` loop over a leading axis.

``pyjlad.vmap(pyjlad.grad(f), in_axes=(0, None))(X, theta)`` computes
``grad(f)(X[i], theta)`` for every ``i`` in an ``@njit(parallel=True)`` loop,
``for i in prange(n)``, that calls the derivative as machine code
(:mod:`pyjlad.numba_calls`): no Python runs per sample, and the samples are
spread over Numba's threading layer (``numba.get_num_threads()`` threads).
Each sample is computed exactly as a serial loop computes it, so the results
equal the serial loop's bit for bit.

Conventions are JAX's ``vmap``: ``in_axes`` is ``0`` or ``None`` for all
arguments, or a tuple with one entry per argument (``0``: the argument is
mapped over its leading axis; ``None``: it is passed whole to every sample).
As in JAX, an entry is a prefix of its argument's tuple nesting: a tuple entry
goes with a tuple argument of the same length (``in_axes=((0, None), (0, None))``
for ``jvp_fn(f)(primals, tangents)``), and a ``0`` or ``None`` applies to every
array inside a tuple; ``None`` values (a constant argument's tangent) are
passed as they are. Results are stacked along a new leading axis
(``out_axes=0``): a scalar result becomes a 1-D array, an array result one more
dimension, a tuple result a tuple of those, a ``None`` stays ``None``. Results
go to new arrays; the caller's arrays are written only where ``f`` itself writes
into its arguments (a sample's row, as a serial loop calling ``f`` would).

The batched function is ``f`` itself when ``f`` is any callable Numba can call
from ``@njit`` code: a ``pyjlad.grad``, ``value_and_grad``, ``jvp_fn``,
``vjp_fn``, ``hvp_fn``, ``jacrev`` or ``jacfwd`` callable, or a plain ``@njit``
function. The loop is compiled once per argument types (Numba dispatches on
them), the derivative for the per-sample argument types. The batched function
is itself callable from ``@njit`` code (:mod:`pyjlad.numba_calls.batched`), but
not from inside a ``prange`` loop or another ``vmap`` (nested parallel loops).

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
from collections.abc import Callable
from typing import Any, NamedTuple

import numba
import numpy as np
from numba import types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.errors import TypingError
from numba.np.numpy_support import as_dtype

from .errors import ArgumentError, ArgumentTypeError, DifferentiatedFunctionError, UnsupportedFunctionError
from .memo import cached_for

__all__ = ["vmap", "Batched"]

InAxes = int | None | tuple[Any, ...]
#: A result leaf: where it sits in the result (indices into nested tuples) and its Numba type.
_Leaf = tuple[tuple[int, ...], types.Type]


class _Input(NamedTuple):
    """One array or value the loop reads: argument ``arg`` at ``path`` (indices into its nested tuples)."""

    arg: int
    path: tuple[int, ...]
    axis: int | None
    type: types.Type
    where: str

    def source(self) -> str:
        """The expression reading it from the loop's parameters ``p0, p1, ...``."""
        return f"p{self.arg}" + "".join(f"[{j}]" for j in self.path)

    def value(self, args: tuple[Any, ...]) -> Any:
        """It, read from the Python arguments ``args``."""
        value = args[self.arg]
        for j in self.path:
            value = value[j]
        return value


class _Call(NamedTuple):
    """One call's arguments flattened: the inputs ``x0, x1, ...``, the call of ``f`` on sample ``IDX``
    (tuples rebuilt around the inputs), and one sample's argument types."""

    inputs: list[_Input]
    source: str
    samples: tuple[types.Type, ...]


class _Loops(NamedTuple):
    """What one batched call runs, for one set of argument types."""

    call: _Call
    run: Any  #: ``@njit(parallel=True)``: ``(done, stacked results)``
    one: Any  #: ``@njit``: sample ``k`` alone (re-raises its exception)


def _check_axis(axis: Any, where: str) -> int | None:
    """One ``in_axes`` leaf: 0 or None (JAX's other axes are not supported)."""
    if axis is None or (isinstance(axis, int) and not isinstance(axis, bool) and axis == 0):
        return axis
    if isinstance(axis, int) and not isinstance(axis, bool):
        raise ArgumentError(f"{where} is {axis}: pyjlad.vmap maps over the leading axis only; "
                            "use 0 (mapped) or None (not mapped), and move the axis first (np.moveaxis)")
    raise ArgumentTypeError(f"{where} must be 0 or None (or a tuple of them for a tuple argument), got {axis!r}")


def _normalize_in_axes(in_axes: Any, where: str = "in_axes") -> InAxes:
    """``in_axes`` checked: 0, None, or a (nested) tuple of them; lists read as tuples."""
    if isinstance(in_axes, list):
        in_axes = tuple(in_axes)
    if isinstance(in_axes, tuple):
        return tuple(_normalize_in_axes(a, f"{where}[{k}]") for k, a in enumerate(in_axes))
    return _check_axis(in_axes, where)


def _axes_for(in_axes: InAxes, nargs: int) -> tuple[Any, ...]:
    """One ``in_axes`` entry per argument of a call with ``nargs`` arguments."""
    if not isinstance(in_axes, tuple):
        return (in_axes,) * nargs
    if len(in_axes) != nargs:
        raise ArgumentError(f"in_axes has {len(in_axes)} entries but the batched function was called with "
                            f"{nargs} argument(s); give one entry (0 or None) per argument")
    return in_axes


def _typing_context() -> Any:
    from numba.core.registry import cpu_target

    context = cpu_target.typing_context
    context.refresh()
    return context


def _sample_type(context: Any, arg: types.Type) -> types.Type:
    """The Numba type of ``arg[i]``."""
    return context.resolve_function_type(operator.getitem, (arg, types.intp), {}).return_type


def _shown(t: types.Type) -> str:
    return "a 0-d array" if isinstance(t, types.Array) and t.ndim == 0 else str(t)


def _tuple_source(items: list[str]) -> str:
    return "(" + "".join(f"{x}, " for x in items) + ")"


def _flatten(context: Any, t: types.Type, axes: Any, where: str, arg: int, path: tuple[int, ...],
             inputs: list[_Input]) -> tuple[str, types.Type]:
    """Argument ``arg``'s part at ``path`` (type ``t``, in_axes ``axes``) as the loop passes it to ``f``:
    ``(source, one sample's type)``; its arrays and values are appended to ``inputs``.

    As JAX's ``in_axes``, ``axes`` is a prefix of the argument's tuple nesting: a
    tuple goes with a tuple argument of the same length, a 0 or None applies to
    every array inside. ``None`` values are passed as they are.
    """
    if isinstance(axes, tuple):
        if not isinstance(t, types.BaseTuple) or len(t) != len(axes):
            raise ArgumentError(f"in_axes gives {where} a tuple of {len(axes)} entries, but {where} is {_shown(t)}; "
                                "a tuple in in_axes goes with a tuple argument of the same length")
        parts = [_flatten(context, ti, ai, f"{where}[{j}]", arg, (*path, j), inputs)
                 for j, (ti, ai) in enumerate(zip(t, axes))]
        return _tuple_source([s for s, _ in parts]), types.BaseTuple.from_types([s for _, s in parts])
    if isinstance(t, types.NoneType):
        return "None", t
    if axes == 0 and isinstance(t, types.BaseTuple):
        return _flatten(context, t, (0,) * len(t), where, arg, path, inputs)
    if axes == 0 and not (isinstance(t, types.Array) and t.ndim > 0):
        raise ArgumentError(f"{where} is mapped over axis 0 (in_axes) but is {_shown(t)}, which has no leading "
                            "axis; pass an array of samples or use in_axes None for it")
    name = f"x{len(inputs)}"
    inputs.append(_Input(arg, path, axes, t, where))
    return (name, t) if axes is None else (f"{name}[IDX]", _sample_type(context, t))


def _flatten_call(context: Any, in_axes: InAxes, argtypes: tuple[types.Type, ...]) -> _Call:
    """A call with ``argtypes`` flattened for the loop (``ArgumentError`` where ``in_axes`` does not fit)."""
    inputs: list[_Input] = []
    parts = [_flatten(context, t, a, f"argument {k}", k, (), inputs)
             for k, (t, a) in enumerate(zip(argtypes, _axes_for(in_axes, len(argtypes))))]
    if not any(i.axis == 0 for i in inputs):
        raise ArgumentError("in_axes maps no argument (all None, or only None values): at least one array "
                            "argument must have axis 0")
    return _Call(inputs, "f" + _tuple_source([s for s, _ in parts]), tuple(t for _, t in parts))


def _check_sizes(args: tuple[Any, ...], inputs: list[_Input]) -> None:
    """The mapped arrays of ``args`` hold the same number of samples, at least one."""
    sizes = {i.where: i.value(args).shape[0] for i in inputs if i.axis == 0}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{where}: {n}" for where, n in sizes.items())
        raise ArgumentError(f"the mapped arguments have different leading sizes ({listed}); "
                            "every argument with in_axes 0 must hold the same number of samples")
    if next(iter(sizes.values())) == 0:
        raise ArgumentError("the mapped arguments hold 0 samples; pyjlad.vmap needs at least one")


def _refuse_aliased_samples(f: Any, args: tuple[Any, ...], inputs: list[_Input]) -> None:
    """Refuse a ``vmap`` of a derivative of ``g`` (``pyjlad.grad``, ``value_and_grad``, ``jvp_fn``, ``vjp_fn``,
    ``hvp_fn``, ``jacrev``, ``jacfwd``) where one sample's arguments of ``g`` share memory and ``g`` writes one of
    them, as the derivative itself refuses such a call from Python
    (:func:`pyjlad.written_aliases.refuse_written_aliases`): inside the loop the derivative, called from ``@njit``
    code, cannot check, and until 2026-12-06 such a batch was silently wrong (user-style probes: the gradients
    first, the products the same day). Quick where no two of the arguments' arrays may share memory (the usual
    call)."""
    from .written_aliases import refuse_written_aliases

    primals = _primals_of(f)
    if primals is None:
        return
    arrays = [v for v in (i.value(args) for i in inputs) if isinstance(v, np.ndarray)]
    if not any(np.may_share_memory(a, b) for k, a in enumerate(arrays) for b in arrays[k + 1:]):
        return
    g, pick = primals
    samples = next(i.value(args).shape[0] for i in inputs if i.axis == 0)
    for sample in range(samples):
        one = args
        for i in inputs:
            if i.axis == 0:
                one = _replaced(one, (i.arg, *i.path), i.value(args)[sample])
        refuse_written_aliases(g, pick(one), f"vmap of {f!r} (sample {sample})")


def _primals_of(f: Any) -> tuple[Any, Callable[[tuple[Any, ...]], tuple[Any, ...]]] | None:
    """For a derivative ``f`` of a function ``g``: ``g`` and how to read ``g``'s arguments from ``f``'s; None for
    anything else (a plain ``@njit`` function, which runs as written)."""
    from .product_fns import ProductFunction
    from .transforms import _ValueAndGrad

    if isinstance(f, _ValueAndGrad) or (isinstance(f, ProductFunction) and f.kind in ("jacrev", "jacfwd")):
        return f.__wrapped__, lambda args: args
    if isinstance(f, ProductFunction):
        return f.__wrapped__, lambda args: args[0] if isinstance(args[0], tuple) else ()
    return None


def _replaced(value: tuple[Any, ...], path: tuple[int, ...], leaf: Any) -> Any:
    """``value`` (nested tuples) with the item at ``path`` replaced by ``leaf``."""
    if not path:
        return leaf
    items = list(value)
    items[path[0]] = _replaced(items[path[0]], path[1:], leaf)
    return tuple(items)


def _result_type(context: Any, f: Any, sample_types: tuple[types.Type, ...]) -> types.Type:
    """What ``f`` returns, inside @njit code, for one sample's argument types."""
    try:
        sig = context.resolve_function_type(numba.typeof(f), sample_types, {})
    except TypingError as exc:
        raise UnsupportedFunctionError(f"pyjlad.vmap cannot call {f!r} with one sample's arguments "
                                       f"({', '.join(map(str, sample_types))}): {exc}") from None
    if sig is None:
        raise UnsupportedFunctionError(f"pyjlad.vmap cannot call {f!r} with one sample's arguments "
                                       f"({', '.join(map(str, sample_types))}) inside @njit code")
    return sig.return_type


def _leaves(result: types.Type, f: Any, path: tuple[int, ...] = ()) -> list[_Leaf]:
    """The numbers and arrays ``result`` is made of, with their paths through nested tuples (None is no leaf)."""
    if isinstance(result, types.BaseTuple):
        return [leaf for k, t in enumerate(result.types) for leaf in _leaves(t, f, (*path, k))]
    if isinstance(result, types.NoneType):
        return []
    if isinstance(result, (types.Number, types.Boolean)) or (
            isinstance(result, types.Array) and isinstance(result.dtype, (types.Number, types.Boolean))):
        return [(path, result)]
    raise UnsupportedFunctionError(f"pyjlad.vmap cannot stack the results of {f!r}: it returns {result}, and "
                                   "only numbers, arrays of numbers, None and tuples of them can be stacked")


def _scalar_class(leaf: types.Type) -> type:
    return as_dtype(leaf.dtype if isinstance(leaf, types.Array) else leaf).type


def _nested(result: types.Type, counter: list[int]) -> str:
    """The return expression rebuilding ``result``'s tuple nesting from the stacked leaves ``o0, o1, ...``."""
    if isinstance(result, types.BaseTuple):
        return _tuple_source([_nested(t, counter) for t in result.types])
    if isinstance(result, types.NoneType):
        return "None"
    counter[0] += 1
    return f"o{counter[0] - 1}"


def _head(name: str, call: _Call, nargs: int, first: str = "") -> list[str]:
    """``def name(first p0, p1, ...):`` and the lines binding the inputs ``x0, x1, ...``."""
    params = first + ", ".join(f"p{k}" for k in range(nargs))
    return [f"def {name}({params}):", *[f"    x{j} = {i.source()}" for j, i in enumerate(call.inputs)]]


def _first_mapped(call: _Call) -> int:
    return next(j for j, i in enumerate(call.inputs) if i.axis == 0)


def _run_source(call: _Call, nargs: int, leaves: list[_Leaf], nested: str) -> str:
    """The source of the parallel loop: ``(done, nested)``, with each result leaf stacked.

    ``done[i]`` is set once sample ``i`` is stored: an exception raised in a
    ``prange`` body ends that thread's share of the loop without reaching the
    caller (Numba drops it), so the caller finds the samples left undone.
    """
    def at(var: str, path: tuple[int, ...]) -> str:
        return var + "".join(f"[{k}]" for k in path)

    lines = [*_head("run", call, nargs), f"    n = x{_first_mapped(call)}.shape[0]",
             "    done = np.zeros(n, np.bool_)", f"    r = {call.source.replace('IDX', '0')}"]
    for j, (path, leaf) in enumerate(leaves):
        shape = f"(n,) + {at('r', path)}.shape" if isinstance(leaf, types.Array) else "n"
        lines += [f"    o{j} = np.empty({shape}, _dtype{j})", f"    o{j}[0] = {at('r', path)}"]
    lines += ["    done[0] = True", "    for i in prange(1, n):", f"        ri = {call.source.replace('IDX', 'i')}"]
    lines += [f"        o{j}[i] = {at('ri', path)}" for j, (path, _) in enumerate(leaves)]
    lines += ["        done[i] = True", f"    return done, {nested}"]
    return "\n".join(lines)


def _one_source(call: _Call, nargs: int) -> str:
    """The source of a serial call of ``f`` on sample ``k`` (re-raises a sample's exception)."""
    return "\n".join([*_head("one", call, nargs, "k, "), f"    return {call.source.replace('IDX', 'k')}"])


def _checked_source(call: _Call, nargs: int) -> str:
    """The source of the whole batched call inside @njit code: sizes checked, the loop run, a failed
    sample's exception raised (the checks and the re-raise the Python call makes in Python)."""
    first = _first_mapped(call)
    params = ", ".join(f"p{k}" for k in range(nargs))
    lines = [*_head("batched", call, nargs), f"    n = x{first}.shape[0]"]
    for j, i in enumerate(call.inputs):
        if i.axis == 0 and j != first:
            message = (f"pyjlad.vmap: {i.where} and {call.inputs[first].where} hold different numbers of samples; "
                       "every argument with in_axes 0 must hold the same number")
            lines += [f"    if x{j}.shape[0] != n:", f"        raise ArgumentError({message!r})"]
    lines += ["    if n == 0:", "        raise ArgumentError('pyjlad.vmap: the mapped arguments hold 0 samples')",
              f"    done, r = run({params})", "    for k in range(n):", "        if not done[k]:",
              f"            one(k, {params})",
              "            raise DifferentiatedFunctionError('a sample of pyjlad.vmap failed in the parallel loop but "
              "raises nothing when run alone (please report it, with the function)')",
              "    return r"]
    return "\n".join(lines)


def _compile(source: str, name: str, parallel: bool | None, **names: Any) -> Any:
    """``name`` from ``source`` (made here, from in_axes and types), compiled by Numba (``parallel`` None:
    the Python function itself, for compiling into a caller)."""
    namespace: dict[str, Any] = {"np": np, "prange": numba.prange, **names}
    exec(compile(source, f"<pyjlad.vmap {name}>", "exec"), namespace)  # noqa: S102 - source built above
    return namespace[name] if parallel is None else numba.njit(parallel=parallel)(namespace[name])


def _make_loops(f: Any, in_axes: InAxes, argtypes: tuple[types.Type, ...]) -> _Loops:
    """The parallel loop and the single-sample call of ``f`` for ``argtypes``."""
    context = _typing_context()
    call = _flatten_call(context, in_axes, argtypes)
    result = _result_type(context, f, call.samples)
    leaves = _leaves(result, f)
    dtypes = {f"_dtype{j}": _scalar_class(leaf) for j, (_, leaf) in enumerate(leaves)}
    run = _compile(_run_source(call, len(argtypes), leaves, _nested(result, [0])), "run", True, f=f, **dtypes)
    return _Loops(call, run, _compile(_one_source(call, len(argtypes)), "one", False, f=f))


def _shared_loops(f: Any, in_axes: InAxes, argtypes: tuple[types.Type, ...]) -> _Loops:
    """The loops of :func:`_make_loops`, made once per Numba type of ``f``, ``in_axes`` and ``argtypes``.

    The loops call ``f`` through its Numba type alone: every ``pyjlad.grad(g)`` made again has the
    same type (:mod:`pyjlad.numba_calls.derivatives`), an ``@njit`` function its dispatcher's. So
    ``pyjlad.vmap(pyjlad.grad(g))(...)`` written inside a loop compiles its parallel loop on the
    first pass only (before, each pass compiled it again).
    """
    return cached_for(numba.typeof(f), ("vmap-loops", in_axes, argtypes), lambda: _make_loops(f, in_axes, argtypes))


def _raise_first_failure(one: Any, f: Any, done: np.ndarray, args: tuple[Any, ...]) -> None:
    """Raise what the serial loop raises: the exception of the first sample not done, run alone."""
    k = int(np.argmin(done))
    _run_sample(one, f, k, args)
    raise DifferentiatedFunctionError(f"sample {k} of pyjlad.vmap({f!r}) failed in the parallel loop but "
                                      "raises nothing when run alone (please report it, with the function)")


def _raise_first_serially(loops: _Loops, f: Any, args: tuple[Any, ...], failure: SystemError) -> None:
    """Raise what the serial loop raises where the parallel loop itself failed with ``failure``.

    A sample that raises on the calling thread (whose share of the ``prange`` loop Numba's threading layer
    runs too) leaves its exception set on that thread, and the loop's call then fails with Numba's
    ``SystemError`` ("returned a result with an exception set"), the sample's exception only its cause:
    seen from the second failing call on, with Numba 0.68's omp layer. Which samples finished is then
    unknown, so the samples run one by one until one raises, as the serial loop would; ``failure`` is raised
    again if none does."""
    samples = next(np.shape(i.value(args))[0] for i in loops.call.inputs if i.axis == 0)
    for k in range(samples):
        _run_sample(loops.one, f, k, args)
    raise failure


def _run_sample(one: Any, f: Any, k: int, args: tuple[Any, ...]) -> None:
    """Sample ``k`` alone; its exception raised with a note naming the sample."""
    try:
        one(k, *args)
    except Exception as exc:
        exc.add_note(f"raised by sample {k} of pyjlad.vmap({getattr(f, '__name__', f)!s})")
        raise exc from None


def _numba_type(arg: Any, k: int) -> types.Type:
    """The Numba type of argument ``k``, or an error saying it cannot be passed to @njit code."""
    try:
        return numba.typeof(arg)
    except (ValueError, TypeError):
        raise ArgumentTypeError(f"argument {k} of the batched function is a {type(arg).__name__}, which Numba "
                                "cannot pass to @njit code; pass NumPy arrays, numbers, None or tuples of them") \
            from None


def _check_numba_callable(f: Any) -> None:
    """Refuse ``f`` when Numba cannot call it from @njit code as one sample."""
    if isinstance(f, Batched):
        raise UnsupportedFunctionError(f"pyjlad.vmap needs a function Numba can call from @njit code for one sample, "
                                       f"and {f!r} is a parallel loop itself (nested parallel loops are not "
                                       "supported): map the inner function over all the batched axes at once")
    try:
        ftype = numba.typeof(f)
    except (ValueError, TypeError):
        ftype = None
    if not isinstance(ftype, types.Callable):
        raise UnsupportedFunctionError(f"pyjlad.vmap needs a function Numba can call from @njit code (a "
                                       f"pyjlad.grad/value_and_grad callable or an @njit function); got {f!r}")


class Batched:
    """The callable :func:`vmap` returns: ``f`` over the leading axis of the mapped arguments, in parallel.

    Callable from Python and, passed as an argument or referenced as a global or
    closure variable, from ``@njit`` code (:mod:`pyjlad.numba_calls.batched`).
    """

    def __init__(self, f: Callable[..., Any], in_axes: InAxes) -> None:
        self.__wrapped__ = f
        self.in_axes = _normalize_in_axes(in_axes)
        self._loops: dict[tuple[types.Type, ...], _Loops] = {}

    def __repr__(self) -> str:
        return f"<pyjlad.vmap of {self.__wrapped__!r}, in_axes={self.in_axes!r}>"

    def loops(self, argtypes: tuple[types.Type, ...]) -> _Loops:
        """The compiled loops for the argument types ``argtypes`` (made once per types).

        Made under Numba's compiler lock (re-entrant): typing an @njit caller holds
        it and asks for these loops, so a lock of our own could deadlock with it.
        """
        loops = self._loops.get(argtypes)
        if loops is None:
            with global_compiler_lock:
                loops = self._loops.get(argtypes)
                if loops is None:
                    loops = self._loops[argtypes] = _shared_loops(self.__wrapped__, self.in_axes, argtypes)
        return loops

    def njit_source(self, argtypes: tuple[types.Type, ...]) -> Callable[..., Any]:
        """The Python function an @njit caller compiles in for a call with ``argtypes``."""
        loops = self.loops(argtypes)
        return _compile(_checked_source(loops.call, len(argtypes)), "batched", None, run=loops.run, one=loops.one,
                        ArgumentError=ArgumentError, DifferentiatedFunctionError=DifferentiatedFunctionError)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise ArgumentTypeError("pyjlad.vmap's batched function takes positional arguments only; "
                                    f"got keyword argument(s) {', '.join(kwargs)}")
        loops = self.loops(tuple(_numba_type(a, k) for k, a in enumerate(args)))
        _check_sizes(args, loops.call.inputs)
        _refuse_aliased_samples(self.__wrapped__, args, loops.call.inputs)
        try:
            done, result = loops.run(*args)
        except SystemError as exc:
            _raise_first_serially(loops, self.__wrapped__, args, exc)
        if not done.all():
            _raise_first_failure(loops.one, self.__wrapped__, done, args)
        return result


def vmap(f: Callable[..., Any], in_axes: InAxes = 0, out_axes: int = 0) -> Batched:
    """Map ``f`` over the leading axis of its arguments, the samples run in parallel on all cores.

    Parameters
    ----------
    f : callable
        Anything Numba can call from ``@njit`` code: a ``pyjlad.grad`` or
        ``pyjlad.value_and_grad`` callable (per-sample gradients), a
        ``jvp_fn``/``vjp_fn``/``hvp_fn``/``jacrev``/``jacfwd`` callable, or a
        plain ``@njit`` function; not another ``vmap``.
    in_axes : 0, None or (nested) tuple of them
        Per argument: ``0`` maps it over its leading axis, ``None`` passes it
        whole to every sample; a tuple entry for a tuple argument gives one
        entry per element (a prefix of its nesting, as JAX's). A single value
        applies to all arguments. At least one array must be mapped; the
        mapped ones must hold the same number of samples (at least one).
    out_axes : int
        Only ``0``: results are stacked along a new leading axis.

    Returns
    -------
    Batched
        A callable: ``vmap(f, in_axes)(*args)[i] == f(*args_i)`` where ``args_i``
        takes sample ``i`` of each mapped argument, computed in an
        ``@njit(parallel=True)`` ``prange`` loop, equal to a serial loop bit for
        bit. Scalars stack into 1-D arrays, arrays gain a leading axis, tuples
        stay tuples of stacked results, ``None`` stays ``None``. Callable from
        ``@njit`` code too (not inside a ``prange`` loop).

    Raises
    ------
    ArgumentError
        An ``in_axes`` entry or ``out_axes`` other than 0/None, an ``in_axes``
        tuple of the wrong length or for an argument that is no tuple, mapped
        arguments of different sizes, a mapped argument with no leading axis
        (on the call).
    ArgumentTypeError
        ``f`` not callable, an ``in_axes`` entry of the wrong type, keyword
        arguments or an argument Numba cannot type (on the call).
    UnsupportedFunctionError
        ``f`` cannot be called from ``@njit`` code (a plain Python function)
        or is a ``vmap``, or cannot be called with one sample's arguments,
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

    Batched directional derivatives: ``in_axes`` follows the tuples of
    ``jvp_fn(f)(primals, tangents)``; ``w`` and its (None) tangent are not mapped.

    >>> jvps = pyjlad.vmap(pyjlad.jvp_fn(f), in_axes=((0, None), (0, None)))
    >>> values, tangents = jvps((np.array([[1.0, 2.0], [3.0, 4.0]]), 2.0), (np.ones((2, 2)), None))
    >>> tangents.tolist()
    [6.0, 14.0]
    >>> njit(lambda x, t: jvps((x, 2.0), (t, None))[1])(np.array([[1.0, 2.0]]), np.ones((1, 2))).tolist()
    [6.0]
    """
    if isinstance(out_axes, bool) or out_axes != 0:
        raise ArgumentError(f"out_axes is {out_axes!r}: pyjlad.vmap stacks results along axis 0 only")
    if not callable(f):
        raise ArgumentTypeError(f"pyjlad.vmap needs a callable, got {type(f).__name__}")
    _check_numba_callable(f)
    return Batched(f, in_axes)
