"""The body of each generated product call (see :mod:`pyjlad.numba_calls.product_source`).

Each function appends lines to a ``_Source`` whose arguments are bound to
``a0, a1, ...`` (C-contiguous writable arrays) and whose result type is known.
Results are laid out as :mod:`pyjlad.products` lays them out from Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.core.errors import TypingError

from ..activity import Activity

__all__ = ["jacobian", "jvp", "vjp", "hvp"]


def _args(n: int, writer: bool = False) -> str:
    """The argument tuple's source, with the writer's output buffer first for ``writer``."""
    return "(" + ("o, " if writer else "") + "".join(f"a{i}, " for i in range(n)) + ")"


def _acts(n: int, diff: tuple[int, ...], writer: bool = False) -> tuple[Activity, ...]:
    acts = tuple(Activity.DIFF if i in diff else Activity.CONST for i in range(n))
    return (Activity.DIFF, *acts) if writer else acts


def _dtype(t: types.Type) -> np.dtype:
    return np.dtype(str(t.dtype if isinstance(t, types.Array) else t))


def _jac_dtype(src: Any, result: types.Type, arg: types.Type, w: int) -> str:
    """The Jacobian's dtype as a name in the namespace (NumPy's promotion, as :func:`pyjlad.jacobian`)."""
    src.namespace[f"DT{w}"] = getattr(np, np.result_type(_dtype(result), _dtype(arg)).name)
    return f"DT{w}"


def _tuple(items: list[str]) -> str:
    return "(" + "".join(f"{x}, " for x in items) + ")"


def _output(src: Any, n: int) -> None:
    src.add(f"y = f{_args(n)}", "m = y.size", "o = np.empty(m, y.dtype)")


def jacobian(src: Any, argtypes: list[types.Type], result: types.Type, wrt: tuple[int, ...], single: bool) -> None:
    """``J_w`` of shape ``output.shape + argument.shape`` for each ``w`` in ``wrt``."""
    n, unique = len(argtypes), tuple(sorted(set(wrt)))
    array_out = isinstance(result, types.Array)
    if array_out:
        _output(src, n)
    if src.product.kind == "jacrev":
        _jacrev(src, argtypes, result, unique, array_out)
    else:
        for w in unique:
            _jacfwd(src, argtypes, result, w, array_out)
    src.add(f"return J{wrt[0]}" if single else f"return {_tuple([f'J{w}' for w in wrt])}")


def _scalar_jac(w: int, value: str, dt: str) -> str:
    """A float's Jacobian: a 0-d array, as :func:`pyjlad.jacobian` returns."""
    return f"J{w} = np.full((), {value}, {dt})"


def _jacrev(src: Any, argtypes: list[types.Type], result: types.Type, wrt: tuple[int, ...], array_out: bool) -> None:
    n = len(argtypes)
    arrays = [w for w in wrt if isinstance(argtypes[w], types.Array)]
    scalars = [w for w in wrt if w not in arrays]
    sweep = src.sweep("R", "ad", "reverse", _acts(n, wrt, array_out), writer=n if array_out else None)
    dts = {w: _jac_dtype(src, result, argtypes[w], w) for w in wrt}
    zero_shadows = [f"s{w} = np.zeros(a{w}.shape, a{w}.dtype)" for w in arrays]
    shadows = _tuple([f"s{w}" for w in arrays])
    if not array_out:
        src.add(*zero_shadows, f"_, _, adj = {sweep}({_args(n)}, {shadows}, 1.0)")
        src.add(*[f"J{w} = s{w}.astype({dts[w]})" for w in arrays])
        src.add(*[_scalar_jac(w, f"adj[{k}]", dts[w]) for k, w in enumerate(scalars)])
        return
    src.add(*[f"J{w} = np.zeros((m, a{w}.size), {dts[w]})" for w in arrays],
            *[f"J{w} = np.zeros(m, {dts[w]})" for w in scalars],
            "seed = np.zeros(m, y.dtype)",
            "for k in range(m):",
            "    seed[:] = 0.0",
            "    seed[k] = 1.0",
            *[f"    {line}" for line in zero_shadows],
            f"    _, _, adj = {sweep}({_args(n, True)}, {_tuple(['seed', *[f's{w}' for w in arrays]])}, 0.0)",
            *[f"    J{w}[k, :] = s{w}.ravel()" for w in arrays],
            *[f"    J{w}[k] = adj[{k}]" for k, w in enumerate(scalars)],
            *[f"J{w} = J{w}.reshape(y.shape + a{w}.shape)" for w in arrays],
            *[f"J{w} = J{w}.reshape(y.shape)" for w in scalars])


def _jacfwd(src: Any, argtypes: list[types.Type], result: types.Type, w: int, array_out: bool) -> None:
    n = len(argtypes)
    sweep = src.sweep(f"F{w}", "ad", "forward", _acts(n, (w,), array_out), writer=n if array_out else None)
    dt = _jac_dtype(src, result, argtypes[w], w)
    if not isinstance(argtypes[w], types.Array):
        if array_out:
            src.add("os = np.zeros(m, y.dtype)", f"{sweep}({_args(n, True)}, (os, 1.0), 0.0)",
                    f"J{w} = os.astype({dt}).reshape(y.shape)")
        else:
            src.add(f"_, d, _ = {sweep}({_args(n)}, (1.0,), 0.0)", _scalar_jac(w, "d", dt))
        return
    src.add(f"t = np.zeros(a{w}.shape, a{w}.dtype)", "tf = t.reshape(t.size)")
    if array_out:
        src.add(f"J{w} = np.zeros((m, a{w}.size), {dt})", "os = np.zeros(m, y.dtype)",
                f"for j in range(a{w}.size):", "    tf[j] = 1.0", "    os[:] = 0.0",
                f"    {sweep}({_args(n, True)}, (os, t), 0.0)", f"    J{w}[:, j] = os", "    tf[j] = 0.0",
                f"J{w} = J{w}.reshape(y.shape + a{w}.shape)")
    else:
        src.add(f"J{w} = np.zeros(a{w}.size, {dt})", f"for j in range(a{w}.size):", "    tf[j] = 1.0",
                f"    _, d, _ = {sweep}({_args(n)}, (t,), 0.0)", f"    J{w}[j] = d", "    tf[j] = 0.0",
                f"J{w} = J{w}.reshape(a{w}.shape)")


