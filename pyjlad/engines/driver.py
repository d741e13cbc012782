"""Enzyme driver modules: the LLVM code that calls ``__enzyme_autodiff`` / ``__enzyme_fwddiff``.

Enzyme's LLVM-level interface is a call to an undefined function
``__enzyme_autodiff(fn, args...)`` (reverse mode) or ``__enzyme_fwddiff(fn,
args...)`` (forward mode) in which each argument is preceded by the address of
a marker global naming its activity:

=====================  ======================================================
marker                 meaning
=====================  ======================================================
``enzyme_const``       not differentiated
``enzyme_out``         reverse mode: a scalar whose adjoint Enzyme returns
``enzyme_dup``         a value followed by its shadow: for a pointer, shadow
                       memory where adjoints accumulate (reverse) or tangents
                       are written (forward); for a scalar in forward mode,
                       its tangent
``enzyme_dupnoneed``   as ``enzyme_dup``, but the primal result is not needed
=====================  ======================================================

Numba's entry returns an ``i32`` status. A status must never be treated as a
differentiable value (the failure of seed 001), so every driver wraps the entry
in a ``void`` function that stores the status through a constant pointer and
differentiates the wrapper. The result pointer ``retptr`` is ``enzyme_dup``: in
reverse mode its shadow holds the seed (the output cotangent), in forward mode
it receives the output tangent.

Every driver has the same calling convention, which the embedded engine's
caller relies on::

    i32 symbol(ptr value_out, ptr dret, ptr excinfo, ptr adjoint_out..., params..., shadows...)

``dret`` points to the output seed (reverse) or receives the output tangent
(forward); ``adjoint_out`` receives the adjoint of each ``enzyme_out`` scalar
(in parameter order); ``shadows`` are, for each differentiated argument in
order, a pointer to its shadow data (arrays) or its tangent value (scalars in
forward mode). The return value is Numba's status.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..abi import ArrayArg, FunctionABI
from ..activity import MODES, Activity, as_activities
from ..errors import ArgumentError
from ..ir import parse
from ..ir.edit import FLOAT_TYPE_HINTS, drop_attributes, type_hint_declaration
from .entry_status import STATUS_ENTRY_SUFFIX, result_by_value, status_by_pointer

#: The LLVM 15 attributes saying a function accesses memory only through its pointer arguments.
ARGUMENT_MEMORY_ONLY = frozenset({"argmemonly", "inaccessiblemem_or_argmemonly"})

__all__ = ["ARGUMENT_MEMORY_ONLY", "Driver", "ad_driver", "status_by_pointer", "MODES", "OUT_OF_MEMORY", "OOM_ENTER", "OOM_LEAVE"]


@dataclass(frozen=True)
class Driver:
    """A driver module and how to call it.

    Attributes
    ----------
    text : str
        LLVM IR of the driver (appended to the portable module).
    symbol : str
        The driver function's name.
    active_scalars : tuple of int
        Arguments whose adjoints come back through ``adjoint_out`` (in order).
    shadow_args : tuple of int
        Arguments with a shadow (in order): arrays pass a pointer to their
        shadow data, forward-mode scalars pass their tangent.
    """

    text: str
    symbol: str
    active_scalars: tuple[int, ...]
    shadow_args: tuple[int, ...]
    #: The entry the wrapper calls reports its status through a pointer (see :func:`status_by_pointer`).
    entry: str = ""
    #: The type of the result the entry's copy returns instead (see :func:`result_by_value`); ``""``: the copy
    #: stores it through Numba's result pointer and its status (:func:`status_by_pointer`).
    returned_result: str = ""
    #: Vector mode: shadows reach Enzyme's derivatives as ``[W x ptr]`` aggregates. Enzyme v0.0.289 gives a
    #: derivative its primal's ``argmemonly``, and LLVM then assumes the derivative reads no memory reached
    #: through an aggregate: it deleted a caller's zeroing of such shadow memory (a Hessian's columns came
    #: out as garbage once its sweep was too large to inline). The module loses ``argmemonly`` first.
    aggregate_shadows: bool = False
    #: The wrapper the driver passes to Enzyme (``<entry>_status_<digest>``), where it has one of that form.
    primal: str = ""

    def module(self, module_text: str) -> str:
        """The module Enzyme differentiates: ``module_text`` (holding the entry) with this driver.

        With ``entry`` set, ``module_text`` gains the copy of the entry that
        stores its status through a pointer, which the driver's wrapper calls
        (with ``returned_result`` also set, the copy that returns the result).
        """
        if self.entry and self.returned_result:
            # the slot typed, as the status wrapper types %retptr
            module_text = result_by_value(module_text, self.entry, self.returned_result,
                                          _result_slot_hint(self.returned_result))
        elif self.entry:
            module_text = status_by_pointer(module_text, self.entry)
        if self.aggregate_shadows:
            module_text = drop_attributes(parse(module_text), ARGUMENT_MEMORY_ONLY).render()
        # Enzyme's markers and type annotations the module declares already (its own Enzyme calls and
        # private copies: pyjlad.openmp_loops, pyjlad.private_adjoints)
        present = {line.split("=")[0].strip() for line in module_text.split("\n") if line.startswith("@enzyme_")}
        present |= {_declared(line) for line in module_text.split("\n") if line.startswith("declare void @__enzyme_")}
        driver = "\n".join(line for line in self.text.split("\n")
                            if not (line.startswith("@enzyme_") and line.split("=")[0].strip() in present)
                            and not (line.startswith("declare void @__enzyme_") and _declared(line) in present))
        return module_text + "\n" + driver


def _names(abi: FunctionABI) -> tuple[list[tuple[int, str, str]], list[str]]:
    params = abi.params()
    return params, [f"%p{k}" for k in range(len(params))]


def _joined(items: list[str]) -> str:
    return "".join(", " + item for item in items)


def _result_slot_type(abi: FunctionABI) -> str:
    # Numba's retptr for a function returning None is still written (a null
    # pointer), so it gets a pointer-sized slot.
    return abi.result.llvm_type if abi.result.llvm_type in ("double", "float") else "i64"


#: Enzyme's type annotations: ``__enzyme_double(p, n)`` says ``p`` points to doubles in its first
#: ``n`` bytes (``__enzyme_float`` likewise for floats). Removed by the optimizer afterwards.
_TYPE_HINT = FLOAT_TYPE_HINTS
_TYPE_HINT_DECLS = [type_hint_declaration(fn) for fn, _ in _TYPE_HINT.values()]


def _result_slot_hint(result_type: str) -> str:
    """The call typing Numba's result slot ``%retptr`` as holding one ``result_type`` (``""`` for other types)."""
    if result_type not in _TYPE_HINT:
        return ""
    fn, size = _TYPE_HINT[result_type]
    return f"call void @{fn}(ptr %retptr, i64 {size})"


