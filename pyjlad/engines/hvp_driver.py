"""Hessian-vector product drivers: reverse over forward, or forward over reverse where custom rules need it.

Same calling convention as every driver (:mod:`pyjlad.engines.driver`).
"""

from __future__ import annotations

from ..abi import ArrayArg, FunctionABI
from ..activity import Activity
from .driver import (
    _MARKERS,
    Driver,
    _arg_markers,
    _digest,
    _guard_out_of_memory,
    _joined,
    _names,
    _param_attributes,
    _status_wrapper,
    _type_hints,
    _zero_buffers,
    _zero_shadowed,
)
from .entry_status import VALUE_ENTRY_SUFFIX

__all__ = ["hvp_driver"]


def hvp_driver(abi: FunctionABI, wrt: int, *, noalias: bool = True, salt: str = "",
               oom_guard: bool = True, over_reverse: bool | None = None) -> Driver:
    """Reverse-over-forward driver: Hessian-vector product with respect to argument ``wrt``.

    An inner function computes the directional derivative ``f'(x) v`` with
    ``__enzyme_fwddiff`` (tangent ``v`` on ``wrt``) of the entry's copy that
    returns its result (:func:`~pyjlad.engines.entry_status.result_by_value`:
    the tangent comes back as a value, not through a pointer that Enzyme's
    reverse sweep cannot tell from the inputs) into a slot;
    ``__enzyme_autodiff`` of that inner function, seeded 1 on the slot, gives
    its gradient with respect to ``wrt``: ``H @ v`` (``H`` is symmetric).
    Shadows (``shadow_args == (wrt, wrt, wrt)``): the tangent ``v`` (pointer
    for an array, value for a scalar), a buffer the driver leaves as it is
    (the gradient's, in the calling convention), and the ``H @ v`` buffer
    (pointers; one element for a scalar).

    Not forward over reverse: there Enzyme's forward mode differentiates the
    gradient's reverse sweep, whose integers (array shapes, indices) it
    reloads from its own tape, where its type analysis cannot see they are
    integers; it then gave up on index arithmetic or aborted
    (``forwardModeInvertedPointerFallback``) for loops that allocate
    temporaries (``vel += 0.5 * dt * acc``). Here the reverse sweep runs over
    forward-mode code, which has no tape of its own.

    Except for modules calling custom rules with a reverse rule (``over_reverse``; by default where
    ``noalias=False``, a module calling any rule): a rule gives a reverse derivative, and the Hessian is that of
    the rule, so those keep forward over reverse, which differentiates the reverse sweep. A module whose rules
    are forward rules only (``defjvp``) takes reverse over forward, which differentiates the forward rule:
    forward over reverse called the forward rule's adapter with the arguments of Enzyme's reverse sweep, and
    Enzyme's output was an invalid module ("Incorrect number of arguments passed to called function", until
    2026-12-06, found by a user-style probe).

    Modules calling a special function of :mod:`pyjlad.special` take this
    form too: the forward derivative registered for it returns a value that
    Enzyme's reverse sweep differentiates (see the comment in its ``_rule_ir``).
    """
    if (not noalias) if over_reverse is None else over_reverse:
        return _forward_over_reverse(abi, wrt, noalias=noalias, salt=salt, oom_guard=oom_guard)
    params, names = _names(abi)
    tag = _digest(abi.to_dict(), "hvp-rof", wrt, salt)
    symbol = f"{abi.entry}_hvp_{tag}"
    inner = f"{abi.entry}_jvp_{tag}"
    res_ty = abi.result.llvm_type
    arg = abi.args[wrt]
    is_array = isinstance(arg, ArrayArg)
    w_ty = "ptr" if is_array else arg.llvm_type  # type: ignore[union-attr]
    typed_params = _joined([f"{ty} {n}" for (_, _, ty), n in zip(params, names)])
    inner_activities = tuple(Activity.DUP if i == wrt else Activity.CONST for i in range(len(abi.args)))
    # Constant arrays Numba merges with other memory need zeroed shadows: their forward
    # tangents in the inner sweep (%ztangent), and in the outer reverse sweep the
    # adjoints of the arrays (%zero) and of those tangents (%zzero).
    zeroed = _zero_shadowed(abi, inner_activities)
    inner_markers = _arg_markers(abi, params, names, inner_activities, "forward", lambda i: "%v")
    inner_markers = [m.replace("%zero", "%ztangent") for m in inner_markers]
    ztangent_params = _joined([f"ptr %ztangent{i}" for i in zeroed])
    # The forward sweep differentiates the entry's copy that returns its result (%d is its tangent): through
    # Numba's result pointer, the tangent's store at the end of the forward sweep, through a pointer the outer
    # sweep could not tell from the inputs, made Enzyme keep a copy of every value read for the reverse sweep
    # (the softmax classifier's product kept 136.75 MiB, a copy of x[i] per row of weights per sample).
    valued = f"{abi.entry}_value_{tag}"
    inner_lines = [
        *_value_wrapper(abi, valued, params, names),
        f"define internal void @{inner}(ptr %excinfo, ptr %status{typed_params}, {w_ty} %v, ptr noalias nocapture "
        f"%dslot{ztangent_params}) {{",
        "entry:",
        f"  %d = call {res_ty} (...) @__enzyme_fwddiff(ptr @{valued}, ptr @enzyme_const, ptr %status, "
        f"ptr @enzyme_const, ptr %excinfo, {', '.join(inner_markers)})",
        f"  store {res_ty} %d, ptr %dslot, align 8",
        "  ret void",
        "}",
        "",
    ]
    outer_activities = tuple(Activity.DIFF.concrete_for(is_array, "reverse") if i == wrt else Activity.CONST
                             for i in range(len(abi.args)))
    outer_markers = _arg_markers(abi, params, names, outer_activities, "reverse", lambda i: "%hv")
    # The tangent v is constant for the outer sweep, unless f writes x: then the inner sweep writes v too
    # (x[i] = g(x[i]) gives v[i] = g'(x[i]) v[i]), and what it reads back depends on x through that memory:
    # constant, its derivative would be lost. Then v gets a zeroed shadow %vbarN (addressed like x).
    writes_wrt = is_array and arg.writes  # type: ignore[union-attr]
    outer_markers += ["ptr @enzyme_dup", "ptr %v", f"ptr %vbar{wrt}"] if writes_wrt else ["ptr @enzyme_const", f"{w_ty} %v"]
    outer_markers += ["ptr @enzyme_dup", "ptr %dslot", "ptr %dseed"]
    for i in zeroed:
        outer_markers += ["ptr @enzyme_dup", f"ptr %ztangent{i}", f"ptr %zzero{i}"]
    buffers = [_zero_buffers(abi, params, names, zeroed, prefix) for prefix in ("zero", "ztangent", "zzero")]
    if writes_wrt:
        buffers.append(_zero_buffers(abi, params, names, (wrt,), "vbar"))
    g_ret = "void" if is_array else arg.llvm_type  # type: ignore[union-attr]
    call = (f"call {g_ret} (...) @__enzyme_autodiff(ptr @{inner}, ptr @enzyme_const, ptr %excinfo, "
            f"ptr @enzyme_const, ptr %status, {', '.join(outer_markers)})")
    setup = [
        f"  %dslot = alloca {res_ty}, align 8",
        f"  %dseed = alloca {res_ty}, align 8",
        "  store i32 0, ptr %status, align 4",
        f"  store {res_ty} 0.000000e+00, ptr %dslot, align 8",
        f"  store {res_ty} 1.000000e+00, ptr %dseed, align 8",
    ]
    body = [f"  {call}" if is_array else f"  %g = {call}",
            *([] if is_array else [f"  store {g_ret} %g, ptr %hv, align 8"])]
    return _hvp_driver_of(abi, wrt, symbol, g_ret, inner_lines, setup, body, buffers, oom_guard=oom_guard,
                          entry=abi.entry, returned_result=res_ty)