def _array_direction(src: Any, name: str, expr: str, like: str, have: types.Type, want: types.Type,
                     what: str) -> None:
    """Bind ``name`` to a C-contiguous writable copy of the array ``expr``, checked shaped like ``like``."""
    if not isinstance(have, types.Array) or have.ndim != want.ndim:
        raise TypingError(f"{src.product!r}: {what} is {have}; it must be an array shaped like {want}")
    src.add(f"if {expr}.shape != {like}.shape:",
            f"    raise ValueError('{what} must have the shape of the array it goes with')",
            f"{name} = np.ascontiguousarray({expr}).astype({like}.dtype)")


def _scalar_direction(src: Any, name: str, expr: str, have: types.Type, what: str) -> None:
    if not isinstance(have, (types.Float, types.Integer)):
        raise TypingError(f"{src.product!r}: {what} is {have}; it must be a float")
    src.add(f"{name} = float({expr})")


def jvp(src: Any, argtypes: list[types.Type], result: types.Type, tangents: tuple[types.Type, ...],
        diff: tuple[int, ...]) -> None:
    """``(value, tangent)``: one forward sweep."""
    n, array_out = len(argtypes), isinstance(result, types.Array)
    for i in diff:
        what = f"the tangent of argument {i}"
        if isinstance(argtypes[i], types.Array):
            _array_direction(src, f"t{i}", f"direction[{i}]", f"a{i}", tangents[i], argtypes[i], what)
        else:
            _scalar_direction(src, f"t{i}", f"direction[{i}]", tangents[i], what)
    sweep = src.sweep("F", "ad", "forward", _acts(n, diff, array_out), writer=n if array_out else None)
    shadows = [f"t{i}" for i in diff]
    if not array_out:
        src.add(f"v, d, _ = {sweep}({_args(n)}, {_tuple(shadows)}, 0.0)", "return v, d")
        return
    _output(src, n)
    src.add("os = np.zeros(m, y.dtype)", f"{sweep}({_args(n, True)}, {_tuple(['os', *shadows])}, 0.0)",
            "return y, os.reshape(y.shape)")


def vjp(src: Any, argtypes: list[types.Type], result: types.Type, cotangent: types.Type) -> None:
    """``(value, cotangents)``: one reverse sweep; ``None`` for the arguments with no derivative."""
    n, array_out = len(argtypes), isinstance(result, types.Array)
    diff = tuple(i for i, t in enumerate(argtypes)
                 if isinstance(t, types.Float) or (isinstance(t, types.Array) and isinstance(t.dtype, types.Float)))
    arrays = [i for i in diff if isinstance(argtypes[i], types.Array)]
    scalars = [i for i in diff if i not in arrays]
    sweep = src.sweep("R", "ad", "reverse", _acts(n, diff, array_out), writer=n if array_out else None)
    src.add(*[f"s{i} = np.zeros(a{i}.shape, a{i}.dtype)" for i in arrays])
    shadows = [f"s{i}" for i in arrays]
    if array_out:
        _output(src, n)
        _array_direction(src, "seed2", "direction", "y", cotangent, result, "the cotangent")
        src.add("seed = seed2.reshape(m)",
                f"_, _, adj = {sweep}({_args(n, True)}, {_tuple(['seed', *shadows])}, 0.0)")
        value = "y"
    else:
        _scalar_direction(src, "ct", "direction", cotangent, "the cotangent")
        src.add(f"v, _, adj = {sweep}({_args(n)}, {_tuple(shadows)}, ct)")
        value = "v"
    outs = [f"s{i}" if i in arrays else f"float(adj[{scalars.index(i)}])" if i in scalars else "None"
            for i in range(n)]
    src.add(f"return {value}, {_tuple(outs)}")


def hvp(src: Any, argtypes: list[types.Type], wrt: int, v: types.Type) -> None:
    """``H @ v``: one Hessian-vector product sweep (reverse over forward)."""
    n, arg = len(argtypes), argtypes[wrt]
    sweep = src.sweep("H", "hvp", "reverse", (), wrt)
    if isinstance(arg, types.Array):
        _array_direction(src, "tan", "direction", f"a{wrt}", v, arg, "the vector v")
        src.add(f"g = np.zeros(a{wrt}.shape, a{wrt}.dtype)", f"r = np.zeros(a{wrt}.shape, a{wrt}.dtype)",
                f"{sweep}({_args(n)}, (tan, g, r), 0.0)", "return r")
        return
    _scalar_direction(src, "tan", "direction", v, "the vector v")
    src.namespace["DTH"] = getattr(np, _dtype(arg).name)
    src.add("g = np.zeros(1, DTH)", "r = np.zeros(1, DTH)", f"{sweep}({_args(n)}, (tan, g, r), 0.0)",
            "return float(r[0])")