def _type_hints(abi: FunctionABI, params, names, result_slot: bool = True) -> list[str]:
    """Calls telling Enzyme's type analysis what the result slot (``%retptr``) and the float arrays hold.

    Without them a value that is only loaded, compared and selected (a running
    maximum, ``np.max``, ``np.sort(x)[k]``) and then stored to the result has no
    type Enzyme can deduce: it retries with loose types, which take it for an
    integer and give a zero gradient. The slot's type is pyjlad's to state.
    """
    hints = []
    if result_slot and abi.result.llvm_type in _TYPE_HINT:
        hints.append(f"  {_result_slot_hint(abi.result.llvm_type)}")
    for (index, role, _), name in zip(params, names):
        arg = abi.args[index]
        if role == "data" and isinstance(arg, ArrayArg) and arg.llvm_element in _TYPE_HINT:
            fn, size = _TYPE_HINT[arg.llvm_element]
            hints.append(f"  call void @{fn}(ptr {name}, i64 {size})")
    return hints


_FLOAT_MEMORY = {"double": '"enzyme_type"="{[-1]:Pointer, [-1,-1]:Float@double}"',
                 "float": '"enzyme_type"="{[-1]:Pointer, [-1,-1]:Float@float}"'}


def _param_attributes(abi: FunctionABI, index: int, role: str) -> str:
    """Attributes of a wrapper parameter: float array data is typed for Enzyme at every offset."""
    arg = abi.args[index]
    if role == "data" and isinstance(arg, ArrayArg) and arg.llvm_element in _FLOAT_MEMORY:
        return _FLOAT_MEMORY[arg.llvm_element] + " "
    return ""


