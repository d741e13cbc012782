"""Per-thread private copies of the arrays every iteration of a parallel loop reads (reverse mode).

In the reverse sweep of a parallel loop (:mod:`pyjlad.openmp_loops`), Enzyme accumulates the adjoint
of an array shared between iterations with atomic adds. Where every iteration reads the whole array
(``for i in prange(n): for j in range(n): ... x[j]``), all threads add into the same elements at the
same time: ``n**2`` contended atomic adds, and two threads ran slower than one. Instead, each thread of
the loop's task copies such an array into memory of its own (``malloc`` and ``memcpy``) and runs its
rows on the copy. Enzyme then accumulates into the copy's shadow, which only that thread touches (its
atomic adds are not contended), and the reverse of the ``memcpy`` adds that shadow into the shared
one once per thread.

An array is copied only where that is sound and pays off:

* it is an argument array of the loop's body (not a reduction's array, not a scalar) whose shape and
  strides the loop's ``dims`` and ``steps`` hold (recorded from Numba's lowering of the loop,
  :func:`recording_loop_layouts`), of floating-point elements;
* the loop's body reads it somewhere at an index other than the loop's own index
  (:func:`_read_across_iterations`; ``x[i]``, ``x[i, :]`` are not copied: each element's adjoint gets
  one add, the copy would cost more than it saves); where it reads it only near its own rows (a
  stencil's ``x[i - 1]``, ``x[i + 1, j]``: :func:`pyjlad.row_offsets.row_offsets`), it is not copied
  but read in place, the loop's rows split into those reading only their chunk's elements, whose adds
  are plain, and its edges, whose adds stay atomic (:mod:`pyjlad.openmp_tasks`); an array neither C nor F
  contiguous (a strided or reversed view) only where its strides nest, checked at run time
  (:attr:`ArrayLayout.strided`: with elements sharing memory, every row adds atomically). Copying each
  thread's rows and halo instead, as before 2026-12-01, cost more than the serial derivative on 2 threads;
* the body only loads through it (:func:`read_only_arguments`, on the body's LLVM IR);
* at run time, it does not overlap an array the body may write (checked in the task; an overlapping
  one is used in place).

An array each iteration reads only at its own element (``x[i]`` in a loop from 0, an array expression's
operand ``a[i, j]``: :func:`pyjlad.row_offsets.own_elements`), contiguous, is not copied but passed in
place the same way (:attr:`ArrayLayout.in_place`), so that the adds into its adjoint are plain too: no
other thread adds into its elements. At run time it must overlap no other array of the loop, read or
written (else every row runs the body as Numba compiled it, with atomic adds).

Examples
--------
>>> layout = ArrayLayout(index=1, itemsize=8, dims=(2,), steps=(4,))
>>> "@malloc(" in private_copy(layout, [])[0]
True
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Iterator
from dataclasses import dataclass, field

from .errors import IRLookupError, IRParseError
from .ir import Function, Instruction, Module, parse
from .ir.edit import FLOAT_TYPE_HINTS, type_hint_declaration
from .ir.instructions import significant
from .row_offsets import own_elements, row_offsets
from .shared_writes import shared_writes

__all__ = ["ArrayLayout", "LoopLayout", "argument_pointers", "declarations", "derived_pointers", "private_copy",
           "read_only_arguments", "recording_loop_layouts", "tangent_copy"]


def declarations() -> list[str]:
    """The ``declare`` lines the IR of :func:`private_copy` needs."""
    return ["declare ptr @malloc(i64)", "declare void @free(ptr)",
            "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
            *(type_hint_declaration(hint) for hint, _ in FLOAT_TYPE_HINTS.values())]


@dataclass(frozen=True)
class ArrayLayout:
    """Where a parallel loop's body finds one array argument: ``args[index]`` its data, its shape
    ``dims[d]`` for ``d`` in ``dims``, its strides (bytes) ``steps[s]`` for ``s`` in ``steps``."""

    index: int
    itemsize: int
    dims: tuple[int, ...]
    steps: tuple[int, ...]
    #: Where set, ``(below, above)``: the body reads the array only within that many rows (first axis) of
    #: the iteration's own (:func:`pyjlad.row_offsets.row_offsets`), and a thread copies only its rows and
    #: that halo; with :attr:`in_place`, the loop's rows are split instead (:mod:`pyjlad.openmp_tasks`).
    halo: tuple[int, int] | None = None
    #: Whether Numba's type of the array says its elements are aligned (to their size).
    aligned: bool = False
    #: Whether the body reads each element (or row) of the array from one iteration only
    #: (:func:`pyjlad.row_offsets.own_elements`): passed in place, not copied, to the body's copy, whose adds
    #: into its adjoint are then plain (each thread adds only into elements no other thread reads).
    in_place: bool = False
    #: With :attr:`in_place`: the array's Numba layout is neither C nor F (a strided or reversed view), so
    #: its elements are distinct only where its strides nest, checked at run time (:func:`_distinct`); rows
    #: run the body as Numba compiled it (atomic adds) where they do not (a zero stride, a broadcast).
    strided: bool = False
    #: What the array's elements are, for Enzyme: ``"double"``, ``"float"``, ``"integer"`` (integers and
    #: booleans), or None (other types): the loop's caller and body say so (:func:`pyjlad.openmp_tasks.typed_arguments`,
    #: :func:`pyjlad.parfor_bodies.typed_loop_arguments`).
    element: str | None = None


@dataclass
class LoopLayout:
    """The array arguments of one parallel loop's body (a Numba parfor gufunc).

    ``candidates``: float arrays read across iterations (worth a private copy); ``arrays``: every user
    array argument with a known layout; ``complete``: whether every user array argument has one.
    """

    candidates: list[ArrayLayout] = field(default_factory=list)
    arrays: list[ArrayLayout] = field(default_factory=list)
    complete: bool = True
    #: Arrays from outside the loop its body writes at an element other iterations may write too
    #: (:func:`pyjlad.shared_writes.shared_writes`): a race.
    shared_writes: tuple[str, ...] = ()


def _symbol(name: str) -> str:
    """``name`` without its ``@`` and quotes."""
    return name.lstrip("@").strip('"')


def _read_across_iterations(parfor: object) -> frozenset[str]:
    """The variables the body of ``parfor`` (a Numba ``Parfor``, before lowering renames its loop index)
    uses other than subscripted at its loop index (an offset of it, or a tuple with such a component:
    ``x[i, j]``, ``x[i, :]``), as ``.shape``-like attributes, or as the target of a write."""
    from numba.core import ir

    index = {parfor.index_var.name} | {nest.index_variable.name for nest in parfor.loop_nests}
    statements = [s for block in parfor.loop_body.values() for s in block.body]
    defined: dict[str, list[object]] = {}
    for s in statements:
        if isinstance(s, ir.Assign):
            defined.setdefault(s.target.name, []).append(s.value)
    # loop-invariant: defined outside the body, or a constant (or global) the body names
    invariant = {var for var, values in defined.items()
                 if len(values) == 1 and isinstance(values[0], (ir.Const, ir.Global, ir.FreeVar))}
    derived = set(index)  # the loop index and what is computed from it and loop-invariant values only
    changed = True
    while changed:
        changed = False
        for var, values in defined.items():
            if var in derived or len(values) != 1 or not isinstance(values[0], ir.Expr):
                continue
            expr = values[0]
            if expr.op not in ("binop", "inplace_binop", "unary", "cast", "build_tuple"):
                continue
            used = [v.name for v in expr.list_vars()]
            if any(u in derived for u in used) and all(u in derived or u in invariant or u not in defined
                                                          for u in used):
                derived.add(var)
                changed = True
    # an index tuple with a component from the loop index: each iteration its own row (column, ...)
    partitioned = derived | {var for var, values in defined.items() if len(values) == 1
                             and isinstance(values[0], ir.Expr) and values[0].op == "build_tuple"
                             and any(v.name in derived for v in values[0].items)}
    across: set[str] = set()
    for s in statements:
        used = {v.name for v in s.list_vars()}
        value = s.value if isinstance(s, ir.Assign) else None  # (getattr: a Numba Expr raises KeyError)
        if isinstance(s, ir.Assign) and isinstance(value, ir.Expr) and value.op in ("getattr", "getitem",
                                                                                 "static_getitem"):
            array = value.value.name
            subscript = value.index if value.op == "getitem" else value.index_var if value.op == "static_getitem" \
                else None
            if value.op == "getattr" or (subscript is not None and subscript.name in partitioned):
                used.discard(array)  # x.shape; x[i], x[i - 1], x[i, j], x[i, :]
        if isinstance(s, (ir.SetItem, ir.StaticSetItem)):
            used.discard(s.target.name)  # a write: read_only_arguments keeps the array shared
        across |= used
    return frozenset(across)


#: ``numba.parfors.parfor_lowering.call_parallel_gufunc``'s parameters in the Numba versions whose
#: layout of a loop's ``args``, ``dims`` and ``steps`` :func:`_layout` follows (read in Numba 0.68's source).
_GUFUNC_CALL_PARAMETERS = ("lowerer", "cres", "gu_signature", "outer_sig", "expr_args", "expr_arg_types",
                           "loop_ranges", "redvars", "reddict", "redarrdict", "init_block", "index_var_typ", "races",
                           "exp_name_to_tuple_var")


@contextlib.contextmanager
def recording_loop_layouts(layouts: dict[str, LoopLayout]) -> Iterator[None]:
    """While active, Numba's lowering of each parfor records its body's array layout in ``layouts``,
    keyed by the gufunc wrapper's symbol (as in ``numba_parallel_for``'s first argument)."""
    from numba.core import types
    from numba.parfors import parfor_lowering as lowering

    lower, call = lowering._lower_parfor_parallel_std, lowering.call_parallel_gufunc
    if tuple(inspect.signature(call).parameters) != _GUFUNC_CALL_PARAMETERS:
        yield  # a Numba whose lowering this does not know: no layouts, no private copies
        return
    current: list[tuple[frozenset[str] | None, dict[str, tuple[int, int]], frozenset[str], tuple[str, ...]]] = []

    def lower_parfor(lowerer, parfor):  # type: ignore[no-untyped-def]
        try:
            across: frozenset[str] | None = _read_across_iterations(parfor)
            halos, own = row_offsets(parfor), own_elements(parfor)
        except Exception:  # noqa: BLE001 - a body this does not read: no private copies
            across, halos, own = None, {}, frozenset()
        try:
            racing = tuple(sorted(shared_writes(parfor)))
        except Exception:  # noqa: BLE001 - a body this does not read: no race found
            racing = ()
        current.append((across, halos, own, racing))
        try:
            return lower(lowerer, parfor)
        finally:
            current.pop()

    def call_gufunc(lowerer, cres, gu_signature, outer_sig, expr_args, expr_arg_types,
                    loop_ranges, redvars, *rest):  # type: ignore[no-untyped-def]
        try:
            across, halos, own, racing = current[-1] if current else (None, {}, frozenset(), ())
            layouts["__gufunc__." + cres.fndesc.mangled_name] = dataclasses.replace(_layout(
                across, halos, own, gu_signature, list(expr_args), list(expr_arg_types), len(redvars), rest[4], types),
                shared_writes=racing)
        except Exception:  # noqa: BLE001 - no layout means no private copies
            pass
        return call(lowerer, cres, gu_signature, outer_sig, expr_args, expr_arg_types, loop_ranges, redvars, *rest)

    lowering._lower_parfor_parallel_std, lowering.call_parallel_gufunc = lower_parfor, call_gufunc
    try:
        yield
    finally:
        lowering._lower_parfor_parallel_std, lowering.call_parallel_gufunc = lower, call


def _layout(across: frozenset[str] | None, halos: dict[str, tuple[int, int]], own: frozenset[str],
            gu_signature: tuple, expr_args: list[str], expr_arg_types: list, nredvars: int, races: object,
            types: object) -> LoopLayout:
    """The :class:`LoopLayout` of a gufunc call as Numba 0.6x's ``call_parallel_gufunc`` lays it out
    (``halos``: :func:`pyjlad.row_offsets.row_offsets`, for a loop of one dimension; ``own``:
    :func:`pyjlad.row_offsets.own_elements`)."""
    sin, sout = gu_signature
    sched_sig, signatures = sin[0], list(sin[1:]) + list(sout)
    names = expr_args[1:]
    ninouts = len(names) - nredvars
    symbols = [sched_sig[0]]
    for sig in signatures:
        symbols += [s for s in sig if s not in symbols]
    nargs = len(names)
    stride = 1  # sched's stride comes first
    out = LoopLayout()
    for i, (name, aty, sig) in enumerate(zip(names, expr_arg_types, signatures)):
        array = isinstance(aty, types.ArrayCompatible)
        count = 1 if array and i < ninouts and name in races else (aty.ndim if array else 0)
        user = i < ninouts and isinstance(aty, types.npytypes.Array) and name not in races
        itemsize = getattr(aty.dtype, "bitwidth", 0) // 8 if user else 0
        if user:
            if len(sig) != aty.ndim or aty.ndim == 0 or itemsize == 0:
                out.complete = False  # (an element size unknown: no overlap check, no copies)
            else:
                floats = aty.dtype in (types.float32, types.float64)
                layout = ArrayLayout(index=i + 1, itemsize=itemsize, dims=tuple(1 + symbols.index(s) for s in sig),
                                     steps=tuple(1 + nargs + stride + k for k in range(aty.ndim)),
                                     aligned=bool(getattr(aty, "aligned", False)),
                                     element=_element(aty.dtype, types))
                out.arrays.append(layout)
                across_rows = across is not None and name in across
                if floats and name in halos and sum(halos[name]) > 0:
                    # read only near each iteration's own rows, its elements distinct (contiguous, or a view
                    # whose strides are checked at run time): read in place, the rows split
                    # (pyjlad.openmp_tasks), the adds of the interior parts plain
                    out.candidates.append(dataclasses.replace(layout, halo=halos[name], in_place=True,
                                                              strided=aty.layout not in ("C", "F")))
                elif floats and name in halos and (sum(halos[name]) > 0 or across_rows):
                    # read only near each iteration's own rows: those and the halo copied (at its own rows
                    # only, x[i]: read in place, unless the body's index is a copy of the loop's, which
                    # _read_across_iterations does not follow, where a copy of the rows replaces the whole one)
                    out.candidates.append(dataclasses.replace(layout, halo=halos[name]))
                elif floats and across_rows:
                    out.candidates.append(layout)
                elif floats and name in own and aty.layout in ("C", "F"):
                    # each element read by one iteration: in place, its adjoint's adds plain (a contiguous
                    # array's elements are distinct; one with strides of its own could repeat them)
                    out.candidates.append(dataclasses.replace(layout, in_place=True))
        stride += count
    return out


def _element(dtype: object, types: object) -> str | None:
    """:attr:`ArrayLayout.element` of an array of Numba type ``dtype``."""
    if dtype == types.float64:
        return "double"
    if dtype == types.float32:
        return "float"
    return "integer" if isinstance(dtype, (types.Integer, types.Boolean)) else None


#: Instructions whose result points into the memory of a pointer operand.
_POINTER_STEPS = frozenset({"getelementptr", "phi", "select", "bitcast", "addrspacecast", "freeze"})


def read_only_arguments(text: str | Module, kernel: str, indices: list[int]) -> set[int]:
    r"""Which of ``args[j]`` (``j`` in ``indices``) the body ``kernel`` (a ``define`` in ``text``, IR text or a
    parsed module) only loads through.

    Conservative: a pointer derived from the data pointer loaded from ``args[j]`` (through
    ``getelementptr``, ``phi``, ``select``, casts) used in any other way than as the address of a load
    or in an ``icmp`` makes ``j`` not read-only (a store, a call, ``ptrtoint`` all do).

    >>> body = "\n".join([
    ...     "define void @k(ptr %args, ptr %dims, ptr %steps, ptr %data) {", "entry:",
    ...     "  %a = load ptr, ptr %args, align 8", "  %p1 = getelementptr i8, ptr %args, i64 8",
    ...     "  %b = load ptr, ptr %p1, align 8", "  %x = load double, ptr %a, align 8",
    ...     "  %q = getelementptr double, ptr %b, i64 1", "  store double %x, ptr %q, align 8",
    ...     "  ret void", "}"])
    >>> sorted(read_only_arguments(body, "@k", [0, 1]))
    [0]
    """
    try:
        module = parse(text, strict=False) if isinstance(text, str) else text
        function = module.function(_symbol(kernel))
    except (IRParseError, IRLookupError):
        return set()
    if function.body is None or not function.parameters or function.parameters[0].name is None:
        return set()
    instructions = list(function.instructions())
    data = argument_pointers(function, instructions)
    return {j for j in indices if _only_loaded({v for v, slot in data.items() if slot == j}, instructions, module)}


def argument_pointers(function: Function, instructions: list[Instruction]) -> dict[str, int]:
    """The data pointers a gufunc body ``function`` loads from its ``args`` array (its first parameter):
    each value's argument index (``args[j]``)."""
    offsets = {function.parameters[0].name: 0}  # pointers into the args array: their byte offset
    data: dict[str, int] = {}
    for ins in instructions:
        operands = ins.operands()
        if ins.result is None or not operands or operands[0] not in offsets:
            continue
        if ins.opcode == "load":
            data[ins.result] = offsets[operands[0]] // 8
        elif ins.opcode == "getelementptr" and len(operands) == 1:
            kept = [t.text for t in significant(list(ins.tokens)) if t.kind == "word"]
            scale = {"i8": 1, "ptr": 8, "i64": 8}.get(next((w for w in kept[1:] if w != "inbounds"), ""))
            if scale is not None and kept[-1].isdigit():
                offsets[ins.result] = offsets[operands[0]] + scale * int(kept[-1])
    return data