def _hvp_driver_of(abi: FunctionABI, wrt: int, symbol: str, g_ret: str, definitions: list[str],
                   setup: list[str], body: list[str], buffers, *, oom_guard: bool, entry: str,
                   returned_result: str = "") -> Driver:
    """The Hessian-vector product driver ``symbol`` around ``definitions`` (the wrapper of the
    entry's copy and the inner sweep): its entry allocates the status, runs ``setup``, allocates the zeroed
    shadow ``buffers``, runs ``body`` (the outer Enzyme call) and returns the status."""
    params, names = _names(abi)
    typed_params = _joined([f"{ty} {n}" for (_, _, ty), n in zip(params, names)])
    arg = abi.args[wrt]
    w_ty = "ptr" if isinstance(arg, ArrayArg) else arg.llvm_type  # type: ignore[union-attr]
    lines = [
        *_MARKERS,
        f"declare {g_ret} @__enzyme_autodiff(...)",
        "declare void @__enzyme_fwddiff(...)",
        "",
        *definitions,
        f"define i32 @{symbol}(ptr %value_out, ptr %dret, ptr %excinfo{typed_params}, "
        f"{w_ty} %v, ptr %gbuf, ptr %hv) {{",
        "entry:",
        "  %status = alloca i32, align 4",
        *setup,
        *[line for alloc, _ in buffers for line in alloc],
        *body,
        *[line for _, release in buffers for line in release],
        "  %st = load i32, ptr %status, align 4",
        "  ret i32 %st",
        "}",
    ]
    if oom_guard:
        lines = _guard_out_of_memory(lines, symbol)
    return Driver(text="\n".join(lines) + "\n", symbol=symbol, active_scalars=(), shadow_args=(wrt, wrt, wrt),
                  entry=entry, returned_result=returned_result)