def _status_wrapper(abi: FunctionABI, name: str, params, names, noalias: bool = True) -> list[str]:
    typed = _joined([f"{ty} {_param_attributes(abi, i, role)}{n}" for (i, role, ty), n in zip(params, names)])
    # noalias: the slots are the driver's own, so Enzyme need not cache reads of the
    # inputs against the status store (without it, Rosenbrock at n=10^6 tapes every read of x).
    # Enzyme then differentiates the call in combined mode, where the entry's copy must
    # store its status itself (see status_by_pointer).
    # Off for modules calling custom rules: with it, Enzyme differentiates the call in
    # combined mode, which this Enzyme's custom-gradient path asserts against; the status
    # store after the call (the slot may alias what the call reads) keeps the split mode.
    attrs = "noalias nocapture " if noalias else ""
    if noalias:
        call = [f"  call void @{abi.entry}{STATUS_ENTRY_SUFFIX}(ptr %retptr, ptr %excinfo{typed}, ptr %status)"]
    else:
        call = [f"  %s = call i32 @{abi.entry}(ptr %retptr, ptr %excinfo{typed})",
                "  store i32 %s, ptr %status, align 4"]
    return [
        f"define internal void @{name}(ptr {attrs}%retptr, ptr {attrs}%status, ptr {attrs}%excinfo{typed}) {{",
        "entry:",
        *_type_hints(abi, params, names),
        *call,
        "  ret void",
        "}",
        "",
    ]


#: Status a driver returns when an allocation of the differentiated code failed
#: (not one of Numba's statuses, which are small); the engine raises ``MemoryError``.
OUT_OF_MEMORY = -909
#: The block pool's functions (see :mod:`pyjlad.engines.pool`) that arm and disarm the
#: out-of-memory exit for the calling thread.
OOM_ENTER, OOM_LEAVE = "pyjlad_oom_enter", "pyjlad_oom_leave"


def _guard_out_of_memory(lines: list[str], symbol: str) -> list[str]:
    """Make the driver ``symbol`` return :data:`OUT_OF_MEMORY` when an allocation fails.

    Enzyme's generated code writes to what ``malloc`` returns without a check, so a
    failed allocation (tape, shadows, temporaries) would be a segfault. The driver
    registers a ``jmp_buf`` for its thread (:data:`OOM_ENTER`) and calls ``_setjmp``;
    the pool's ``malloc``/``calloc`` ``longjmp`` there on failure. Memory allocated by
    the sweep before the failure is not freed on that path.
    """
    start = next(k for k, line in enumerate(lines) if line.startswith(f"define i32 @{symbol}("))
    entry = lines.index("entry:", start)
    call = next(k for k in range(entry, len(lines)) if "@__enzyme_" in lines[k])
    end = max(k for k in range(call, len(lines)) if lines[k] == "  ret i32 %st")
    return [
        f"declare ptr @{OOM_ENTER}(ptr)",
        f"declare void @{OOM_LEAVE}(ptr)",
        "declare i32 @_setjmp(ptr) returns_twice",
        "",
        *lines[:entry + 1],
        "  %oom.jb = alloca [32 x i64], align 16",  # glibc's jmp_buf is 200 bytes
        *lines[entry + 1:call],
        f"  %oom.prev = call ptr @{OOM_ENTER}(ptr %oom.jb)",
        "  %oom.jumped = call i32 @_setjmp(ptr %oom.jb) returns_twice",
        "  %oom.failed = icmp ne i32 %oom.jumped, 0",
        "  br i1 %oom.failed, label %oom, label %oom.run",
        "oom.run:",
        *lines[call:end - 1],
        f"  call void @{OOM_LEAVE}(ptr %oom.prev)",
        *lines[end - 1:end + 1],
        "oom:",
        f"  call void @{OOM_LEAVE}(ptr %oom.prev)",
        f"  ret i32 {OUT_OF_MEMORY}",
        *lines[end + 1:],
    ]


