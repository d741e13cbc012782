"""Vector-mode drivers: ``W`` directions per Enzyme sweep (``enzyme_width``).

Enzyme's vector mode takes ``ptr @enzyme_width, i64 W`` after the function and
then, for each duplicated value, the primal followed by ``W`` shadows (``W``
pointers for memory, ``W`` tangents for a scalar in forward mode); ``enzyme_out``
scalars come back as ``[W x T]`` (reverse mode). Every ``W`` shadows here come
from one buffer holding ``W`` contiguous slices laid out like the (C-contiguous)
primal: slice ``k`` starts ``k * nitems * itemsize`` bytes in (one element per
slice for a scalar). Calling convention (the embedded engine's caller)::

    i32 symbol(ptr value_out, ptr dret, ptr excinfo, params..., ptr stacked...)

with one ``stacked`` buffer per differentiated argument, in order (arrays,
forward-mode tangents of scalars, reverse-mode adjoints of scalars), then one
for the float result (forward: receives its ``W`` tangents; reverse: holds its
``W`` seeds). ``dret`` is unused. The Hessian driver (:func:`vector_hvp_driver`)
is forward over reverse with a width-``W`` outer sweep: shadows ``(v, gradient,
hv)`` as in :func:`~pyjlad.engines.hvp_driver.hvp_driver`, ``v`` and ``hv``
stacked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..abi import ArrayArg, FunctionABI
from ..activity import Activity
from ..errors import UnsupportedFunctionError
from .driver import (
    _MARKERS,
    Driver,
    _digest,
    _guard_out_of_memory,
    _joined,
    _names,
    _result_slot_type,
    _status_wrapper,
    _zero_shadowed,
)

__all__ = ["vector_driver", "vector_hvp_driver", "vector_sweep_driver", "RESULT"]

#: The index ``Driver.shadow_args`` gives the result's stacked buffer.
RESULT = -1

_BYTES = {"double": 8, "float": 4}


def _check(abi: FunctionABI, activities: Sequence[Activity], width: int, noalias: bool) -> None:
    if width < 2:
        raise UnsupportedFunctionError(f"vector mode needs a width of 2 or more, got {width}")
    if not noalias:
        raise UnsupportedFunctionError("vector mode does not apply to functions calling custom rules")
    if _zero_shadowed(abi, activities):
        raise UnsupportedFunctionError("vector mode does not apply to arrays Numba merges with other memory")


def _slices(name: str, index: int, sizes: dict, width: int, element: str | None,
            interleaved: str | None = None) -> tuple[list[str], list[str]]:
    """Lines computing the ``width`` slice pointers of the stacked buffer ``name``, and their names
    (``interleaved``: the array's LLVM element type, its slices one element apart, a constant step
    LLVM sees)."""
    lines: list[str] = []
    if element is None and interleaved:
        step = str(_BYTES[interleaved])
    elif element is None:  # an array: slices of nitems * itemsize bytes
        lines.append(f"  {name}.step = mul i64 {sizes[index, 'nitems']}, {sizes[index, 'itemsize']}")
        step = f"{name}.step"
    else:
        step = str(_BYTES[element])
    names = [name]
    for k in range(1, width):
        lines += [f"  {name}.off{k} = mul i64 {step}, {k}",
                  f"  {name}.s{k} = getelementptr i8, ptr {name}, i64 {name}.off{k}"]
        names.append(f"{name}.s{k}")
    return lines, names


def _loads(names: list[str], ty: str) -> tuple[list[str], list[str]]:
    lines = [f"  {n}.v = load {ty}, ptr {n}, align 4" for n in names]
    return lines, [f"{n}.v" for n in names]


def vector_driver(abi: FunctionABI, mode: str, activities: Sequence[Activity], width: int, *,
                  noalias: bool = True, salt: str = "", oom_guard: bool = True,
                  interleaved: Sequence[int] = ()) -> Driver:
    """Driver for one reverse or forward sweep of ``width`` directions (see the module's docstring).

    ``activities`` are concrete (as for :func:`~pyjlad.engines.driver.ad_driver`); ``interleaved``:
    the arrays whose slices are one element apart (see the module's docstring).
    """
    _check(abi, activities, width, noalias)
    params, names = _names(abi)
    sizes = {(index, role): name for (index, role, _), name in zip(params, names)}
    tag = _digest(abi.to_dict(), mode, tuple(a.value for a in activities), "width", width,
                  *(["interleaved", *interleaved] if interleaved else []), salt)
    symbol = f"{abi.entry}_{mode}{width}_{tag}"
    primal = f"{abi.entry}_status_{tag}"
    res_ty = _result_slot_type(abi)
    float_result = res_ty in _BYTES
    diff = tuple(i for i, a in enumerate(activities) if a is not Activity.CONST)
    shadow_args = diff + ((RESULT,) if float_result else ())
    body: list[str] = []
    markers: list[str] = []
    active: list[int] = []
    for (index, role, ty), name in zip(params, names):
        act, arg = activities[index], abi.args[index]
        is_array = isinstance(arg, ArrayArg)
        if act is Activity.CONST or (is_array and role != "data"):
            markers += ["ptr @enzyme_const", f"{ty} {name}"]
        elif act is Activity.ACTIVE:
            markers += ["ptr @enzyme_out", f"{ty} {name}"]
            active.append(index)
        else:
            lines, slices = _slices(f"%shadow{index}", index, sizes, width, None if is_array else ty,
                                    arg.llvm_element if index in interleaved and is_array else None)
            body += lines
            if not is_array:  # forward-mode tangents of a scalar, by value
                lines, slices = _loads(slices, ty)
                body += lines
            markers += [f"ptr @{act.marker}", f"{ty} {name}", *[f"{'ptr' if is_array else ty} {s}" for s in slices]]
    if float_result:
        lines, dret = _slices("%dretv", RESULT, sizes, width, res_ty)
        body += lines
        result_marker = ["ptr @enzyme_dup", "ptr %ret", *[f"ptr {d}" for d in dret]]
    else:
        result_marker = ["ptr @enzyme_const", "ptr %ret"]
    out_types = [abi.args[i].llvm_type for i in active]  # type: ignore[union-attr]
    if not out_types:
        ad_ret = "void"
    elif len(out_types) == 1:
        ad_ret = f"[{width} x {out_types[0]}]"
    else:
        ad_ret = f"[{width} x {{ {', '.join(out_types)} }}]"
    enzyme_fn = "__enzyme_autodiff" if mode == "reverse" else "__enzyme_fwddiff"
    ad_args = [f"ptr @{primal}", "ptr @enzyme_width", f"i64 {width}", *result_marker,
               "ptr @enzyme_const", "ptr %status", "ptr @enzyme_const", "ptr %excinfo", *markers]
    call = f"call {ad_ret} (...) @{enzyme_fn}({', '.join(ad_args)})"
    stores: list[str] = []
    for j, i in enumerate(active):
        ty = out_types[j]
        for k in range(width):
            path = f"{k}" if len(out_types) == 1 else f"{k}, {j}"
            stores += [f"  %g{i}.{k} = extractvalue {ad_ret} %g, {path}",
                       f"  %g{i}.{k}.p = getelementptr {ty}, ptr %shadow{i}, i64 {k}",
                       f"  store {ty} %g{i}.{k}, ptr %g{i}.{k}.p, align 4"]
    if float_result:
        stores += [f"  %value = load {res_ty}, ptr %ret, align 8",
                   f"  store {res_ty} %value, ptr %value_out, align 8"]
    typed_params = _joined([f"{ty} {n}" for (_, _, ty), n in zip(params, names)])
    stacked = _joined([f"ptr %shadow{i}" for i in diff] + (["ptr %dretv"] if float_result else []))
    lines = [
        *_MARKERS,
        "@enzyme_width = external global i32",
        f"declare {ad_ret} @{enzyme_fn}(...)",
        "",
        *_status_wrapper(abi, primal, params, names, noalias),
        f"define i32 @{symbol}(ptr %value_out, ptr %dret, ptr %excinfo{typed_params}{stacked}) {{",
        "entry:",
        f"  %ret = alloca {res_ty}, align 8",
        "  %status = alloca i32, align 4",
        f"  store {res_ty} {'0.000000e+00' if float_result else '0'}, ptr %ret, align 8",
        "  store i32 0, ptr %status, align 4",
        *body,
        f"  {call}" if ad_ret == "void" else f"  %g = {call}",
        *stores,
        "  %st = load i32, ptr %status, align 4",
        "  ret i32 %st",
        "}",
    ]
    if oom_guard:
        lines = _guard_out_of_memory(lines, symbol)
    return Driver(text="\n".join(lines) + "\n", symbol=symbol, active_scalars=(), shadow_args=shadow_args,
                  entry=abi.entry, aggregate_shadows=True)


def vector_hvp_driver(abi: FunctionABI, wrt: int, width: int, *, noalias: bool = True, salt: str = "",
                      oom_guard: bool = True, interleaved: bool = False) -> Driver:
    """Hessian times ``width`` vectors: a width-``width`` forward sweep over the reverse-mode gradient.

    The array argument ``wrt``'s gradient is computed by ``__enzyme_autodiff`` into a
    buffer; ``__enzyme_fwddiff`` of that, with the ``width`` tangents of ``v``, gives
    the ``width`` tangents of the gradient: ``H v_k``. ``interleaved``: the slices of
    ``v`` and of ``H v`` one element apart (addressed with the primal's strides, as
    the gradient buffer always is).
    """
    arg = abi.args[wrt]
    inner_acts = tuple(Activity.DUP if i == wrt else Activity.CONST for i in range(len(abi.args)))
    if not isinstance(arg, ArrayArg):
        raise UnsupportedFunctionError("a vector-mode Hessian needs an array argument")
    _check(abi, inner_acts, width, noalias)
    params, names = _names(abi)
    sizes = {(index, role): name for (index, role, _), name in zip(params, names)}
    tag = _digest(abi.to_dict(), "hvp-vector", wrt, width, *(["interleaved"] if interleaved else []), salt)
    symbol = f"{abi.entry}_hvp{width}_{tag}"
    primal = f"{abi.entry}_status_{tag}"
    inner = f"{abi.entry}_gradient_{tag}"
    res_ty = abi.result.llvm_type
    typed_params = _joined([f"{ty} {n}" for (_, _, ty), n in zip(params, names)])
    inner_markers, outer_markers = [], []
    element = arg.llvm_element if interleaved else None
    v_lines, v_slices = _slices("%v", wrt, sizes, width, None, element)
    hv_lines, hv_slices = _slices("%hv", wrt, sizes, width, None, element)
    for (index, role, ty), name in zip(params, names):
        if index == wrt and role == "data":
            inner_markers += ["ptr @enzyme_dup", f"{ty} {name}", "ptr %gbuf"]
            outer_markers += ["ptr @enzyme_dup", f"{ty} {name}", *[f"ptr {s}" for s in v_slices]]
        else:
            inner_markers += ["ptr @enzyme_const", f"{ty} {name}"]
            outer_markers += ["ptr @enzyme_const", f"{ty} {name}"]
    outer_markers += ["ptr @enzyme_dup", "ptr %gbuf", *[f"ptr {s}" for s in hv_slices]]
    lines = [
        *_MARKERS,
        "@enzyme_width = external global i32",
        "declare void @__enzyme_autodiff(...)",
        "declare void @__enzyme_fwddiff(...)",
        "",
        *_status_wrapper(abi, primal, params, names, noalias),
        f"define internal void @{inner}(ptr %excinfo, ptr %status{typed_params}, ptr %gbuf) {{",
        "entry:",
        f"  %ret = alloca {res_ty}, align 8",
        f"  %dret = alloca {res_ty}, align 8",
        f"  store {res_ty} 0.000000e+00, ptr %ret, align 8",
        f"  store {res_ty} 1.000000e+00, ptr %dret, align 8",
        f"  call void (...) @__enzyme_autodiff(ptr @{primal}, ptr @enzyme_dup, ptr %ret, ptr %dret, "
        f"ptr @enzyme_const, ptr %status, ptr @enzyme_const, ptr %excinfo, {', '.join(inner_markers)})",
        "  ret void",
        "}",
        "",
        f"define i32 @{symbol}(ptr %value_out, ptr %dret, ptr %excinfo{typed_params}, ptr %v, ptr %gbuf, "
        "ptr %hv) {",
        "entry:",
        "  %status = alloca i32, align 4",
        "  store i32 0, ptr %status, align 4",
        *v_lines,
        *hv_lines,
        f"  call void (...) @__enzyme_fwddiff(ptr @{inner}, ptr @enzyme_width, i64 {width}, ptr @enzyme_const, "
        f"ptr %excinfo, ptr @enzyme_const, ptr %status, {', '.join(outer_markers)})",
        "  %st = load i32, ptr %status, align 4",
        "  ret i32 %st",
        "}",
    ]
    if oom_guard:
        lines = _guard_out_of_memory(lines, symbol)
    return Driver(text="\n".join(lines) + "\n", symbol=symbol, active_scalars=(), shadow_args=(wrt, wrt, wrt),
                  entry=abi.entry, aggregate_shadows=True)


def vector_sweep_driver(exported: Any, sweep: Any, activities: Sequence[Activity], noalias: bool) -> Driver:
    """The vector driver for ``sweep`` (a :class:`~pyjlad.sweep.Sweep` with ``width > 1``) of ``exported``.

    Refused (:class:`~pyjlad.errors.UnsupportedFunctionError`; the products then sweep one
    direction at a time) for functions calling BLAS or LAPACK: Enzyme's rules for those
    are not used at width > 1 here.
    """
    module = exported.module
    if module.links or "cblas_" in module.text or any(n.startswith(("numba_x", "numba_ez")) for n in
                                                      module.external_functions):
        raise UnsupportedFunctionError(f"vector mode does not apply to {exported.name}: it calls BLAS or LAPACK")
    if sweep.kind == "hvp":
        return vector_hvp_driver(exported.abi, sweep.wrt, sweep.width, noalias=noalias, salt=module.text,
                                 interleaved=sweep.wrt in sweep.interleaved)
    return vector_driver(exported.abi, sweep.mode, activities, sweep.width, noalias=noalias, salt=module.text,
                         interleaved=sweep.interleaved)