def derived_pointers(roots: set[str], instructions: list[Instruction]) -> set[str]:
    """``roots`` and the pointers derived from them (``getelementptr``, ``phi``, ``select``, casts)."""
    derived = set(roots)
    changed = bool(roots)
    while changed:
        changed = False
        for ins in instructions:
            if ins.result is not None and ins.result not in derived and ins.opcode in _POINTER_STEPS \
                    and derived & set(ins.operands()):
                derived.add(ins.result)
                changed = True
    return derived


#: Numba's BLAS helpers (numba/_lapack.c) by the positions of the pointer arguments they only read: gemv's
#: ``alpha``, ``a``, ``x`` and ``beta``, gemm's ``alpha``, ``a``, ``b`` and ``beta``, dot's and nrm2's vectors.
_READING_HELPERS = {"@numba_xxgemv": frozenset({4, 5, 7, 8}), "@numba_xxgemm": frozenset({6, 7, 9, 11}),
                    "@numba_xxdot": frozenset({3, 4}), "@numba_xxnrm2": frozenset({2})}


def _only_loaded(roots: set[str], instructions: list[Instruction], module: Module | None = None,
                 depth: int = 4) -> bool:
    """Whether every use of the pointers ``roots`` (and of those derived from them) only reads memory; with
    ``module``, a call passing one to a function ``module`` defines (``depth`` calls deep) that only reads
    through that parameter, or to one of Numba's BLAS helpers where it only reads, reads too (a matrix
    product's operand: ``W @ X[i]`` in a ``prange``)."""
    if not roots:
        return False
    derived = derived_pointers(roots, instructions)
    for ins in instructions:
        if not derived & set(ins.operands()) or (ins.opcode in _POINTER_STEPS and ins.result in derived):
            continue
        if ins.opcode in ("load", "icmp"):  # a load's only local operand is its address
            continue
        if module is None or not _call_only_reads(ins, derived, module, depth):
            return False
    return True


