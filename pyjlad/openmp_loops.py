"""Numba's parallel loops rewritten as OpenMP parallel loops, which Enzyme differentiates in parallel.

A ``parallel=True`` function runs each parfor by calling its threading layer,
``numba_parallel_for(gufunc, args, dims, steps, data, inner_ndim, array_count, num_threads)``,
through a symbol Enzyme cannot see into. The layer runs ``gufunc`` once per row ``r`` of the
schedule (``dims[0]`` rows) with ``count = dims`` (``count[0] = 1``) and
``args'[j] = args[j] + r * steps[j]`` (Numba's ``omppool.cpp``). :func:`openmp_parallel_loops`
replaces each such call by ``__kmpc_fork_call`` of a task that runs the same rows over OpenMP's
static schedule (``__kmpc_for_static_init_8``), which Enzyme v0.0.289 differentiates into a
parallel reverse loop. Numba's ``get_thread_id`` (the slot of a ``prange`` reduction) becomes
``omp_get_thread_num``; the GIL release around the call is dropped (a derivative runs without
Python). Numba's schedule (``allocate_sched``) is allocated as pyjlad's runtime allocates arrays,
so Enzyme keeps it alive until the reverse sweep has read it. The runtime is LLVM's OpenMP library (:mod:`pyjlad.openmp`).

A call this pass does not recognize (a gufunc called through a pointer, counts that are not
constants) is left alone and reported, so the caller can fall back to the serial derivative.

Examples
--------
>>> text = openmp_parallel_loops(EXAMPLE)
>>> "__kmpc_fork_call" in text and "define internal void @pyjlad.omp.task.0(" in text
True
>>> unrecognized_parallel_calls(text)
0
"""

from __future__ import annotations

from collections.abc import Mapping

from . import private_bodies
from .errors import IRLookupError, IRParseError
from .ir import Module, decode_name, parse
from .ir.edit import type_hint_declaration
from .ir.instructions import parse_instruction
from .ir.lexer import split_top_level
from .ir.rewrite import drop_debug_attachments
from .openmp_tasks import EDGES, INTERIOR, forward_fork, split_definition, split_rows, task, typed_arguments
from .private_adjoints import LoopLayout, declarations, private_copy, read_only_arguments

__all__ = ["EXAMPLE", "FAILED_FLAG", "declared_name", "defined_or_declared", "openmp_parallel_loops",
           "parallel_call_count", "unrecognized_parallel_calls"]

_CALL = "call void @numba_parallel_for("
#: The flag a loop's body sets when it raises (the status the function returns reports it).
FAILED_FLAG = "@pyjlad.omp.failed"
#: How a rewritten loop is called: the fork itself, or (forward mode) its wrapper.
_FORK_MARKS = ("@__kmpc_fork_call(ptr @pyjlad.omp.loc", "call void @pyjlad.omp.fork.")
_GIL_CALLS = ("@numba_gil_ensure(", "@numba_gil_release(", "@PyEval_SaveThread(", "@PyEval_RestoreThread(")

#: A minimal module in the shape Numba emits (used by the doctests and the tests).
EXAMPLE = """define void @kernel(ptr %args, ptr %dims, ptr %steps, ptr %data) {
entry:
  ret void
}

define i32 @caller(ptr %a, ptr %d, ptr %s) {
entry:
  %g = alloca i32, align 4
  call void @numba_gil_ensure(ptr %g)
  %t = call ptr @PyEval_SaveThread()
  %n = call i64 @get_num_threads()
  call void @numba_parallel_for(ptr nonnull @kernel, ptr %a, ptr %d, ptr %s, ptr null, i64 2, i64 2, i64 %n)
  call void @PyEval_RestoreThread(ptr %t)
  call void @numba_gil_release(ptr %g)
  ret i32 0
}

declare i64 @get_num_threads()
declare void @numba_parallel_for(ptr, ptr, ptr, ptr, ptr, i64, i64, i64)
declare void @numba_gil_ensure(ptr)
declare void @numba_gil_release(ptr)
declare ptr @PyEval_SaveThread()
declare void @PyEval_RestoreThread(ptr)
"""

