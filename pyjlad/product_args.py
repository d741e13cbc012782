"""The arguments of the Jacobian and Hessian products (:mod:`pyjlad.products`): checks and layout.

What each product needs before its sweep: ``primals``/``tangents`` as tuples, real tangents shaped
like their arguments, the kind of ``f``'s result (float, nothing, or arrays and tuples), the array
argument a function returning nothing writes, private copies of the caller's arrays, and shadows.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
from numba import types as nbtypes
from numba.core.ccallback import CFunc

from .abi import ArrayArg
from .errors import ArgumentError, ArgumentTypeError, UnsupportedFunctionError
from .export import as_numba_function, describe_function, export, numba_argtypes, result_type
from .memo import cached_for
from .sweep import compact_overlapping, shadow_like

__all__ = ["as_result", "as_tuple", "needs_point", "with_defaults", "check_real", "check_tangent", "copy_arrays", "differentiable",
           "is_float_array", "passed_arrays", "refuse_containers", "result_kind", "shadow_of", "unit_vector", "written_output"]


def is_float_array(x: Any) -> bool:
    """Whether ``x`` is a float64 or float32 array."""
    return isinstance(x, np.ndarray) and x.dtype in (np.float64, np.float32)


def _is_float_scalar(x: Any) -> bool:
    return isinstance(x, (float, np.floating)) and not isinstance(x, bool)


def argument_position(wrt: Any, nargs: int, what: str = "wrt") -> int:
    """``wrt`` as a position among ``nargs`` arguments, a negative one counting from the end (as JAX's
    ``argnums``); anything else refused.

    >>> argument_position(-1, 3), argument_position(2, 3)
    (2, 2)
    """
    if isinstance(wrt, bool) or not isinstance(wrt, (int, np.integer)) or not -nargs <= wrt < nargs:
        raise ArgumentTypeError(f"{what} must name one of arguments 0..{nargs - 1} (or -{nargs}..-1 from the end), "
                                f"got {wrt!r}")
    return int(wrt) % nargs


_NUMBERS = (bool, int, float, np.bool_, np.integer, np.floating)


def _positional_defaults(f: Any) -> tuple[Any, ...] | None:
    """The defaults of ``f``'s positional parameters in order (``inspect.Parameter.empty`` where one has
    none), or ``None`` where none are filled in: a ``@cfunc`` (its signature names every argument), or no
    Python signature to read."""
    target = as_numba_function(f)
    if isinstance(target, CFunc):
        return None
    try:
        params = inspect.signature(target.py_func).parameters.values()
    except (AttributeError, TypeError, ValueError):
        return None
    return tuple(p.default for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def with_defaults(f: Any, args: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...]]:
    """``(f, args)`` to differentiate for the call ``f(*args)`` that leaves out parameters with defaults.

    Where every omitted default is a number (float, int or bool), ``args`` followed by those defaults (the
    same function, the filled-in arguments constants); where some other default is omitted (``None``), a
    wrapper of ``f`` taking ``args`` alone, whose call of ``f`` Numba fills in as it fills in any call
    (:func:`pyjlad.pytrees.flattened_function`). Otherwise (no omission, tuple arguments, a parameter
    without a default, a ``@cfunc``) as given: the compiler's error then names what to pass.

    Examples
    --------
    >>> def f(x, scale=2.0, p=3):
    ...     return scale * x ** p
    >>> with_defaults(f, (1.5,))[1]
    (1.5, 2.0, 3)
    >>> with_defaults(f, (1.5, 4.0, 2))[1]
    (1.5, 4.0, 2)
    """
    from .pytrees import flatten_call, flattened_function, has_container

    defaults = cached_for(f, ("positional defaults",), lambda: _positional_defaults(f))
    if defaults is None or len(args) >= len(defaults) or has_container(args):  # (a flattened call fills them)
        return f, args
    omitted = defaults[len(args):]
    if any(d is inspect.Parameter.empty for d in omitted):
        return f, args
    if all(isinstance(d, _NUMBERS) for d in omitted):
        return f, (*args, *omitted)
    return flattened_function(f, flatten_call(f, args, {}), has_aux=False), args


def needs_point(args: tuple[Any, ...], transform: str) -> None:
    """Refuse a ``transform`` (``hessian``, ``jacobian``) called with no arguments of ``f``: it takes the
    point, not a function of it as JAX's ``jax.hessian(f)(x)`` does."""
    if not args:
        raise ArgumentTypeError(
            f"{transform}(f, *args) evaluates at the arguments given after f: write pyjlad.{transform}(f, x) "
            f"(JAX's jax.{transform}(f)(x) form returns a function; pyjlad.{transform} does not)"
        )


