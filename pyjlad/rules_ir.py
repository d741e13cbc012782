"""The IR of a custom derivative rule (:mod:`pyjlad.rules`): the call Numba code makes, and the glue
module that defines the called symbol and its derivatives for Enzyme.

Numba code calls a rule as ``double <symbol>(ptr args)``, its float arguments in a buffer of
``nargs`` doubles (:func:`call_lowering`). :func:`glue_module` defines that symbol over the
function's own Numba ABI function (``<symbol>.primal``), and, for the registered rules, the
augmented forward and reverse passes (over ``<symbol>.vjp``) and the forward derivative (over
``<symbol>.jvp``), registered with Enzyme by the ``__enzyme_register_gradient_<symbol>`` and
``__enzyme_register_derivative_<symbol>`` globals. Numba's status code stays inside these
adapters: only doubles cross the symbol's boundary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir as llvmir
from numba import types as nbtypes
from numba.core import cgutils

from .ir.names import symbol_for

__all__ = ["call_lowering", "glue_module"]


def call_lowering(symbol: str, nargs: int) -> Callable[..., Any]:
    """Numba's lowering of a call to a rule: the float arguments, cast to double, stored in a buffer
    of ``nargs`` doubles, and ``double <symbol>(ptr buffer)`` called with it."""
    def lower(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        double = llvmir.DoubleType()
        buffer = cgutils.alloca_once(builder, llvmir.ArrayType(double, nargs), name="rule.args")
        for i, (value, ty) in enumerate(zip(args, sig.args)):
            value = context.cast(builder, value, ty, nbtypes.float64)
            builder.store(value, builder.gep(buffer, [context.get_constant(nbtypes.int32, 0),
                                                      context.get_constant(nbtypes.int32, i)]))
        fnty = llvmir.FunctionType(double, [llvmir.IntType(8).as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
        return builder.call(fn, [builder.bitcast(buffer, llvmir.IntType(8).as_pointer())])

    return lower


def _declare(name: str, nargs: int) -> str:
    return f"declare i32 {symbol_for(name)}(ptr, ptr, {', '.join(['double'] * nargs)})"


def _struct(n: int) -> str:
    return "{ " + ", ".join(["double"] * n) + " }"


def _loads(buffer: str, n: int, prefix: str) -> list[str]:
    """IR loading ``n`` doubles from ``buffer`` into ``%<prefix><i>``."""
    lines = []
    for i in range(n):
        lines.append(f"  %{prefix}{i}.p = getelementptr inbounds double, ptr %{buffer}, i64 {i}")
        lines.append(f"  %{prefix}{i} = load double, ptr %{prefix}{i}.p, align 8")
    return lines


_NAN = "0x7FF8000000000000"


def _call_numba(callee: str, ret: str, values: list[str]) -> list[str]:
    """IR calling Numba's ABI function ``@callee`` and loading its result as ``%res``; NaN in every field where
    it raised (its exception cannot cross Enzyme's derivative: the adjoint the rule left unwritten was a
    silent 0 until 2026-12-04)."""
    nan = _NAN if ret == "double" else "{ " + ", ".join(f"double {_NAN}" for _ in range(ret.count("double"))) + " }"
    return [
        f"  %res.p = alloca {ret}, align 8",
        "  %exc = alloca ptr, align 8",
        f"  %status = call i32 {symbol_for(callee)}(ptr %res.p, ptr %exc, "
        + ", ".join(f"double %{v}" for v in values) + ")",
        f"  %res.ok = load {ret}, ptr %res.p, align 8",
        "  %raised = icmp ne i32 %status, 0",
        f"  %res = select i1 %raised, {ret} {nan}, {ret} %res.ok",
    ]


def _entry_adapter(sym: str, n: int) -> str:
    return "\n".join([
        f"define linkonce_odr double {symbol_for(sym)}(ptr %args) {{",
        "entry:",
        *_loads("args", n, "a"),
        *_call_numba(f"{sym}.primal", "double", [f"a{i}" for i in range(n)]),
        "  ret double %res",
        "}",
    ])


def _augmented_adapter(sym: str, n: int) -> str:
    return "\n".join([
        f"define linkonce_odr {{ ptr, double }} {symbol_for(sym + '.aug')}(ptr %args, ptr %dargs) {{",
        "entry:",
        f"  %tape = call ptr @malloc(i64 {8 * n})",
        *_loads("args", n, "a"),
        *(line for i in range(n) for line in (
            f"  %tape{i}.p = getelementptr inbounds double, ptr %tape, i64 {i}",
            f"  store double %a{i}, ptr %tape{i}.p, align 8")),
        f"  %value = call double {symbol_for(sym)}(ptr %args)",
        "  %out0 = insertvalue { ptr, double } undef, ptr %tape, 0",
        "  %out = insertvalue { ptr, double } %out0, double %value, 1",
        "  ret { ptr, double } %out",
        "}",
    ])


def _reverse_adapter(sym: str, n: int) -> str:
    lines = [
        f"define linkonce_odr void {symbol_for(sym + '.rev')}(ptr %args, ptr %dargs, double %dret, ptr %tape) {{",
        "entry:",
        "  %constant = icmp eq ptr %args, %dargs",  # Enzyme passes the buffer itself as a constant's shadow
        "  br i1 %constant, label %done, label %accumulate",
        "accumulate:",
        *_loads("tape", n, "a"),
        *_call_numba(f"{sym}.vjp", _struct(n), [*(f"a{i}" for i in range(n)), "dret"]),
    ]
    for i in range(n):
        lines += [
            f"  %g{i} = extractvalue {_struct(n)} %res, {i}",
            f"  %d{i}.p = getelementptr inbounds double, ptr %dargs, i64 {i}",
            f"  %d{i} = load double, ptr %d{i}.p, align 8",
            f"  %d{i}.new = fadd double %d{i}, %g{i}",
            f"  store double %d{i}.new, ptr %d{i}.p, align 8",
        ]
    return "\n".join([*lines, "  br label %done", "done:", "  call void @free(ptr %tape)", "  ret void", "}"])


def _forward_adapter(sym: str, n: int) -> str:
    return "\n".join([
        f"define linkonce_odr {{ double, double }} {symbol_for(sym + '.fwd')}(ptr %args, ptr %dargs) {{",
        "entry:",
        *_loads("args", n, "a"),
        *_loads("dargs", n, "t"),
        *_call_numba(f"{sym}.jvp", _struct(2), [*(f"a{i}" for i in range(n)), *(f"t{i}" for i in range(n))]),
        f"  ret {_struct(2)} %res",
        "}",
    ])


def glue_module(sym: str, n: int, header: list[str], *, reverse: bool, forward: bool) -> str:
    """The module defining ``<sym>`` and the derivatives Enzyme registers for it.

    Parameters
    ----------
    sym : str
        The rule's symbol (``pyjlad_rule_<name>``).
    n : int
        Its number of float arguments.
    header : list of str
        The ``target datalayout``/``target triple`` lines of the Numba modules it links with.
    reverse, forward : bool
        Whether a reverse (``defvjp``) or forward (``defjvp``) rule is registered.
    """
    declares = [_declare(f"{sym}.primal", n), "declare ptr @malloc(i64)", "declare void @free(ptr)"]
    glue = [_entry_adapter(sym, n)]
    if reverse:
        declares.append(_declare(f"{sym}.vjp", n + 1))
        glue += [_augmented_adapter(sym, n), _reverse_adapter(sym, n),
                 f"{symbol_for('__enzyme_register_gradient_' + sym)} = global [3 x ptr] "
                 f"[ptr {symbol_for(sym)}, ptr {symbol_for(sym + '.aug')}, ptr {symbol_for(sym + '.rev')}]"]
    if forward:
        declares.append(_declare(f"{sym}.jvp", 2 * n))
        glue += [_forward_adapter(sym, n),
                 f"{symbol_for('__enzyme_register_derivative_' + sym)} = global [2 x ptr] "
                 f"[ptr {symbol_for(sym)}, ptr {symbol_for(sym + '.fwd')}]"]
    return "\n".join([*header, *declares, *glue]) + "\n"