_DECLARATIONS = """
%pyjlad.omp.ident = type { i32, i32, i32, i32, ptr }
@pyjlad.omp.failed = internal global i32 0, align 4
@pyjlad.omp.where = private unnamed_addr constant [23 x i8] c";unknown;unknown;0;0;;\\00", align 1
@pyjlad.omp.loc = private unnamed_addr constant %pyjlad.omp.ident { i32 0, i32 2, i32 0, i32 22, ptr @pyjlad.omp.where }, align 8
declare void @__kmpc_fork_call(ptr, i32, ptr, ...)
declare void @__kmpc_for_static_init_8(ptr, i32, i32, ptr, ptr, ptr, ptr, i64, i64)
declare void @__kmpc_for_static_fini(ptr, i32)
declare void @omp_set_num_threads(i32)
declare i32 @omp_get_thread_num()
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare void @NRT_decref(ptr)
"""

_PRIVATE_DECLARATIONS = "\n".join(["", *declarations(), ""])

_FORWARD_DECLARATIONS = f"""
declare void @__enzyme_fwddiff_pyjlad_omp(...)
{type_hint_declaration("__enzyme_pointer")}
{type_hint_declaration("__enzyme_integer")}
@enzyme_dup = external global i32
@enzyme_const = external global i32
"""


def _split_arguments(text: str) -> list[str]:
    """The comma-separated arguments of a call (no nested parentheses in Numba's ``numba_parallel_for`` calls)."""
    return [part.strip() for part in text.split(",")]


def _private_copies(module: Module | None, kernel: str, layout: LoopLayout | None) -> dict[int, tuple[str, str, str]]:
    """The private copies (:mod:`pyjlad.private_adjoints`) of the arguments of loop body ``kernel`` worth one."""
    if layout is None or not layout.complete or not layout.candidates:
        return {}
    read_only = read_only_arguments(module, kernel, [a.index for a in layout.arrays]) if module is not None else set()
    written = [a for a in layout.arrays if a.index not in read_only]
    return {a.index: private_copy(a, [b for b in layout.arrays if b.index != a.index] if a.in_place else written)
            for a in layout.candidates if a.index in read_only}


def _split_halo(layout: LoopLayout | None, private: Mapping[int, tuple[str, str, str]]) -> tuple[int, int] | None:
    """``(below, above)``: the most rows below and above its own that the loop's body reads of an array it reads
    in place near its own rows (a stencil's), whose rows are then split (:mod:`pyjlad.openmp_tasks`); None if
    it reads none such."""
    halos = [a.halo for a in (layout.candidates if layout else ()) if a.in_place and a.halo and a.index in private]
    if not halos:
        return None
    return max(b for b, _ in halos), max(a for _, a in halos)