def _call_only_reads(ins: Instruction, derived: set[str], module: Module, depth: int) -> bool:
    """Whether call ``ins`` only reads through the arguments of it that are in ``derived``."""
    call = ins.call()
    if call is None or ins.opcode != "call" or not call.callee.startswith("@"):
        return False
    passed = [k for k, value in enumerate(call.values) if value in derived]
    if not passed:  # (a derived pointer elsewhere in the call: an operand bundle, say)
        return False
    if call.callee in _READING_HELPERS:
        return set(passed) <= _READING_HELPERS[call.callee]
    callee = module.functions.get(call.callee) if depth > 0 else None
    if callee is None or callee.body is None or len(callee.parameters) != len(call.values):
        return False
    names = [parameter.name for parameter in callee.parameters]
    if any(names[k] is None for k in passed):
        return False
    return _only_loaded({names[k] for k in passed}, list(callee.instructions()), module, depth - 1)


def private_copy(layout: ArrayLayout, written: list[ArrayLayout]) -> tuple[str, str, str]:
    """IR for one thread's private copy of ``args[layout.index]``: ``(setup, prefix, release)``.

    ``setup`` (in the task's entry, before its rows) allocates and fills the copy: ``{prefix}.copy`` is
    the copy's counterpart of the argument's data pointer, and ``{prefix}.ok`` is false where the
    argument overlaps an array in ``written`` (a possible alias the body writes; its rows must then
    read the argument in place); ``release`` frees the copy. ``prefix`` is ``%priv{j}``.

    With ``layout.halo``, only this thread's rows of the array and the halo around them are copied (the
    task's ``%lo``, ``%hi`` and ``%go``: its first and last row of the schedule, and whether it has any;
    the loop's index values are the schedule's, ``[start, end]`` per row, as Numba's gufunc reads them),
    or the whole array where the halo would reach past either end (a negative index wraps around), and
    ``{prefix}.copy`` points where the array's data would be in the copy: possibly outside the copy's
    memory, so it and what is computed from it are never ``inbounds``.

    With ``layout.in_place``, nothing is copied: ``{prefix}.copy`` is the argument's own data pointer, and
    ``written`` must hold every other array of the loop (a shared element would be added into atomically
    through the other array and plainly through this one).
    """
    j = layout.index
    p = f"%priv{j}"
    if layout.in_place:
        lines = [f"  {p}.slot = getelementptr inbounds ptr, ptr %args, i64 {j}",
                 f"  {p}.data = load ptr, ptr {p}.slot, align 8", *_extent(layout, f"{p}."),
                 f"  {p}.src = getelementptr inbounds i8, ptr {p}.data, i64 {p}.lo",
                 f"  {p}.copy = getelementptr i8, ptr {p}.data, i64 0"]
        distinct = _distinct(layout, f"{p}.") if layout.strided else []
        return "\n".join(lines + distinct + _apart(p, written, f"{p}.distinct" if distinct else "true")) + "\n", p, ""
    align = layout.itemsize if layout.aligned else 1
    hint, size = FLOAT_TYPE_HINTS["double" if layout.itemsize == 8 else "float"]
    lines = [f"  {p}.slot = getelementptr inbounds ptr, ptr %args, i64 {j}",
             f"  {p}.data = load ptr, ptr {p}.slot, align 8"]
    lines += _extent(layout, f"{p}.", _halo_rows(layout, f"{p}.h.") if layout.halo else None)
    lines += [f"  {p}.src = getelementptr inbounds i8, ptr {p}.data, i64 {p}.lo",
              f"  {p}.alloc = add i64 {p}.bytes, 8",
              f"  {p}.mem = call noalias ptr @malloc(i64 {p}.alloc)",
              # Enzyme must know the copy copies floats to add its adjoint back (untyped: taken for integers)
              f"  call void @{hint}(ptr {p}.src, i64 {size})",
              f"  call void @{hint}(ptr {p}.mem, i64 {size})",
              # (aligned: Enzyme's adds of the copy's adjoint back are then atomic instructions, not libatomic calls)
              f"  call void @llvm.memcpy.p0.p0.i64(ptr align {align} {p}.mem, ptr align {align} {p}.src, "
              f"i64 {p}.bytes, i1 false)",
              f"  {p}.neg = sub i64 0, {p}.lo",
              f"  {p}.copy = getelementptr {'' if layout.halo else 'inbounds '}i8, ptr {p}.mem, i64 {p}.neg"]
    return "\n".join(lines + _apart(p, written)) + "\n", p, f"  call void @free(ptr nocapture {p}.mem)\n"