#: ``calloc`` and ``free`` for the zeroed shadows, under names no Numba module declares
#: (the engine maps them to the C library's).
ZEROED, RELEASE = "pyjlad_zeroed", "pyjlad_release"

_MARKERS = [
    *_TYPE_HINT_DECLS,
    "@enzyme_dup = external global i32",
    "@enzyme_dupnoneed = external global i32",
    "@enzyme_const = external global i32",
    "@enzyme_out = external global i32",
    f"declare ptr @{ZEROED}(i64, i64)",
    f"declare void @{RELEASE}(ptr)",
    "",
]


def _declared(line: str) -> str:
    """The ``@`` symbol a ``declare`` line names."""
    return line.split("(")[0].split()[-1]


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12]


def _zero_shadowed(abi: FunctionABI, activities: Sequence[Activity | str]) -> tuple[int, ...]:
    """Constant arrays that need a shadow all the same (see :attr:`ArrayArg.shadowed_when_constant`)."""
    return tuple(i for i, arg in enumerate(abi.args) if isinstance(arg, ArrayArg) and arg.shadowed_when_constant
                 and Activity(activities[i]) is Activity.CONST)


def _span_lines(var: str, sizes: dict, index: int, ndim: int) -> list[str]:
    """Lines computing ``%{var}.lo`` and ``%{var}.bytes``: the byte range an array's strides reach.

    Enzyme addresses a shadow exactly as its primal (``data + sum(i_k * stride_k)``),
    so a zeroed shadow must cover every byte the strides reach from the data pointer,
    below it too for negative strides; ``nitems * itemsize`` does not for a strided view.
    """
    lines, lo, hi = [], "0", "0"
    for k in range(ndim):
        v = f"%{var}.d{k}"
        lines += [
            f"  {v}.n1 = sub i64 {sizes[index, f'shape{k}']}, 1",
            f"  {v}.neg = icmp slt i64 {v}.n1, 0",
            f"  {v}.last = select i1 {v}.neg, i64 0, i64 {v}.n1",
            f"  {v}.off = mul i64 {v}.last, {sizes[index, f'stride{k}']}",
            f"  {v}.below = icmp slt i64 {v}.off, 0",
            f"  {v}.lo = select i1 {v}.below, i64 {v}.off, i64 0",
            f"  {v}.hi = select i1 {v}.below, i64 0, i64 {v}.off",
            f"  {v}.lo.sum = add i64 {lo}, {v}.lo",
            f"  {v}.hi.sum = add i64 {hi}, {v}.hi",
        ]
        lo, hi = f"{v}.lo.sum", f"{v}.hi.sum"
    lines += [
        f"  %{var}.lo = add i64 {lo}, 0",
        f"  %{var}.reach = sub i64 {hi}, %{var}.lo",
        f"  %{var}.bytes = add i64 %{var}.reach, {sizes[index, 'itemsize']}",
    ]
    return lines