def _rewrite_call(line: str, index: int, forward: bool = False,
                  private: Mapping[int, tuple[str, str, str]] | None = None,
                  halo: tuple[int, int] | None = None) -> tuple[str, str] | None:
    """``(replacement lines, task definitions)`` for one ``numba_parallel_for`` call, or None if unrecognized.
    With ``halo`` (:func:`_split_halo`, with ``private``), two parallel loops over the parts of the schedule's
    rows (:func:`pyjlad.openmp_tasks.split_rows`); in forward mode, each fork wrapped with its derivative."""
    start = line.index(_CALL) + len(_CALL)
    end = line.rfind(")")
    args = _split_arguments(line[start:end])
    if len(args) != 8 or line[end + 1:].strip():
        return None
    kernel = args[0].split()[-1]
    counts = [a.split() for a in args[5:7]]
    if not kernel.startswith("@") or any(len(c) != 2 or c[0] != "i64" or not c[1].isdigit() for c in counts):
        return None
    ndim, narrays = int(counts[0][1]), int(counts[1][1])
    if not 0 <= ndim < 64 or not 0 < narrays < 256:
        return None
    threads = args[7].split()
    if len(threads) != 2 or threads[0] != "i64":
        return None
    indent = line[: len(line) - len(line.lstrip())]
    name = f"@pyjlad.omp.task.{index}"
    shared = ", ".join(a if a.split()[0] == "ptr" else "" for a in args[1:5])
    if "" in shared.split(", "):
        return None
    n32 = f"%pyjlad.omp.threads.{index}"
    if halo is not None and forward:  # the forks' wrappers (forward_fork), the parts after the operands in the pack
        wrapper = f"@pyjlad.omp.fork.{index}"
        fork = split_rows(index, indent, shared, halo, (f"{wrapper}.interior", wrapper), f"%pyjlad.omp.pack.{index}")
    elif halo is not None:
        fork = split_rows(index, indent, shared, halo, (f"{name}.interior", name))
    elif forward:  # the fork's operands packed behind one pointer (see forward_fork)
        pack = f"%pyjlad.omp.pack.{index}"
        fork = "".join(f"{indent}{pack}.{k} = getelementptr inbounds ptr, ptr {pack}, i64 {k}\n"
                       f"{indent}store ptr {value.split()[-1]}, ptr {pack}.{k}, align 8\n"  # attributes dropped
                       for k, value in enumerate(shared.split(", ")))
        fork += f"{indent}call void @pyjlad.omp.fork.{index}(ptr {pack})"
    else:
        fork = f"{indent}call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 4, ptr {name}, {shared})"
    replacement = (f"{indent}{n32} = trunc i64 {threads[1]} to i32\n"
                   f"{indent}call void @omp_set_num_threads(i32 {n32})\n"
                   f"{fork}")
    if halo is not None and forward:
        return replacement, (task(f"{name}.interior", kernel, ndim, narrays, parts=INTERIOR)
                             + task(name, kernel, ndim, narrays, parts=EDGES)
                             + forward_fork(index, kernel, ndim, narrays, private=private,
                                            private_kernel=private_body(index), parts=INTERIOR)
                             + forward_fork(index, kernel, ndim, narrays, parts=EDGES))
    if halo is not None:
        return replacement, (task(f"{name}.interior", kernel, ndim, narrays, private=private,
                                  private_kernel=private_body(index), parts=INTERIOR)
                             + task(name, kernel, ndim, narrays, parts=EDGES))
    if forward:
        return replacement, task(name, kernel, ndim, narrays) + forward_fork(
            index, kernel, ndim, narrays, private=private, private_kernel=private_body(index) if private else None)
    return replacement, task(name, kernel, ndim, narrays, private=private,
                             private_kernel=private_body(index) if private else None)


def parallel_call_count(text: str) -> int:
    """How many calls of Numba's threading layer (``numba_parallel_for``) ``text`` holds.

    >>> parallel_call_count(EXAMPLE)
    1
    """
    return text.count(_CALL)


def unrecognized_parallel_calls(text: str) -> int:
    """How many ``numba_parallel_for`` calls :func:`openmp_parallel_loops` left in ``text`` (0: all rewritten).

    >>> unrecognized_parallel_calls(EXAMPLE)
    1
    """
    return parallel_call_count(text)


