"""Jacobian and Hessian products: ``jvp``, ``vjp``, ``jacobian``, ``hessian``, ``hvp``.

Modelled on JAX's transforms, for Numba functions whose result is a float, a
float array, a tuple of those, or nothing (a function that writes its result
into an array argument).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import types as nbtypes

from .abi import ArrayArg
from .engines import default_engine_name, get_engine
from .engines.base import Sweep, compact_overlapping, shadow_like
from .errors import ArgumentError, ArgumentTypeError, UnsupportedFunctionError
from .export import as_numba_function, describe_function, export, numba_argtypes, result_type
from .memo import cached_for
from .outputs import output_layout, output_wrapper

__all__ = ["jvp", "vjp", "jacobian", "hessian", "hvp"]


def compiled_sweep(f: Any, sweep: Sweep, engine: str | None) -> Any:
    """The engine's compiled sweep of ``f`` (cached per function)."""
    name = engine or default_engine_name()
    return cached_for(f, ("sweep", sweep, name), lambda: get_engine(name).compile(f, sweep))


def _is_float_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype in (np.float64, np.float32)


def _is_float_scalar(x: Any) -> bool:
    return isinstance(x, (float, np.floating)) and not isinstance(x, bool)


def _differentiable(x: Any) -> bool:
    return _is_float_array(x) or _is_float_scalar(x)


def _result_kind(f: Any, primals: tuple[Any, ...]) -> str:
    restype = result_type(f, numba_argtypes(primals))
    if isinstance(restype, nbtypes.Float):
        return "scalar"
    if isinstance(restype, nbtypes.NoneType):
        return "none"
    return "other"


def _as_tuple(values: Any, what: str, transform: str) -> tuple[Any, ...]:
    """``primals``/``tangents`` as a tuple; a bare array or float is a mistake JAX users make too."""
    if isinstance(values, (tuple, list)):
        return tuple(values)
    raise ArgumentTypeError(
        f"{transform}: {what} must be a tuple with one entry per argument of f, e.g. (x,) for a function "
        f"of one argument; got {type(values).__name__}"
    )


def _check_real(value: Any, what: str) -> None:
    if np.iscomplexobj(value):
        raise ArgumentTypeError(
            f"the {what} is complex, but pyjlad differentiates real functions (its imaginary part "
            "would be dropped): pass real and imaginary parts as separate real arrays"
        )


def _check_tangent(index: int, x: Any, t: Any, what: str) -> None:
    _check_real(t, f"{what} of argument {index}")
    if not _differentiable(x):
        advice = (f"pass None as its {what}" if what != "vector v" else
                  "a Hessian is taken with respect to a float or float array argument (pass 2.0, not 2)")
        raise ArgumentTypeError(
            f"argument {index} is {type(x).__name__}"
            f"{' of ' + str(x.dtype) if isinstance(x, np.ndarray) else ''}, which has no derivative: {advice}"
        )
    if np.shape(t) != np.shape(x):
        raise ArgumentError(
            f"the {what} of argument {index} has shape {np.shape(t)}; the argument has shape {np.shape(x)}"
        )


def _shadow(x: Any, fill: Any = None) -> tuple[Any, bool]:
    if isinstance(x, np.ndarray):
        return shadow_like(x, fill)
    return (0.0 if fill is None else float(fill)), False


def _written_output(f: Any, primals: tuple[Any, ...]) -> int:
    abi = export(f, numba_argtypes(primals)).abi
    for index, arg in enumerate(abi.args):
        if isinstance(arg, ArrayArg) and arg.writes and arg.differentiable:
            return index
    raise UnsupportedFunctionError(
        f"{describe_function(f)} returns nothing and writes no float array argument: "
        "there is no output to differentiate"
    )