def _value_wrapper(abi: FunctionABI, name: str, params, names) -> list[str]:
    """``<result> @name(ptr %status, ptr %excinfo, <the entry's arguments>)``: the result of the entry's copy
    that returns it (:func:`~pyjlad.engines.entry_status.result_by_value`), the status stored in ``%status``."""
    res_ty = abi.result.llvm_type
    typed = _joined([f"{ty} {_param_attributes(abi, i, role)}{n}" for (i, role, ty), n in zip(params, names)])
    args = _joined([f"{ty} {n}" for (_, _, ty), n in zip(params, names)])
    return [
        f"define internal {res_ty} @{name}(ptr noalias nocapture %status, ptr noalias nocapture %excinfo{typed}) {{",
        "entry:",
        *_type_hints(abi, params, names, result_slot=False),
        f"  %r = call {res_ty} @{abi.entry}{VALUE_ENTRY_SUFFIX}(ptr %excinfo{args}, ptr %status)",
        f"  ret {res_ty} %r",
        "}",
        "",
    ]


def _forward_over_reverse(abi: FunctionABI, wrt: int, *, noalias: bool, salt: str, oom_guard: bool) -> Driver:
    """Forward-over-reverse Hessian-vector product (see :func:`hvp_driver`).

    An inner function computes the reverse-mode gradient with respect to
    ``wrt`` into a buffer; ``__enzyme_fwddiff`` of that inner function with
    tangent ``v`` gives the tangent of the gradient, ``H @ v``. Shadows
    (``shadow_args == (wrt, wrt, wrt)``): the tangent ``v`` (pointer for an
    array, value for a scalar), then the gradient buffer and the ``H @ v``
    buffer (pointers; one element for a scalar).
    """
    params, names = _names(abi)
    tag = _digest(abi.to_dict(), "hvp", wrt, salt)
    symbol = f"{abi.entry}_hvp_{tag}"
    primal = f"{abi.entry}_status_{tag}"
    inner = f"{abi.entry}_gradient_{tag}"
    res_ty = abi.result.llvm_type
    arg = abi.args[wrt]
    is_array = isinstance(arg, ArrayArg)
    w_ty = "ptr" if is_array else arg.llvm_type  # type: ignore[union-attr]
    typed_params = _joined([f"{ty} {n}" for (_, _, ty), n in zip(params, names)])
    inner_activities = tuple(Activity.DIFF.concrete_for(is_array, "reverse") if i == wrt else Activity.CONST
                             for i in range(len(abi.args)))
    inner_markers = _arg_markers(abi, params, names, inner_activities, "reverse", lambda i: "%gbuf")
    # Zeroed shadows of constant arrays Numba merges with other memory: the inner reverse
    # sweep's (%zero), their forward tangents in the outer sweep (%ztangent for the
    # array, %zzero for the inner shadow).
    zeroed = _zero_shadowed(abi, inner_activities)
    zero_params = _joined([f"ptr %zero{i}" for i in zeroed])
    g_ret = "void" if is_array else arg.llvm_type  # type: ignore[union-attr]
    call = (f"call {g_ret} (...) @__enzyme_autodiff(ptr @{primal}, ptr @enzyme_dup, ptr %ret, ptr %dret, "
            f"ptr @enzyme_const, ptr %status, ptr @enzyme_const, ptr %excinfo, {', '.join(inner_markers)})")
    inner_lines = [
        f"define internal void @{inner}(ptr %excinfo, ptr %status{typed_params}, ptr %gbuf{zero_params}) {{",
        "entry:",
        f"  %ret = alloca {res_ty}, align 8",
        f"  %dret = alloca {res_ty}, align 8",
        f"  store {res_ty} 0.000000e+00, ptr %ret, align 8",
        f"  store {res_ty} 1.000000e+00, ptr %dret, align 8",
        f"  {call}" if is_array else f"  %g = {call}",
    ]
    if not is_array:
        inner_lines.append(f"  store {g_ret} %g, ptr %gbuf, align 8")
    inner_lines += ["  ret void", "}", ""]

    outer_markers = []
    for (index, role, ty), name in zip(params, names):
        if index == wrt and (role == "data" if is_array else role == "value"):
            outer_markers += ["ptr @enzyme_dup", f"{ty} {name}", f"{w_ty} %v"]
        elif index in zeroed and role == "data":
            outer_markers += ["ptr @enzyme_dup", f"{ty} {name}", f"ptr %ztangent{index}"]
        else:
            outer_markers += ["ptr @enzyme_const", f"{ty} {name}"]
    outer_markers += ["ptr @enzyme_dup", "ptr %gbuf", "ptr %hv"]
    for i in zeroed:
        outer_markers += ["ptr @enzyme_dup", f"ptr %zero{i}", f"ptr %zzero{i}"]
    buffers = [_zero_buffers(abi, params, names, zeroed, prefix) for prefix in ("zero", "ztangent", "zzero")]
    body = [f"  call void (...) @__enzyme_fwddiff(ptr @{inner}, ptr @enzyme_const, ptr %excinfo, "
            f"ptr @enzyme_const, ptr %status, {', '.join(outer_markers)})"]
    return _hvp_driver_of(abi, wrt, symbol, g_ret, [*_status_wrapper(abi, primal, params, names, noalias),
                                                    *inner_lines], ["  store i32 0, ptr %status, align 4"],
                          body, buffers, oom_guard=oom_guard, entry=abi.entry if noalias else "")