def tangent_copy(copy: tuple[str, str, str]) -> tuple[str, str, str]:
    r"""The tangents' counterpart of :func:`private_copy`'s ``copy`` in a forward task
    (:func:`pyjlad.openmp_tasks.task` with ``shadows``): the same IR reading the shadow arguments (``%dargs``)
    instead of the arguments' slots (the schedule's rows are the values'), its names ``%dpriv{j}...`` instead of
    ``%priv{j}...``.

    A constant array (its shadow the array itself) gets the value's copy as its tangent's.

    >>> setup = "  %priv1.slot = getelementptr inbounds ptr, ptr %args, i64 1\n  %priv1.copy = getelementptr i8, ptr %m\n"
    >>> print(tangent_copy((setup, "%priv1", ""))[0].rstrip())
      %dpriv1.slot = getelementptr inbounds ptr, ptr %dargs, i64 1
      %dpriv1.copy.own = getelementptr i8, ptr %m
      %dpriv1.same = icmp eq ptr %dpriv1.data, %priv1.data
      %dpriv1.copy = select i1 %dpriv1.same, ptr %priv1.copy, ptr %dpriv1.copy.own
    """
    setup, prefix, release = copy
    tangent = "%d" + prefix[1:]

    def renamed(text: str) -> str:
        return text.replace(f"{prefix}.", f"{tangent}.").replace("ptr %args, i64 ", "ptr %dargs, i64 ")

    # A constant array's shadow is the array itself (runtime activity: pyjlad.parallel_derivatives): its
    # tangent copy is then the value's copy, so that the body's derivative still sees a constant.
    own = renamed(setup).replace(f"{tangent}.copy =", f"{tangent}.copy.own =")
    same = (f"  {tangent}.same = icmp eq ptr {tangent}.data, {prefix}.data\n"
            f"  {tangent}.copy = select i1 {tangent}.same, ptr {prefix}.copy, ptr {tangent}.copy.own\n")
    return own + same, tangent, renamed(release)