def openmp_parallel_loops(text: str, forward: bool = False, layouts: Mapping[str, LoopLayout] | None = None,
                          private_forward: bool = False) -> str:
    """``text`` (a module's LLVM IR) with each recognized ``numba_parallel_for`` call made an OpenMP parallel loop.

    ``forward``: for Enzyme's forward mode, each fork in a function of its own whose derivative
    is registered (:func:`pyjlad.openmp_tasks.forward_fork`).

    ``layouts``: the array layout of each loop's body, by its symbol
    (:func:`pyjlad.private_adjoints.recording_loop_layouts`); in reverse mode, each thread then reads
    the arrays every iteration reads from a private copy (:mod:`pyjlad.private_adjoints`). With ``forward``
    and ``private_forward`` (a Hessian-vector product, whose reverse sweep differentiates the forward
    tasks), each forward task does so too, reading its tangents from private copies as well, and a stencil's
    rows are split as in reverse mode, each of the two forks wrapped (:func:`pyjlad.openmp_tasks.forward_fork`
    with ``parts``).

    Unchanged if it holds no such call. Calls of unrecognized shape are left as they were
    (:func:`unrecognized_parallel_calls` counts them).

    >>> caller = openmp_parallel_loops(EXAMPLE).split("define i32 @caller")[1].split("}")[0]
    >>> print(caller.strip())
    (ptr %a, ptr %d, ptr %s) {
    entry:
      store atomic i32 0, ptr @pyjlad.omp.failed unordered, align 4
      %g = alloca i32, align 4
      %n = call i64 @get_num_threads()
      %pyjlad.omp.threads.0 = trunc i64 %n to i32
      call void @omp_set_num_threads(i32 %pyjlad.omp.threads.0)
      call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 4, ptr @pyjlad.omp.task.0, ptr %a, ptr %d, ptr %s, ptr null)
      %pyjlad.omp.failed.13.7 = load atomic i32, ptr @pyjlad.omp.failed unordered, align 4
      %pyjlad.omp.raised.13.7 = icmp ne i32 %pyjlad.omp.failed.13.7, 0
      %pyjlad.omp.status.13.7 = select i1 %pyjlad.omp.raised.13.7, i32 1, i32 0
      ret i32 %pyjlad.omp.status.13.7
    """
    if _CALL not in text:
        return text
    text = drop_debug_attachments(text)  # (debug=True: the lines recognized here carry none)
    out: list[str] = []
    tasks: list[str] = []
    schedules: set[str] = set()
    privatized: dict[int, tuple[str, list[int]]] = {}  # the loops with private copies: body, copied arguments
    split = False  # whether a loop's rows are split (pyjlad.openmp_tasks.split_rows)
    hints: set[str] = set()  # Enzyme's type annotations the callers use (pyjlad.openmp_tasks.typed_arguments)
    parsed: Module | None = None
    function = ""
    entry_at = 0  # where the current function's entry block starts in ``out`` (forward mode's packs go there)
    for line in text.split("\n"):
        if line.startswith("define "):
            function = line.split("@", 1)[1].split("(")[0] if "@" in line else ""
            entry_at = len(out) + 1
        elif entry_at == len(out) and line.endswith(":") and not line.startswith(" "):
            entry_at += 1  # after the entry block's label
        if _CALL in line:
            kernel = line[line.index(_CALL) + len(_CALL):].split(",")[0].split()[-1]
            found = layouts.get(kernel.lstrip("@").strip('"')) if layouts else None
            layout = found if not forward or private_forward else None
            if layout is not None and layout.candidates and parsed is None:
                parsed = parse(text, strict=False)  # once per module, for every loop's body
            private = _private_copies(parsed, kernel, layout) if layout is not None else {}
            halo = _split_halo(layout, private)
            rewritten = _rewrite_call(line, len(tasks), forward, private, halo)
            if rewritten is not None:
                if private:
                    privatized[len(tasks)] = (kernel, sorted(private))
                split |= halo is not None
                if forward:  # (a split loop's pack holds its parts too)
                    out.insert(entry_at, f"  %pyjlad.omp.pack.{len(tasks)} = alloca [{4 if halo is None else 5} x ptr], "
                                         "align 8")
                    out.extend(_integer_arrays(out[entry_at - 1:], line))
                if found is not None and any(a.element for a in found.arrays):  # Enzyme learns their types
                    args = _split_arguments(line[line.index(_CALL) + len(_CALL):line.rfind(")")])[1]
                    lines, used = typed_arguments(len(tasks), line[: len(line) - len(line.lstrip())], args,
                                                  found.arrays)
                    out.append(lines)
                    hints |= used
                out.append(rewritten[0])
                tasks.append(rewritten[1])
                continue
        elif any(g in line for g in _GIL_CALLS) and " call " in f" {line.strip()} ":
            continue  # the GIL release around Numba's threading layer: a derivative runs without Python
        elif "call void @numba_do_raise(" in line or (function.startswith("__gufunc__") and
                                                       line.strip() == "call void @PyErr_Clear()"):
            # an exception in a loop's body (Numba's gufunc wrapper clears Python's error, then builds and
            # raises the exception): reported through the status instead
            out.append(f"  store atomic i32 1, ptr {FAILED_FLAG} unordered, align 4")
            continue
        edited = _threads_and_schedule(line, schedules)
        if edited is None:
            return text
        out.append(edited)
    if not tasks:
        return text
    reported = _report_failures("\n".join(out).split("\n"))
    if reported is None:
        return text
    body = "\n".join(reported)
    bodies = _private_bodies(body, privatized)
    if bodies is None:
        return text
    wanted = (_DECLARATIONS + (_FORWARD_DECLARATIONS if forward else "") + (_PRIVATE_DECLARATIONS if privatized else "")
              + "".join(f"\n{type_hint_declaration(hint)}" for hint in sorted(hints)))
    present = defined_or_declared(body)
    declared = [d for d in wanted.strip().split("\n") if d.strip() and declared_name(d) not in present]
    helpers = [split_definition()] if split else []
    return body.rstrip("\n") + "\n\n" + "\n".join([*tasks, *bodies, *helpers]) + "\n" + "\n".join(declared) + "\n"


