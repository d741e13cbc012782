"""Jacobian and Hessian products: ``jvp``, ``vjp``, ``jacobian``, ``hessian``, ``hvp``.

Modelled on JAX's transforms, for Numba functions whose result is a float, a
float array, a tuple of those, or nothing (a function that writes its result
into an array argument). Their arguments are checked and laid out for a sweep in
:mod:`pyjlad.product_args`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .activity import Activity
from .chunk_threads import chunk_threads, one_loop_thread, run_chunks, runs_in_parallel
from .engines import compiled_sweep
from .errors import ArgumentError, ArgumentTypeError, UnsupportedFunctionError
from .export import as_numba_function, describe_function
from .out_of_bounds import check_guards
from .outputs import output_layout, output_wrapper
from .product_args import (
    argument_position,
    as_result,
    as_tuple,
    check_real,
    check_tangent,
    copy_arrays,
    differentiable,
    is_float_array,
    needs_point,
    passed_arrays,
    refuse_containers,
    result_kind,
    shadow_of,
    unit_vector,
    with_defaults,
    written_output,
)
from .pytrees import flatten_call, flattened_function, has_container, tangent_leaves
from .random_draws import before_run, one_draw_per_call
from .sweep import Sweep, compact_overlapping, shadow_like
from .vector_batched import jvp_batched, vjp_batched
from .vector_products import check_chunk, hessian_columns, jacobian_vector
from .written_aliases import refuse_written_aliases

__all__ = ["jvp", "vjp", "jacobian", "hessian", "hvp"]


@one_draw_per_call(lambda f, primals, *_, **__: (f, primals))
def jvp(f: Any, primals: Sequence[Any], tangents: Sequence[Any], *, engine: str | None = None,
        batched: bool = False, chunk: int | None = None) -> tuple[Any, Any]:
    """Jacobian-vector product by one forward-mode sweep (or several, ``batched``).

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` function, ``@numba.cfunc`` or plain Python function.
    primals : tuple
        The arguments of ``f``: floats, ints, bools, arrays, and tuples and
        NamedTuples of them.
    tangents : tuple
        One tangent per argument (same shape as the argument; for a tuple
        argument a tuple of the same structure), or ``None`` for an argument
        (or entry) held constant (always ``None`` for ints and bools).
    batched : bool
        Each tangent has a leading axis of directions (shape ``(k, *x.shape)``;
        JAX users write ``vmap`` of ``jvp``); output tangents come back stacked
        the same way. Runs ``chunk`` directions per sweep in Enzyme's vector
        mode (:mod:`pyjlad.vector_batched`), on copies of the arguments (the
        caller's arrays are never written). Array and float arguments only.
    chunk : int, optional
        Most directions per sweep when ``batched`` (default
        :data:`~pyjlad.vector_products.DEFAULT_CHUNK`; fewer where fewer are
        needed: :func:`~pyjlad.chunk_threads.sweep_width`; 1: one sweep each).

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
    >>> pyjlad.jvp(lambda x: x * x, (np.array([1.0, 2.0]),), (np.eye(2),), batched=True)[1].tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    primals, tangents = as_tuple(primals, "primals", "jvp"), as_tuple(tangents, "tangents", "jvp")
    if len(tangents) != len(primals):
        raise ArgumentError(f"tangents has {len(tangents)} entries; primals has {len(primals)}")
    filled_f, filled = with_defaults(f, primals)
    if filled_f is not f or len(filled) > len(primals):  # omitted defaults: constants
        tangents = (*tangents, *(None,) * (len(filled) - len(primals)))
        return jvp(filled_f, filled, tangents, engine=engine, batched=batched, chunk=chunk)
    refuse_written_aliases(f, primals, "jvp")
    if batched:
        return jvp_batched(f, primals, tangents, check_chunk(chunk), engine)
    if has_container(primals):
        return _jvp_flattened(f, primals, tangents, engine)
    for index, (x, t) in enumerate(zip(primals, tangents)):
        if t is not None:
            check_tangent(index, x, t, "tangent")
    kind = result_kind(f, primals)
    written = written_output(f, primals) if kind == "none" else None
    passed = passed_arrays(primals, kind)
    arg_acts, arg_shadows, views = [], [], {}
    for index, (x, t) in enumerate(zip(passed, tangents)):
        if t is not None or index == written:
            shadow, views[index] = shadow_of(x, t)
            arg_acts.append(Activity.DUP)
            arg_shadows.append(shadow)
        else:
            arg_acts.append(Activity.CONST)
    if kind in ("scalar", "none"):
        compiled = compiled_sweep(f, Sweep("ad", "forward", tuple(arg_acts)), engine)
        value, tangent, _ = compiled(passed, tuple(arg_shadows), 0.0)
        if kind == "scalar":
            return float(value), float(tangent)
        position = [i for i, a in enumerate(arg_acts) if a is Activity.DUP].index(written)
        return None, as_result(arg_shadows[position], views[written])
    before_run()  # (every run of f draws what the first drew: pyjlad.random_draws)
    value = as_numba_function(f)(*primals)
    layout = output_layout(value, describe_function(f))
    buffers = [np.zeros(shape, dtype) for _, shape, dtype in layout.buffers]
    out_shadows = [np.zeros_like(b) for b in buffers]
    wrapper = output_wrapper(f, len(primals), layout)
    sweep = Sweep("ad", "forward", (Activity.DUP,) * len(buffers) + tuple(arg_acts))
    compiled = compiled_sweep(wrapper, sweep, engine)
    compiled((*buffers, *passed), (*out_shadows, *arg_shadows), 0.0)
    return value, layout.unpack(out_shadows)


@one_draw_per_call(lambda f, primals, *_, **__: (f, primals))
def vjp(f: Any, primals: Sequence[Any], cotangent: Any, *, engine: str | None = None, batched: bool = False,
        chunk: int | None = None) -> tuple[Any, tuple[Any, ...]]:
    """Vector-Jacobian product by one reverse-mode sweep (or several, ``batched``).

    Parameters
    ----------
    f : callable
        A ``@numba.njit`` function, ``@numba.cfunc`` or plain Python function.
    primals : tuple
        The arguments of ``f``: floats, ints, bools, arrays, and tuples and
        NamedTuples of them (whose cotangents come back in their structure).
    cotangent : float, ndarray or tuple
        With the structure of ``f``'s output (``None`` for an entry of a tuple
        result that is not differentiated: a zero cotangent). For a function
        that returns nothing, it seeds the first array argument the function writes.
    batched : bool
        The cotangent has a leading axis of directions (``(k, *output.shape)``);
        the input cotangents come back stacked the same way. As for :func:`jvp`.
    chunk : int, optional
        Directions per sweep when ``batched`` (as for :func:`jvp`).

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
    primals = as_tuple(primals, "primals", "vjp")
    filled_f, filled = with_defaults(f, primals)
    if filled_f is not f or len(filled) > len(primals):  # omitted defaults: constants, no cotangents returned
        value, cotangents = vjp(filled_f, filled, cotangent, engine=engine, batched=batched, chunk=chunk)
        return value, cotangents[: len(primals)]
    refuse_written_aliases(f, primals, "vjp")
    if batched:
        return vjp_batched(f, primals, cotangent, check_chunk(chunk), engine)
    if has_container(primals):
        return _vjp_flattened(f, primals, cotangent, engine)
    for part in cotangent if isinstance(cotangent, tuple) else (cotangent,):
        check_real(part, "cotangent")
    kind = result_kind(f, primals)
    written = written_output(f, primals) if kind == "none" else None
    passed = passed_arrays(primals, kind)
    arg_acts, arg_shadows, views, shadowed = [], [], {}, []
    for index, x in enumerate(passed):
        if not differentiable(x):
            arg_acts.append(Activity.CONST)
            continue
        arg_acts.append(Activity.DIFF)
        if isinstance(x, np.ndarray):
            shadowed.append(index)
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
        check_guards(f, passed, zip(shadowed, arg_shadows))
        return float(value), _collect(primals, arg_acts, arg_shadows, views, adjoints)
    if kind == "none":
        compiled = compiled_sweep(f, Sweep("ad", "reverse", tuple(arg_acts)), engine)
        _, _, adjoints = compiled(passed, tuple(arg_shadows), 0.0)
        check_guards(f, passed, zip(shadowed, arg_shadows))
        return None, _collect(primals, arg_acts, arg_shadows, views, adjoints)
    before_run()  # (every run of f draws what the first drew: pyjlad.random_draws)
    value = as_numba_function(f)(*primals)
    layout = output_layout(value, describe_function(f))
    seeds = layout.seeds(cotangent, describe_function(f))
    buffers = [np.zeros(shape, dtype) for _, shape, dtype in layout.buffers]
    wrapper = output_wrapper(f, len(primals), layout)
    sweep = Sweep("ad", "reverse", (Activity.DUP,) * len(buffers) + tuple(arg_acts))
    compiled = compiled_sweep(wrapper, sweep, engine)
    _, _, adjoints = compiled((*buffers, *passed), (*seeds, *arg_shadows), 0.0)
    check_guards(f, passed, zip(shadowed, arg_shadows))
    return value, _collect(primals, arg_acts, arg_shadows, views, adjoints)


def _jvp_flattened(f: Any, primals: tuple[Any, ...], tangents: tuple[Any, ...], engine: str | None) -> tuple[Any, Any]:
    """:func:`jvp` with tuple or NamedTuple arguments: of ``f`` on their leaves (see :mod:`pyjlad.pytrees`)."""
    call = flatten_call(f, primals, {})
    leaves = [leaf for position, t in enumerate(tangents)
              for leaf in tangent_leaves(call.positional[position], t, f"the tangent of argument {position}")]
    return jvp(flattened_function(f, call, has_aux=False), call.leaves, tuple(leaves), engine=engine)


def _vjp_flattened(f: Any, primals: tuple[Any, ...], cotangent: Any, engine: str | None) -> tuple[Any, Any]:
    """:func:`vjp` with tuple or NamedTuple arguments: cotangents in their structure (``None`` for int and
    bool entries)."""
    call = flatten_call(f, primals, {})
    value, leaf_cotangents = vjp(flattened_function(f, call, has_aux=False), call.leaves, cotangent, engine=engine)
    by_leaf = dict(enumerate(leaf_cotangents))
    return value, tuple(call.rebuild(position, by_leaf) for position in range(len(primals)))


def _collect(primals, arg_acts, arg_shadows, views, adjoints) -> tuple[Any, ...]:
    shadows = iter(arg_shadows)
    scalars = iter(adjoints)
    out: list[Any] = []
    for index, (x, act) in enumerate(zip(primals, arg_acts)):
        if act is Activity.CONST:
            out.append(None)
        elif isinstance(x, np.ndarray):
            out.append(as_result(next(shadows), views[index]))
        else:
            out.append(float(next(scalars)))
    return tuple(out)


def _output_shape(f: Any, primals: tuple[Any, ...]) -> tuple[tuple[int, ...], Any]:
    kind = result_kind(f, primals)
    if kind == "scalar":
        return (), np.float64
    if kind == "none":
        x = primals[written_output(f, primals)]
        return x.shape, x.dtype
    before_run()
    value = as_numba_function(f)(*copy_arrays(primals))
    if isinstance(value, np.ndarray) and value.dtype in (np.float64, np.float32):
        return value.shape, value.dtype
    if isinstance(value, np.ndarray):
        raise UnsupportedFunctionError(
            f"jacobian needs a function with one float or float-array output; {describe_function(f)} returns an "
            f"array of {value.dtype}, which has no derivative: return floats (.astype(np.float64)) where the "
            "result should have one"
        )
    raise UnsupportedFunctionError(
        f"jacobian needs a function with one float or float-array output; "
        f"{describe_function(f)} returns {type(value).__name__} (use vjp/jvp for tuple outputs)"
    )


@one_draw_per_call(lambda f, *args, **__: (f, args))
def jacobian(f: Any, *args: Any, wrt: int | tuple[int, ...] = 0, mode: str = "reverse",
             engine: str | None = None, chunk: int | None = None) -> Any:
    """The Jacobian of ``f`` with respect to argument(s) ``wrt``.

    Parameters
    ----------
    f : callable
        A function with one float or float-array output (or none, writing an
        output array argument).
    *args
        Arguments of ``f``.
    wrt : int or tuple of int
        Argument position(s); a negative one counts from the end.
    mode : {"reverse", "forward"}
        Reverse sweeps over output elements, or forward sweeps over input elements.
    chunk : int, optional
        Most elements per sweep (Enzyme's vector mode; default
        :data:`~pyjlad.vector_products.DEFAULT_CHUNK`; fewer where fewer are
        needed: :func:`~pyjlad.chunk_threads.sweep_width`). 1, and functions vector
        mode does not apply to (see :mod:`pyjlad.vector_products`), sweep one
        element at a time.

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
    needs_point(args, "jacobian")
    refuse_containers(args, "jacobian")
    single = isinstance(wrt, (int, np.integer)) and not isinstance(wrt, bool)
    if not single and not isinstance(wrt, (tuple, list)):
        raise ArgumentTypeError(f"wrt must be an argument's position or a tuple of them, got {wrt!r}")
    indices = tuple(argument_position(index, len(args)) for index in ((wrt,) if single else wrt))
    f, args = with_defaults(f, args)
    refuse_written_aliases(f, args, "jacobian")
    for index in indices:
        if not differentiable(args[index]):
            raise ArgumentTypeError(f"argument {index} is not a float or float array: it has no derivative")
    vector = jacobian_vector(f, args, indices, mode, check_chunk(chunk), engine)
    if vector is not None:
        return vector[0] if single else tuple(vector)
    out_shape, out_dtype = _output_shape(f, args)
    results = []
    for index in indices:
        x = args[index]
        in_shape, x_dtype = np.shape(x), np.asarray(x).dtype
        jac = np.zeros(out_shape + in_shape, dtype=np.result_type(out_dtype, x_dtype))
        if mode == "reverse":
            for out_idx in np.ndindex(out_shape):
                seed = 1.0 if out_shape == () else unit_vector(out_shape, out_idx, out_dtype)
                _, cots = vjp(f, copy_arrays(args), seed, engine=engine)
                jac[out_idx] = cots[index]
        else:
            for in_idx in np.ndindex(in_shape):
                tangents = [None] * len(args)
                tangents[index] = 1.0 if in_shape == () else unit_vector(in_shape, in_idx, x_dtype)
                _, tangent = jvp(f, copy_arrays(args), tuple(tangents), engine=engine)
                jac[(Ellipsis, *in_idx)] = tangent
        results.append(jac)
    return results[0] if single else tuple(results)


@one_draw_per_call(lambda f, primals, *_, **__: (f, primals))
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
        The argument the Hessian is taken with respect to (negative: counted from the end).

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
    return _hvp(f, primals, v, wrt, engine=engine, serial=False)


def _hvp(f: Any, primals: Sequence[Any], v: Any, wrt: int, *, engine: str | None, serial: bool) -> Any:
    """:func:`hvp`; with ``serial``, of the serial copy of a ``parallel=True`` function (``Sweep.serial``)."""
    primals = as_tuple(primals, "primals", "hvp")
    refuse_containers(primals, "hvp")
    wrt = argument_position(wrt, len(primals))
    f, primals = with_defaults(f, primals)
    refuse_written_aliases(f, primals, "hvp")
    primals = compact_overlapping(primals, [i for i, p in enumerate(primals) if is_float_array(p)])
    x = primals[wrt]
    if isinstance(v, (tuple, list)):
        raise ArgumentTypeError(
            f"hvp: v is a {type(v).__name__}, but it is the one vector of argument {wrt} (wrt), shaped like it, "
            "not one entry per argument: pass an array (or a float for a float argument)"
        )
    check_tangent(wrt, x, v, "vector v")
    compiled = compiled_sweep(f, Sweep("hvp", "reverse", (), wrt, serial=serial), engine)
    if isinstance(x, np.ndarray):
        tangent, _ = shadow_like(x, np.asarray(v))
        gradient, _ = shadow_like(x)
        result, is_view = shadow_like(x)
        compiled(primals, (tangent, gradient, result), 0.0)
        check_guards(f, primals, ((wrt, tangent), (wrt, gradient), (wrt, result)))
        return as_result(result, is_view)
    dtype = np.float32 if isinstance(x, np.float32) else np.float64
    result = np.zeros(1, dtype)
    compiled(primals, (float(v), np.zeros(1, dtype), result), 0.0)
    return float(result[0])


@one_draw_per_call(lambda f, *args, **__: (f, args))
def hessian(f: Any, *args: Any, wrt: int = 0, engine: str | None = None, chunk: int | None = None) -> Any:
    """The Hessian of the scalar function ``f`` with respect to argument ``wrt``.

    At most ``chunk`` columns per sweep (default :data:`~pyjlad.vector_products.DEFAULT_CHUNK`):
    forward over reverse, the forward sweep in Enzyme's vector mode. With ``chunk=1``,
    and where vector mode does not apply (see :mod:`pyjlad.vector_products`), column
    by column with :func:`hvp` (reverse over forward). Every sweep runs ``f`` on copies
    of the arguments: a function that writes into an argument leaves the caller's unchanged.

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
    needs_point(args, "hessian")
    if isinstance(wrt, (tuple, list)):
        raise ArgumentTypeError(
            f"hessian takes one argument's position as wrt (the Hessian with respect to it), got {wrt!r}: for the "
            "Hessian with respect to several arguments, pass them as one array and split it inside the function"
        )
    wrt = argument_position(wrt, len(args))
    refuse_containers(args, "hessian")
    f, args = with_defaults(f, args)
    refuse_written_aliases(f, args, "hessian")
    x = args[wrt]
    # Every column at the point given: each sweep runs f on copies of the arrays (one that f writes
    # would otherwise move the point from column to column), as the vector-mode sweeps do.
    if not isinstance(x, np.ndarray):
        return hvp(f, copy_arrays(args), 1.0, wrt, engine=engine)
    vector = hessian_columns(f, args, wrt, check_chunk(chunk), engine)
    if vector is not None:
        return vector
    hess = np.zeros(x.shape + x.shape, dtype=x.dtype)
    columns = list(np.ndindex(x.shape))

    threads = chunk_threads(f)
    # The columns of a parallel=True function on Numba's threads (pyjlad.chunk_threads), each one product of
    # its serial copy: a parallel product's loops would run on its column's thread alone, and cost more there.
    serial = runs_in_parallel(f)

    def column(_: None, k: int) -> None:
        idx = columns[k]
        with one_loop_thread(threads):  # (whatever runs in parallel in it stays on this thread)
            hess[(Ellipsis, *idx)] = _hvp(f, copy_arrays(args), unit_vector(x.shape, idx, x.dtype), wrt,
                                          engine=engine, serial=serial)

    run_chunks(range(len(columns)), threads, lambda: None, column)
    return hess