def _apart(p: str, others: list[ArrayLayout], also: str = "true") -> list[str]:
    """IR setting ``{p}.ok``: whether the bytes ``{p}.src`` to ``{p}.src + {p}.bytes`` overlap no array of ``others``
    and the ``i1`` value ``also`` is true."""
    lines = []
    ok = "true"
    for k, other in enumerate(others):
        q = f"{p}.w{k}."
        lines += [f"  {q}slot = getelementptr inbounds ptr, ptr %args, i64 {other.index}",
                  f"  {q}data = load ptr, ptr {q}slot, align 8"]
        lines += _extent(other, q)
        lines += [f"  {q}a = ptrtoint ptr {p}.src to i64", f"  {q}b = add i64 {q}a, {p}.bytes",
                  f"  {q}src = getelementptr inbounds i8, ptr {q}data, i64 {q}lo",
                  f"  {q}c = ptrtoint ptr {q}src to i64", f"  {q}d = add i64 {q}c, {q}bytes",
                  f"  {q}before = icmp ule i64 {q}b, {q}c", f"  {q}after = icmp ule i64 {q}d, {q}a",
                  f"  {q}apart = or i1 {q}before, {q}after", f"  {q}ok = and i1 {ok}, {q}apart"]
        ok = f"{q}ok"
    lines.append(f"  {p}.ok = and i1 {ok}, {also}")
    return lines