def _integer_arrays(function: list[str], line: str) -> list[str]:
    """Lines telling Enzyme that the loop's shape and steps (the ``dims`` and ``steps`` operands of the
    ``numba_parallel_for`` call ``line``), arrays of ``i64`` the caller ``function`` (its lines so far) allocates,
    hold integers.

    In forward mode, the fork's operands are packed behind one pointer whose shadow Enzyme builds
    (:func:`pyjlad.openmp_tasks.forward_fork`), so it makes shadows of these arrays too; where LLVM merged
    Numba's stores of zero steps into a ``memset``, Enzyme could not type that memset's shadow ("Cannot deduce
    type of memset") in a Hessian-vector product (a reverse sweep over the forward derivative) and retried with
    loose types. Operands not allocated so in ``function`` get no hint."""
    allocated = {}  # the caller's allocas: their results and the type each allocates
    for item in function:
        instruction = parse_instruction(item) if " alloca " in item else None
        if instruction is not None and instruction.opcode == "alloca" and instruction.result is not None:
            allocated[instruction.result] = "".join(t.text for t in split_top_level(instruction.after_opcode())[0])
    operands = _split_arguments(line[line.index(_CALL) + len(_CALL):line.rfind(")")])[2:4]
    indent = line[: len(line) - len(line.lstrip())]
    hints = []
    for name in (operand.split()[-1] for operand in operands):
        shape = allocated.get(name, "").strip().removeprefix("[").removesuffix(" x i64]")
        if shape.isdigit():
            hints.append(f"{indent}call void @__enzyme_integer(ptr {name}, i64 {8 * int(shape)})")
    return hints


def private_body(index: int) -> str:
    """The symbol of loop ``index``'s body copy its private rows run (see :mod:`pyjlad.private_bodies`)."""
    return f"@pyjlad.omp.body.{index}"


def _private_bodies(text: str, loops: Mapping[int, tuple[str, list[int]]]) -> list[str] | None:
    """For each loop ``index`` whose body ``loops[index][0]`` reads copies of ``args[j]`` (``j`` in
    ``loops[index][1]``): the body's copy :func:`private_body` (:func:`pyjlad.private_bodies.private_body`);
    None if a body is not a definition of ``text``."""
    if not loops:
        return []
    module = parse(text, strict=False)
    copies = []
    for index, (kernel, slots) in loops.items():
        try:
            function = module.function(decode_name(kernel))
        except (IRParseError, IRLookupError):
            return None
        if function.body is None or not function.parameters or function.parameters[0].name is None:
            return None
        copies.append(private_bodies.private_body(function, private_body(index), slots))
    return copies