def differentiable(x: Any) -> bool:
    """Whether ``x`` has a derivative: a float array or a float scalar (not an int or bool)."""
    return is_float_array(x) or _is_float_scalar(x)


def result_kind(f: Any, primals: tuple[Any, ...]) -> str:
    """What ``f(*primals)`` returns: ``"scalar"`` (a float), ``"none"`` or ``"other"`` (arrays, tuples)."""
    restype = result_type(f, numba_argtypes(primals))
    if isinstance(restype, nbtypes.Float):
        return "scalar"
    if isinstance(restype, nbtypes.NoneType):
        return "none"
    return "other"


def as_tuple(values: Any, what: str, transform: str) -> tuple[Any, ...]:
    """``primals``/``tangents`` as a tuple; a bare array or float is a mistake JAX users make too."""
    if isinstance(values, (tuple, list)):
        return tuple(values)
    raise ArgumentTypeError(
        f"{transform}: {what} must be a tuple with one entry per argument of f, e.g. (x,) for a function "
        f"of one argument; got {type(values).__name__}"
    )


def refuse_containers(args: tuple[Any, ...], transform: str) -> None:
    """Refuse tuple, list and dict arguments of ``transform``, which takes floats and arrays (its sweeps
    are laid out per argument), saying what to pass instead."""
    for index, value in enumerate(args):
        if isinstance(value, (tuple, list, dict)):
            raise ArgumentTypeError(
                f"{transform}: argument {index} is a {type(value).__name__}, but {transform} takes floats, ints, "
                "bools and arrays: pass the entries as separate arguments (pyjlad.grad, value_and_grad, gradient "
                "and value_and_gradient accept tuples and NamedTuples)"
            )


def check_real(value: Any, what: str) -> None:
    """Refuse a complex tangent or cotangent (``what`` names it), or one that is not numbers."""
    try:
        is_complex = np.iscomplexobj(value)
    except (TypeError, ValueError) as exc:  # ragged nesting, or objects NumPy cannot make an array of
        raise ArgumentTypeError(f"the {what} is not a float or an array of floats: {exc}") from None
    if is_complex:
        raise ArgumentTypeError(
            f"the {what} is complex, but pyjlad differentiates real functions (its imaginary part "
            "would be dropped): pass real and imaginary parts as separate real arrays"
        )


def check_tangent(index: int, x: Any, t: Any, what: str) -> None:
    """Refuse the ``what`` ("tangent", "vector v") ``t`` of argument ``x`` unless real and shaped like it."""
    check_real(t, f"{what} of argument {index}")
    if not differentiable(x):
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


def shadow_of(x: Any, fill: Any = None) -> tuple[Any, bool]:
    """A shadow of array ``x`` (:func:`~pyjlad.sweep.shadow_like`); for a scalar, its tangent (``fill`` or 0)."""
    if isinstance(x, np.ndarray):
        return shadow_like(x, fill)
    return (0.0 if fill is None else float(fill)), False


def written_output(f: Any, primals: tuple[Any, ...]) -> int:
    """The first float array argument ``f`` writes: the output of a function that returns nothing."""
    abi = export(f, numba_argtypes(primals)).abi
    for index, arg in enumerate(abi.args):
        if isinstance(arg, ArrayArg) and arg.writes and arg.differentiable:
            return index
    raise UnsupportedFunctionError(
        f"{describe_function(f)} returns nothing and writes no float array argument: "
        "there is no output to differentiate"
    )


def copy_arrays(primals: tuple[Any, ...]) -> tuple[Any, ...]:
    """``primals`` with each array copied (its memory layout kept)."""
    return tuple(np.array(x, copy=True, order="K") if isinstance(x, np.ndarray) else x for x in primals)


def passed_arrays(primals: tuple[Any, ...], kind: str) -> tuple[Any, ...]:
    """The arguments the sweep is given: for array and tuple results (``f`` already ran once to
    learn the output's shapes) private copies, so the caller's arrays are mutated at most once;
    arrays whose elements share memory (``np.broadcast_to``) compacted (see
    :func:`~pyjlad.sweep.compact_overlapping`).

    Shadows must be made from these, not from the caller's arrays: Enzyme addresses a
    shadow with the strides of the array it is paired with, and a copy is compact.
    """
    if kind not in ("scalar", "none"):
        return copy_arrays(primals)
    return compact_overlapping(primals, [i for i, x in enumerate(primals) if is_float_array(x)])


def as_result(shadow: Any, is_view: bool) -> Any:
    """A shadow as returned to the caller: compacted if it is a strided view of a larger buffer."""
    return np.array(shadow) if is_view else shadow


def unit_vector(shape: tuple[int, ...], index: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The array of ``shape`` that is 1 at ``index`` and 0 elsewhere."""
    e = np.zeros(shape, dtype=dtype)
    e[index] = 1.0
    return e