def _distinct(layout: ArrayLayout, p: str) -> list[str]:
    """IR setting ``{p}distinct``: whether the array's strides nest, C-like (each axis's stride at least the span
    of the axes after it) or F-like (of the axes before it), its elements then all distinct. Axes of one
    element or none are left out. Reads the dimensions and strides :func:`_extent` (prefix ``p``) loaded."""
    lines, nested = [], []
    orders = {"c": range(len(layout.dims) - 1, -1, -1), "f": range(len(layout.dims))}
    for name, order in orders.items():
        span, ok = str(layout.itemsize), "true"
        for k in order:
            q, r = f"{p}{k}.", f"{p}{name}{k}."
            lines += ["  " + line for line in (
                f"{r}neg = sub i64 0, {q}s", f"{r}below = icmp slt i64 {q}s, 0",
                f"{r}abs = select i1 {r}below, i64 {r}neg, i64 {q}s",
                f"{r}one = icmp sle i64 {q}n, 1", f"{r}wide = icmp sge i64 {r}abs, {span}",
                f"{r}fits = or i1 {r}one, {r}wide", f"{r}ok = and i1 {ok}, {r}fits",
                f"{r}more = select i1 {r}one, i64 0, i64 {q}m", f"{r}add = mul i64 {r}more, {r}abs",
                f"{r}span = add i64 {span}, {r}add")]
            span, ok = f"{r}span", f"{r}ok"
        nested.append(ok)
    lines.append(f"  {p}distinct = or i1 {nested[0]}, {nested[1]}")
    return lines