def _zero_buffers(abi: FunctionABI, params, names, indices, prefix: str) -> tuple[list[str], list[str]]:
    """Lines allocating a zeroed shadow ``%{prefix}{i}`` per array ``i`` of ``indices``, and freeing them.

    ``%{prefix}{i}`` points into its buffer where the array's data pointer points
    into the array's memory (see :func:`_span_lines`).
    """
    sizes = {(index, role): name for (index, role, _), name in zip(params, names)}
    alloc: list[str] = []
    for i in indices:
        var = f"{prefix}{i}"
        alloc += [
            *_span_lines(var, sizes, i, abi.args[i].ndim),  # type: ignore[union-attr]
            f"  %{var}.base = call ptr @{ZEROED}(i64 %{var}.bytes, i64 1)",
            f"  %{var}.skip = sub i64 0, %{var}.lo",
            f"  %{var} = getelementptr i8, ptr %{var}.base, i64 %{var}.skip",
        ]
    return alloc, [f"  call void @{RELEASE}(ptr %{prefix}{i}.base)" for i in indices]


def _arg_markers(abi, params, names, activities, mode, shadow_name) -> list[str]:
    """Marker + value (+ shadow) for every entry parameter.

    A constant array Numba merges with other memory gets the zeroed shadow
    ``%zero{i}`` (allocated by the caller of the Enzyme call).
    """
    out: list[str] = []
    activities = as_activities(activities)
    zeroed = _zero_shadowed(abi, activities)
    for (index, role, ty), name in zip(params, names):
        act = activities[index]
        arg = abi.args[index]
        if act is Activity.CONST and role == "data" and index in zeroed:
            out += [f"ptr @{Activity.DUP.marker}", f"{ty} {name}", f"ptr %zero{index}"]
        elif act is Activity.ACTIVE and role == "value":
            out += [f"ptr @{act.marker}", f"{ty} {name}"]
        elif act.shadowed and isinstance(arg, ArrayArg) and role == "data":
            out += [f"ptr @{act.marker}", f"{ty} {name}", f"ptr {shadow_name(index)}"]
        elif act.shadowed and not isinstance(arg, ArrayArg) and mode == "forward":
            out += [f"ptr @{act.marker}", f"{ty} {name}", f"{ty} {shadow_name(index)}"]
        else:
            out += [f"ptr @{Activity.CONST.marker}", f"{ty} {name}"]
    return out