def _report_failures(lines: list[str]) -> list[str] | None:
    """``lines`` with each function that runs a parallel loop clearing the failure flag on entry and
    returning 1 where it was set, else its status (an exception raised in a loop's body, which Numba's gufunc
    wrapper raises in Python instead of returning, makes the status 1: pyjlad then calls the function
    itself for the exception). None if such a function does not return Numba's ``i32`` status.

    The status is chosen with ``icmp`` and ``select``, not an ``or`` of the two: Enzyme's type analysis
    cannot type an ``or`` of a value loaded from an untyped global ("cannot handle unknown binary operator")
    and stopped on it, and pyjlad then built every parallel reverse, forward and Hessian-vector derivative
    with loose types (tests/test_parallel_types.py).

    The flag is read and written with ``unordered`` atomics: threads only ever store 1 into it, and it is
    read after the fork has joined them, so no ordering is needed. A ``monotonic`` access would be worse
    than slow: LLVM's alias analysis counts any atomic stronger than ``unordered`` as writing all memory, so
    Enzyme took the body's ``store`` of the flag (or the caller's ``load`` of it after the loop) to
    overwrite every array the loop reads and kept each value read from them on the tape (a softmax
    classifier's weights, read ``k * d`` times per sample)."""
    out: list[str] = []
    start = 0
    for k, line in enumerate(lines):
        if line.startswith("define "):
            start = len(out)
        out.append(line)
        if line != "}" or not any(_FORK_MARKS[0] in x or _FORK_MARKS[1] in x for x in out[start:]):
            continue
        header = out[start]
        if "@" not in header or not header[:header.index("@")].endswith(" i32 ") or not header.rstrip().endswith("{"):
            return None
        body = out[start + 1:]
        first = 1 if body and body[0].strip().endswith(":") else 0
        edited = [*body[:first], f"  store atomic i32 0, ptr {FAILED_FLAG} unordered, align 4", *body[first:]]
        for j, item in enumerate(edited):
            words = item.split(", !")[0].split()
            if words[:2] == ["ret", "i32"] and len(words) == 3:
                edited[j] = (f"  %pyjlad.omp.failed.{k}.{j} = load atomic i32, ptr {FAILED_FLAG} unordered, align 4\n"
                             f"  %pyjlad.omp.raised.{k}.{j} = icmp ne i32 %pyjlad.omp.failed.{k}.{j}, 0\n"
                             f"  %pyjlad.omp.status.{k}.{j} = select i1 %pyjlad.omp.raised.{k}.{j}, i32 1, i32 {words[2]}\n"
                             f"  ret i32 %pyjlad.omp.status.{k}.{j}")
        out[start + 1:] = edited
    return out


def declared_name(line: str) -> str:
    """The ``@`` symbol a ``declare`` line or a global's definition names (``""`` for other lines)."""
    if line.startswith(("declare ", "define ")):
        return line.split("(")[0].split()[-1]
    if line.startswith("@"):
        return line.split("=")[0].strip()
    return ""


def defined_or_declared(text: str) -> set[str]:
    """The ``@`` symbols ``text`` declares or defines (functions and globals)."""
    return {name for name in map(declared_name, text.split("\n")) if name}


def _threads_and_schedule(line: str, schedules: set[str]) -> str | None:
    """``line`` with Numba's thread id made OpenMP's and its schedule buffer made a Numba array's memory.

    The schedule is allocated as pyjlad's runtime allocates arrays (``NRT_MemInfo_alloc_aligned``)
    and released by ``NRT_decref``, so Enzyme keeps it alive until the reverse sweep has read the
    row bounds the gufunc recomputes there (released with ``free`` right after the loop, the reverse
    sweep read freed memory and the gradient came out zero). None if a ``deallocate_sched`` names a
    schedule not allocated here (the module is then left alone).
    """
    stripped = line.strip().split(", !")[0]  # metadata attachments (``, !noalias !27``) dropped
    indent = line[: len(line) - len(line.lstrip())]
    if "@get_thread_id()" in line and stripped.startswith("%") and stripped.endswith("@get_thread_id()"):
        name = stripped.split("=")[0].strip()
        return (f"{indent}{name}.omp = call i32 @omp_get_thread_num()\n"
                f"{indent}{name} = sext i32 {name}.omp to i64")
    if " call ptr @allocate_sched(i64 " in line and stripped.startswith("%") and stripped.endswith(")"):
        name = stripped.split("=")[0].strip()
        entries = stripped.split("@allocate_sched(i64 ")[1][:-1].strip()
        schedules.add(name)
        return (f"{indent}{name}.bytes = shl i64 {entries}, 3\n"
                f"{indent}{name}.mi = call ptr @NRT_MemInfo_alloc_aligned(i64 {name}.bytes, i32 32)\n"
                f"{indent}{name}.field = getelementptr i8, ptr {name}.mi, i64 24\n"
                f"{indent}{name} = load ptr, ptr {name}.field, align 8")
    if "call void @deallocate_sched(ptr " in line:
        name = stripped.split("@deallocate_sched(ptr ")[1].rstrip(")").strip()
        if name not in schedules:
            return None
        return f"{indent}call void @NRT_decref(ptr {name}.mi)"
    if "@get_thread_id(" in line or "@allocate_sched(" in line:
        return None if not stripped.startswith("declare") else line
    return line