def _halo_rows(layout: ArrayLayout, h: str) -> tuple[list[str], str, str, str]:
    """IR for the rows of the first axis a thread reads with ``layout.halo`` (see :func:`private_copy`):
    ``(lines, first, last, none)``; ``none`` is true for a thread without rows (nothing to copy)."""
    below, above = layout.halo or (0, 0)
    lines = ["  " + line for line in (
        f"{h}sched = load ptr, ptr %args, align 8", f"{h}step = load i64, ptr %steps, align 8",
        f"{h}rlo = select i1 %go, i64 %lo, i64 0", f"{h}rhi = select i1 %go, i64 %hi, i64 0",
        f"{h}ao = mul i64 {h}rlo, {h}step", f"{h}ap = getelementptr i8, ptr {h}sched, i64 {h}ao",
        f"{h}start = load i64, ptr {h}ap, align 8",
        f"{h}bo = mul i64 {h}rhi, {h}step", f"{h}bo.end = add i64 {h}bo, 8",
        f"{h}bp = getelementptr i8, ptr {h}sched, i64 {h}bo.end", f"{h}end = load i64, ptr {h}bp, align 8",
        f"{h}first = sub i64 {h}start, {below}", f"{h}last = add i64 {h}end, {above}",
        f"{h}none = xor i1 %go, true")]
    return lines, f"{h}first", f"{h}last", f"{h}none"