def ad_driver(abi: FunctionABI, mode: str, activities: Sequence[Activity | str], *, noalias: bool = True,
              salt: str = "", oom_guard: bool = True, value: bool = True) -> Driver:
    """Driver for one reverse or forward sweep with the given per-argument activities.

    ``salt`` (the module's text) makes the driver's symbol unique to the function: two
    functions with the same name and ABI get different symbols in the one JIT.

    ``activities`` (:class:`~pyjlad.activity.Activity` members or their values) must be
    concrete and valid for ``abi`` (checked by the engine): ``ACTIVE`` only on float scalars
    in reverse mode, ``DUP``/``DUPNONEED`` on float arrays, or on float scalars in forward mode.

    ``value=False`` (reverse mode) passes the result pointer as ``enzyme_dupnoneed``: Enzyme may
    then leave out what only computes the function's value (a loop summing a loss), and the
    driver's ``value_out`` is meaningless.
    """
    if mode not in MODES:
        raise ArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    activities = as_activities(activities)
    params, names = _names(abi)
    # Digested by value ('dup', not Activity.DUP's repr): the symbol, so the driver's text and the
    # disk-cache key, are those of the string activities that came before the enum.
    unneeded = not value and mode == "reverse"
    tag = _digest(abi.to_dict(), mode, tuple(a.value for a in activities), salt, *(["no-value"] if unneeded else []))
    symbol = f"{abi.entry}_{mode}_{tag}"
    primal = f"{abi.entry}_status_{tag}"
    active = tuple(i for i, a in enumerate(activities) if a is Activity.ACTIVE)
    shadowed = tuple(i for i, a in enumerate(activities) if a.shadowed)
    res_ty = _result_slot_type(abi)
    float_result = res_ty in ("double", "float")

    out_types = [abi.args[i].llvm_type for i in active]  # type: ignore[union-attr]
    if mode == "forward" or not out_types:
        ad_ret = "void"
    elif len(out_types) == 1:
        ad_ret = out_types[0]
    else:
        ad_ret = "{ " + ", ".join(out_types) + " }"

    shadow_param_types = [
        "ptr" if isinstance(abi.args[i], ArrayArg) else abi.args[i].llvm_type  # type: ignore[union-attr]
        for i in shadowed
    ]
    result_marker = (
        [f"ptr @{(Activity.DUPNONEED if unneeded else Activity.DUP).marker}", "ptr %ret", "ptr %dretslot"] if float_result
        else ["ptr @enzyme_const", "ptr %ret"]
    )
    ad_args = [
        f"ptr @{primal}", *result_marker,
        "ptr @enzyme_const", "ptr %status", "ptr @enzyme_const", "ptr %excinfo",
        *_arg_markers(abi, params, names, activities, mode, lambda i: f"%shadow{i}"),
    ]
    enzyme_fn = "__enzyme_autodiff" if mode == "reverse" else "__enzyme_fwddiff"
    typed_params = _joined([f"{ty} {n}" for (_, _, ty), n in zip(params, names)])
    lines = [
        *_MARKERS,
        f"declare {ad_ret} @{enzyme_fn}(...)",
        "",
        *_status_wrapper(abi, primal, params, names, noalias),
        f"define i32 @{symbol}(ptr %value_out, ptr %dret, ptr %excinfo"
        f"{_joined([f'ptr %adj{i}' for i in active])}{typed_params}"
        f"{_joined([f'{t} %shadow{i}' for t, i in zip(shadow_param_types, shadowed)])}) {{",
        "entry:",
        f"  %ret = alloca {res_ty}, align 8",
        f"  %dretslot = alloca {res_ty}, align 8",
        "  %status = alloca i32, align 4",
        f"  store {res_ty} {'0.000000e+00' if float_result else '0'}, ptr %ret, align 8",
        "  store i32 0, ptr %status, align 4",
    ]
    if float_result:
        if mode == "reverse":
            lines += [f"  %seed = load {res_ty}, ptr %dret, align 8",
                      f"  store {res_ty} %seed, ptr %dretslot, align 8"]
        else:
            lines.append(f"  store {res_ty} 0.000000e+00, ptr %dretslot, align 8")
    alloc, release = _zero_buffers(abi, params, names, _zero_shadowed(abi, activities), "zero")
    call = f"call {ad_ret} (...) @{enzyme_fn}({', '.join(ad_args)})"
    lines += [*alloc, f"  {call}" if ad_ret == "void" else f"  %g = {call}", *release]
    for k, i in enumerate(active):
        if len(out_types) == 1:
            lines.append(f"  store {out_types[k]} %g, ptr %adj{i}, align 8")
        else:
            lines += [f"  %g{k} = extractvalue {ad_ret} %g, {k}",
                      f"  store {out_types[k]} %g{k}, ptr %adj{i}, align 8"]
    if float_result:
        lines += [f"  %value = load {res_ty}, ptr %ret, align 8",
                  f"  store {res_ty} %value, ptr %value_out, align 8"]
        if mode == "forward":
            lines += [f"  %tangent = load {res_ty}, ptr %dretslot, align 8",
                      f"  store {res_ty} %tangent, ptr %dret, align 8"]
    lines += ["  %st = load i32, ptr %status, align 4", "  ret i32 %st", "}"]
    if oom_guard:
        lines = _guard_out_of_memory(lines, symbol)
    return Driver(text="\n".join(lines) + "\n", symbol=symbol, active_scalars=active, shadow_args=shadowed,
                  entry=abi.entry if noalias else "", primal=primal)