def _copy_arrays(primals: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(np.array(x, copy=True, order="K") if isinstance(x, np.ndarray) else x for x in primals)


def _passed_arrays(primals: tuple[Any, ...], kind: str) -> tuple[Any, ...]:
    """The arguments the sweep is given: for array and tuple results (``f`` already ran once to
    learn the output's shapes) private copies, so the caller's arrays are mutated at most once;
    arrays whose elements share memory (``np.broadcast_to``) compacted (see
    :func:`~pyjlad.engines.base.compact_overlapping`).

    Shadows must be made from these, not from the caller's arrays: Enzyme addresses a
    shadow with the strides of the array it is paired with, and a copy is compact.
    """
    if kind not in ("scalar", "none"):
        return _copy_arrays(primals)
    return compact_overlapping(primals, [i for i, x in enumerate(primals) if _is_float_array(x)])


def _as_result(shadow: Any, is_view: bool) -> Any:
    return np.array(shadow) if is_view else shadow


def jvp(f: Any, primals: Sequence[Any], tangents: Sequence[Any], *, engine: str | None = None) -> tuple[Any, Any]:
    """Jacobian-vector product by one forward-mode sweep.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` function, ``@numba.cfunc`` or plain Python function.
    primals : tuple
        The arguments of ``f``.
    tangents : tuple
        One tangent per argument (same shape as the argument), or ``None``
        for an argument held constant (always ``None`` for ints and bools).

    Returns
    -------
    (value, tangent)
        ``f(*primals)`` and the output tangent, with the structure of ``f``'s
        output (float, ndarray or tuple of those). For a function that returns
        nothing, ``value`` is ``None`` and ``tangent`` is the tangent of the
        first array argument it writes.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> value, tangent = pyjlad.jvp(lambda x: x * x, (np.array([1.0, 2.0]),), (np.array([1.0, 1.0]),))
    >>> tangent.tolist()
    [2.0, 4.0]
    """
    primals, tangents = _as_tuple(primals, "primals", "jvp"), _as_tuple(tangents, "tangents", "jvp")
    if len(tangents) != len(primals):
        raise ArgumentError(f"tangents has {len(tangents)} entries; primals has {len(primals)}")
    for index, (x, t) in enumerate(zip(primals, tangents)):
        if t is not None:
            _check_tangent(index, x, t, "tangent")
    kind = _result_kind(f, primals)
    written = _written_output(f, primals) if kind == "none" else None
    passed = _passed_arrays(primals, kind)
    arg_acts, arg_shadows, views = [], [], {}
    for index, (x, t) in enumerate(zip(passed, tangents)):
        if t is not None or index == written:
            shadow, views[index] = _shadow(x, t)
            arg_acts.append("dup")
            arg_shadows.append(shadow)
        else:
            arg_acts.append("const")
    if kind in ("scalar", "none"):
        compiled = compiled_sweep(f, Sweep("ad", "forward", tuple(arg_acts)), engine)
        value, tangent, _ = compiled(passed, tuple(arg_shadows), 0.0)
        if kind == "scalar":
            return float(value), float(tangent)
        position = [i for i, a in enumerate(arg_acts) if a == "dup"].index(written)
        return None, _as_result(arg_shadows[position], views[written])
    value = as_numba_function(f)(*primals)
    layout = output_layout(value, describe_function(f))
    buffers = [np.empty(shape, dtype) for _, shape, dtype in layout.buffers]
    out_shadows = [np.zeros_like(b) for b in buffers]
    wrapper = output_wrapper(f, len(primals), layout)
    compiled = compiled_sweep(wrapper, Sweep("ad", "forward", ("dup",) * len(buffers) + tuple(arg_acts)), engine)
    compiled((*buffers, *passed), (*out_shadows, *arg_shadows), 0.0)
    return value, layout.unpack(out_shadows)


def vjp(f: Any, primals: Sequence[Any], cotangent: Any, *, engine: str | None = None) -> tuple[Any, tuple[Any, ...]]:
    """Vector-Jacobian product by one reverse-mode sweep.

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` function, ``@numba.cfunc`` or plain Python function.
    primals : tuple
        The arguments of ``f``.
    cotangent : float, ndarray or tuple
        With the structure of ``f``'s output. For a function that returns
        nothing, it seeds the first array argument the function writes.

    Returns
    -------
    (value, cotangents)
        ``f(*primals)`` (``None`` for a function that returns nothing) and one
        input cotangent per argument: an ndarray or float for float arguments,
        ``None`` for integers and bools.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> value, (ct,) = pyjlad.vjp(lambda x: x * x, (np.array([1.0, 2.0]),), np.array([1.0, 10.0]))
    >>> ct.tolist()
    [2.0, 40.0]
    """
    primals = _as_tuple(primals, "primals", "vjp")
    for part in cotangent if isinstance(cotangent, tuple) else (cotangent,):
        _check_real(part, "cotangent")
    kind = _result_kind(f, primals)
    written = _written_output(f, primals) if kind == "none" else None
    passed = _passed_arrays(primals, kind)
    arg_acts, arg_shadows, views = [], [], {}
    for index, x in enumerate(passed):
        if not _differentiable(x):
            arg_acts.append("const")
            continue
        arg_acts.append("diff")
        if isinstance(x, np.ndarray):
            fill = None
            if index == written:
                fill = np.asarray(cotangent)
                if fill.shape != x.shape:
                    raise ArgumentError(
                        f"the cotangent has shape {fill.shape}; the output argument {index} has shape {x.shape}"
                    )
            shadow, views[index] = shadow_like(x, fill)
            arg_shadows.append(shadow)
    if kind == "scalar":
        if np.ndim(cotangent) != 0:
            raise ArgumentError(f"{describe_function(f)} returns a float: the cotangent must be a float")
        compiled = compiled_sweep(f, Sweep("ad", "reverse", tuple(arg_acts)), engine)
        value, _, adjoints = compiled(passed, tuple(arg_shadows), float(cotangent))
        return float(value), _collect(primals, arg_acts, arg_shadows, views, adjoints)
    if kind == "none":
        compiled = compiled_sweep(f, Sweep("ad", "reverse", tuple(arg_acts)), engine)
        _, _, adjoints = compiled(passed, tuple(arg_shadows), 0.0)
        return None, _collect(primals, arg_acts, arg_shadows, views, adjoints)
    value = as_numba_function(f)(*primals)
    layout = output_layout(value, describe_function(f))
    seeds = layout.seeds(cotangent, describe_function(f))
    buffers = [np.empty(shape, dtype) for _, shape, dtype in layout.buffers]
    wrapper = output_wrapper(f, len(primals), layout)
    compiled = compiled_sweep(wrapper, Sweep("ad", "reverse", ("dup",) * len(buffers) + tuple(arg_acts)), engine)
    _, _, adjoints = compiled((*buffers, *passed), (*seeds, *arg_shadows), 0.0)
    return value, _collect(primals, arg_acts, arg_shadows, views, adjoints)


def _collect(primals, arg_acts, arg_shadows, views, adjoints) -> tuple[Any, ...]:
    shadows = iter(arg_shadows)
    scalars = iter(adjoints)
    out: list[Any] = []
    for index, (x, act) in enumerate(zip(primals, arg_acts)):
        if act == "const":
            out.append(None)
        elif isinstance(x, np.ndarray):
            out.append(_as_result(next(shadows), views[index]))
        else:
            out.append(float(next(scalars)))
    return tuple(out)


def _output_shape(f: Any, primals: tuple[Any, ...]) -> tuple[tuple[int, ...], Any]:
    kind = _result_kind(f, primals)
    if kind == "scalar":
        return (), np.float64
    if kind == "none":
        x = primals[_written_output(f, primals)]
        return x.shape, x.dtype
    value = as_numba_function(f)(*_copy_arrays(primals))
    if isinstance(value, np.ndarray) and value.dtype in (np.float64, np.float32):
        return value.shape, value.dtype
    raise UnsupportedFunctionError(
        f"jacobian needs a function with one float or float-array output; "
        f"{describe_function(f)} returns {type(value).__name__} (use vjp/jvp for tuple outputs)"
    )


def jacobian(f: Any, *args: Any, wrt: int | tuple[int, ...] = 0, mode: str = "reverse",
             engine: str | None = None) -> Any:
    """The Jacobian of ``f`` with respect to argument(s) ``wrt``.

    Parameters
    ----------
    f : callable
        A function with one float or float-array output (or none, writing an
        output array argument).
    *args
        Arguments of ``f``.
    wrt : int or tuple of int
        Argument position(s).
    mode : {"reverse", "forward"}
        One reverse sweep per output element, or one forward sweep per input element.

    Returns
    -------
    ndarray or tuple of ndarray
        Shape ``output.shape + argument.shape`` (JAX's convention).

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> pyjlad.jacobian(lambda x: x * x, np.array([1.0, 3.0])).tolist()
    [[2.0, 0.0], [0.0, 6.0]]
    """
    if mode not in ("reverse", "forward"):
        raise ArgumentError(f"mode must be 'reverse' or 'forward', got {mode!r}")
    single = isinstance(wrt, int) and not isinstance(wrt, bool)
    indices = (wrt,) if single else tuple(wrt)
    for index in indices:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(args):
            raise ArgumentTypeError(f"wrt must name arguments 0..{len(args) - 1}, got {wrt!r}")
        if not _differentiable(args[index]):
            raise ArgumentTypeError(f"argument {index} is not a float or float array: it has no derivative")
    out_shape, out_dtype = _output_shape(f, args)
    results = []
    for index in indices:
        x = args[index]
        in_shape = np.shape(x)
        jac = np.zeros(out_shape + in_shape, dtype=np.result_type(out_dtype, np.asarray(x).dtype))
        if mode == "reverse":
            for out_idx in np.ndindex(out_shape):
                seed = 1.0 if out_shape == () else _unit(out_shape, out_idx, out_dtype)
                _, cots = vjp(f, _copy_arrays(args), seed, engine=engine)
                jac[out_idx] = cots[index]
        else:
            for in_idx in np.ndindex(in_shape):
                tangents = [None] * len(args)
                tangents[index] = 1.0 if in_shape == () else _unit(in_shape, in_idx, np.asarray(x).dtype)
                _, tangent = jvp(f, _copy_arrays(args), tuple(tangents), engine=engine)
                jac[(Ellipsis, *in_idx)] = tangent
        results.append(jac)
    return results[0] if single else tuple(results)


def _unit(shape: tuple[int, ...], index: tuple[int, ...], dtype: Any) -> np.ndarray:
    e = np.zeros(shape, dtype=dtype)
    e[index] = 1.0
    return e


def hvp(f: Any, primals: Sequence[Any], v: Any, wrt: int = 0, *, engine: str | None = None) -> Any:
    """Hessian-vector product ``H @ v`` without forming ``H``.

    By reverse over forward: the gradient of the directional derivative
    ``f'(x) v`` (forward over reverse for functions calling custom rules, whose
    Hessian is that of their reverse rules).

    Parameters
    ----------
    f : callable
        A function returning a real scalar.
    primals : tuple
        Its arguments.
    v : float or ndarray
        The vector, shaped like ``primals[wrt]``.
    wrt : int
        The argument the Hessian is taken with respect to.

    Returns
    -------
    float or ndarray
        Shaped like ``primals[wrt]``.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> pyjlad.hvp(lambda x: np.sum(x ** 3), (np.array([1.0, 2.0]),), np.array([1.0, 1.0])).tolist()
    [6.0, 12.0]
    """
    primals = _as_tuple(primals, "primals", "hvp")
    if isinstance(wrt, bool) or not isinstance(wrt, int) or not 0 <= wrt < len(primals):
        raise ArgumentTypeError(f"wrt must name one of arguments 0..{len(primals) - 1}, got {wrt!r}")
    primals = compact_overlapping(primals, [i for i, p in enumerate(primals) if _is_float_array(p)])
    x = primals[wrt]
    _check_tangent(wrt, x, v, "vector v")
    compiled = compiled_sweep(f, Sweep("hvp", "reverse", (), wrt), engine)
    if isinstance(x, np.ndarray):
        tangent, _ = shadow_like(x, np.asarray(v))
        gradient, _ = shadow_like(x)
        result, is_view = shadow_like(x)
        compiled(primals, (tangent, gradient, result), 0.0)
        return _as_result(result, is_view)
    dtype = np.float32 if isinstance(x, np.float32) else np.float64
    result = np.zeros(1, dtype)
    compiled(primals, (float(v), np.zeros(1, dtype), result), 0.0)
    return float(result[0])


def hessian(f: Any, *args: Any, wrt: int = 0, engine: str | None = None) -> Any:
    """The Hessian of the scalar function ``f`` with respect to argument ``wrt``.

    Computed column by column with :func:`hvp` (reverse over forward).

    Returns
    -------
    float or ndarray
        Shape ``argument.shape + argument.shape``.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> pyjlad.hessian(lambda x: x[0] ** 2 * x[1], np.array([1.0, 3.0])).tolist()
    [[6.0, 2.0], [2.0, 0.0]]
    """
    if isinstance(wrt, bool) or not isinstance(wrt, int) or not 0 <= wrt < len(args):
        raise ArgumentTypeError(f"wrt must name one of arguments 0..{len(args) - 1}, got {wrt!r}")
    x = args[wrt]
    if not isinstance(x, np.ndarray):
        return hvp(f, args, 1.0, wrt, engine=engine)
    hess = np.zeros(x.shape + x.shape, dtype=x.dtype)
    for idx in np.ndindex(x.shape):
        hess[(Ellipsis, *idx)] = hvp(f, args, _unit(x.shape, idx, x.dtype), wrt, engine=engine)
    return hess