def _extent(layout: ArrayLayout, p: str, rows: tuple[list[str], str, str, str] | None = None) -> list[str]:
    """IR computing ``{p}lo`` (bytes from the data pointer to the lowest element) and ``{p}bytes`` (the span):
    of the whole array, or with ``rows`` (:func:`_halo_rows`) of those rows of its first axis where they
    lie within it."""
    lines = []
    lo, hi, empty = "0", str(layout.itemsize), "false"
    for k, (d, s) in enumerate(zip(layout.dims, layout.steps)):
        q = f"{p}{k}."
        lines += [f"  {q}dp = getelementptr inbounds i64, ptr %dims, i64 {d}", f"  {q}n = load i64, ptr {q}dp, align 8",
                  f"  {q}sp = getelementptr inbounds i64, ptr %steps, i64 {s}", f"  {q}s = load i64, ptr {q}sp, align 8",
                  f"  {q}m = add i64 {q}n, -1"]
        if k == 0 and rows is not None:
            row_lines, first, last, none = rows
            lines += row_lines + ["  " + line for line in (
                f"{q}in.a = icmp sge i64 {first}, 0", f"{q}in.b = icmp sle i64 {last}, {q}m",
                f"{q}in = and i1 {q}in.a, {q}in.b", f"{q}first = select i1 {q}in, i64 {first}, i64 0",
                f"{q}last = select i1 {q}in, i64 {last}, i64 {q}m",
                f"{q}xa = mul i64 {q}first, {q}s", f"{q}x = mul i64 {q}last, {q}s",
                f"{q}neg = icmp slt i64 {q}x, {q}xa", f"{q}lo = select i1 {q}neg, i64 {q}x, i64 {q}xa",
                f"{q}hi = select i1 {q}neg, i64 {q}xa, i64 {q}x", f"{q}z0 = icmp sle i64 {q}n, 0",
                f"{q}z = or i1 {q}z0, {none}")]
        else:
            lines += [f"  {q}x = mul i64 {q}m, {q}s",
                      f"  {q}neg = icmp slt i64 {q}x, 0", f"  {q}lo = select i1 {q}neg, i64 {q}x, i64 0",
                      f"  {q}hi = select i1 {q}neg, i64 0, i64 {q}x", f"  {q}z = icmp sle i64 {q}n, 0"]
        lines += [f"  {q}lo.t = add i64 {lo}, {q}lo", f"  {q}hi.t = add i64 {hi}, {q}hi",
                  f"  {q}e = or i1 {empty}, {q}z"]
        lo, hi, empty = f"{q}lo.t", f"{q}hi.t", f"{q}e"
    lines += [f"  {p}span = sub i64 {hi}, {lo}", f"  {p}bytes = select i1 {empty}, i64 0, i64 {p}span",
              f"  {p}lo = select i1 {empty}, i64 0, i64 {lo}"]
    return lines
