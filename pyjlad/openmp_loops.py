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
from .ir.analysis import reachable
from .ir.rewrite import drop_debug_attachments
from .private_adjoints import LoopLayout, declarations, private_copy, read_only_arguments

__all__ = ["EXAMPLE", "blas_in_parallel_loops", "openmp_parallel_loops", "parallel_call_count",
           "unrecognized_parallel_calls"]

_CALL = "call void @numba_parallel_for("
_FAILED = "@pyjlad.omp.failed"
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

_FORWARD_DECLARATIONS = """
declare void @__enzyme_fwddiff_pyjlad_omp(...)
@enzyme_dup = external global i32
@enzyme_const = external global i32
"""


def _task(name: str, kernel: str, ndim: int, narrays: int, shadows: bool = False,
          private: Mapping[int, tuple[str, str, str]] | None = None, private_kernel: str | None = None) -> str:
    """The OpenMP task running ``kernel`` over this thread's static share of the schedule's rows.

    ``private``: for argument ``j``, this thread's private copy of it (``(setup, prefix, release)``
    of :func:`pyjlad.private_adjoints.private_copy`). Where every copy was made (none overlapped an
    array the body writes, and none passed in place overlapped any other array), the rows run
    ``private_kernel`` instead of ``kernel``: the body's copy that takes the copies' row pointers as
    parameters after its own (:mod:`pyjlad.private_bodies`); no copies are made without it.

    With ``shadows``, the forward-mode derivative of that task: it takes the shadow of the argument
    array after the arguments (``%dargs``) and runs Enzyme's forward derivative of ``kernel`` on each
    row, the rows' argument pointers duplicated (see :func:`_forward_fork`).
    """
    count = [f"  %c{k} = getelementptr inbounds i64, ptr %count, i64 {k}\n"
             f"  %dp{k} = getelementptr inbounds i64, ptr %dims, i64 {k}\n"
             f"  %dv{k} = load i64, ptr %dp{k}, align 8\n"
             f"  store i64 {'1' if k == 0 else f'%dv{k}'}, ptr %c{k}, align 8\n" for k in range(ndim + 1)]
    arrays = [f"  %ap{j} = getelementptr inbounds ptr, ptr %args, i64 {j}\n"
              f"  %av{j} = load ptr, ptr %ap{j}, align 8\n"
              f"  %sp{j} = getelementptr inbounds i64, ptr %steps, i64 {j}\n"
              f"  %sv{j} = load i64, ptr %sp{j}, align 8\n"
              f"  %off{j} = mul i64 %r, %sv{j}\n"
              f"  %nv{j} = getelementptr inbounds i8, ptr %av{j}, i64 %off{j}\n"
              f"  %np{j} = getelementptr inbounds ptr, ptr %rowargs, i64 {j}\n"
              f"  store ptr %nv{j}, ptr %np{j}, align 8\n" for j in range(narrays)]
    private = private if private_kernel else {}  # the copies are read only through private_kernel
    for j, (_, prefix, _) in private.items():  # the copy's row pointer, passed to private_kernel
        arrays[j] += f"  %pnv{j} = getelementptr i8, ptr {prefix}.copy, i64 %off{j}\n"
    setup = "".join(p[0] for p in private.values())
    release = "".join(p[2] for p in private.values())
    if private:  # every copy made: none overlaps an array the body writes
        prefixes = [prefix for _, prefix, _ in private.values()]
        setup += "".join(f"  %private.{k} = and i1 {'true' if k == 0 else f'%private.{k - 1}'}, {m}.ok\n"
                         for k, m in enumerate(prefixes))
        flag = f"%private.{len(prefixes) - 1}"
        extra = "".join(f", ptr %pnv{j}" for j in private)
    if shadows:
        arrays += [f"  %dap{j} = getelementptr inbounds ptr, ptr %dargs, i64 {j}\n"
                   f"  %dav{j} = load ptr, ptr %dap{j}, align 8\n"
                   f"  %dnv{j} = getelementptr inbounds i8, ptr %dav{j}, i64 %off{j}\n"
                   f"  %dnp{j} = getelementptr inbounds ptr, ptr %rowdargs, i64 {j}\n"
                   f"  store ptr %dnv{j}, ptr %dnp{j}, align 8\n" for j in range(narrays)]
        call = (f"  call void (...) @__enzyme_fwddiff_pyjlad_omp(ptr {kernel}, ptr @enzyme_dup, ptr %rowargs, ptr %rowdargs, "
                "ptr @enzyme_const, ptr %count, ptr @enzyme_const, ptr %steps, ptr @enzyme_const, ptr %data)\n")
    elif private:
        call = (f"  br i1 {flag}, label %row.private, label %row.shared\n"
                "row.private:\n"
                f"  call void {private_kernel}(ptr %rowargs, ptr %count, ptr %steps, ptr %data{extra})\n"
                "  br label %row.next\n"
                "row.shared:\n"
                f"  call void {kernel}(ptr %rowargs, ptr %count, ptr %steps, ptr %data)\n"
                "  br label %row.next\n"
                "row.next:\n")
    else:
        call = f"  call void {kernel}(ptr %rowargs, ptr %count, ptr %steps, ptr %data)\n"
    return (
        f"define internal void {name}(ptr noalias %gtid, ptr noalias %btid, ptr %args, "
        f"{'ptr %dargs, ' if shadows else ''}ptr %dims, ptr %steps, ptr %data) {{\n"
        "entry:\n"
        f"  %count = alloca [{ndim + 1} x i64], align 8\n"
        f"  %rowargs = alloca [{narrays} x ptr], align 8\n"
        + (f"  %rowdargs = alloca [{narrays} x ptr], align 8\n" if shadows else "") +
        "  %lb = alloca i64, align 8\n  %ub = alloca i64, align 8\n  %st = alloca i64, align 8\n"
        "  %last = alloca i32, align 4\n"
        "  %rows = load i64, ptr %dims, align 8\n"
        "  %any = icmp sgt i64 %rows, 0\n"
        "  br i1 %any, label %init, label %exit\n"
        "init:\n"
        "  %tid = load i32, ptr %gtid, align 4\n"
        "  %top = add i64 %rows, -1\n"
        "  store i64 0, ptr %lb, align 8\n  store i64 %top, ptr %ub, align 8\n  store i64 1, ptr %st, align 8\n"
        "  store i32 0, ptr %last, align 4\n"
        "  call void @__kmpc_for_static_init_8(ptr @pyjlad.omp.loc, i32 %tid, i32 34, ptr %last, ptr %lb, "
        "ptr %ub, ptr %st, i64 1, i64 1)\n"
        "  %lo = load i64, ptr %lb, align 8\n"
        "  %hi0 = load i64, ptr %ub, align 8\n"
        "  %over = icmp sgt i64 %hi0, %top\n"
        "  %hi = select i1 %over, i64 %top, i64 %hi0\n"
        "  %go = icmp sle i64 %lo, %hi\n"
        + setup +
        "  br i1 %go, label %row, label %fini\n"
        "row:\n"
        f"  %r = phi i64 [ %lo, %init ], [ %next, {'%row.next' if private else '%row'} ]\n"
        + "".join(count) + "".join(arrays) + call +
        "  %next = add nsw i64 %r, 1\n"
        "  %more = icmp sle i64 %next, %hi\n"
        "  br i1 %more, label %row, label %fini\n"
        "fini:\n"
        "  call void @__kmpc_for_static_fini(ptr @pyjlad.omp.loc, i32 %tid)\n"
        + release +
        "  br label %exit\n"
        "exit:\n"
        "  ret void\n"
        "}\n"
    )


def _forward_fork(index: int, kernel: str, ndim: int, narrays: int) -> str:
    """The fork of loop ``index`` as a function of its own, with its forward-mode derivative registered.

    Enzyme v0.0.289 cannot differentiate ``__kmpc_fork_call`` in forward mode (an assertion in
    ``AdjointGenerator::visitOMPCall``). Forward mode needs nothing of OpenMP's semantics: the
    tangent of a parallel loop is the same loop over (value, tangent) pairs, each row's tangents
    written by the thread that writes its values. So the forward derivative of the fork
    (``__enzyme_register_derivative_``) forks a task running Enzyme's forward derivative of the
    loop's body on each row, the argument array's shadow passed along with it. The fork's operands
    reach it packed behind one pointer: Enzyme v0.0.289 uses a registered forward derivative only
    where every pointer argument of the call is active, and the loop's shape and steps are not.
    The registration is ``weak_odr``: ``llvm-link`` (a module linked with LAPACK's) drops unreferenced
    internal globals.
    """
    fork, task = f"@pyjlad.omp.fork.{index}", f"@pyjlad.omp.task.{index}"
    unpack = "".join(f"  %{name}.at = getelementptr inbounds ptr, ptr %pack, i64 {k}\n"
                     f"  %{name} = load ptr, ptr %{name}.at, align 8\n"
                     for k, name in enumerate(("args", "dims", "steps", "data")))
    return (
        f"define internal void {fork}(ptr %pack) noinline {{\n"
        "entry:\n" + unpack +
        f"  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 4, ptr {task}, ptr %args, "
        "ptr %dims, ptr %steps, ptr %data)\n"
        "  ret void\n"
        "}\n"
        f"define internal void {fork}.fwd(ptr %pack, ptr %dpack) {{\n"
        "entry:\n" + unpack +
        "  %dargs = load ptr, ptr %dpack, align 8\n"
        f"  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 5, ptr {task}.fwd, "
        "ptr %args, ptr %dargs, ptr %dims, ptr %steps, ptr %data)\n"
        "  ret void\n"
        "}\n"
        + _task(f"{task}.fwd", kernel, ndim, narrays, shadows=True)
        + f"@__enzyme_register_derivative_pyjlad.omp.fork.{index} = weak_odr global [2 x ptr] "
        f"[ptr {fork}, ptr {fork}.fwd]\n"
    )


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


def _rewrite_call(line: str, index: int, forward: bool = False,
                  private: Mapping[int, tuple[str, str, str]] | None = None) -> tuple[str, str] | None:
    """``(replacement lines, task definition)`` for one ``numba_parallel_for`` call, or None if unrecognized."""
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
    task = f"@pyjlad.omp.task.{index}"
    shared = ", ".join(a if a.split()[0] == "ptr" else "" for a in args[1:5])
    if "" in shared.split(", "):
        return None
    n32 = f"%pyjlad.omp.threads.{index}"
    if forward:  # the fork's operands packed behind one pointer (see _forward_fork)
        pack = f"%pyjlad.omp.pack.{index}"
        fork = "".join(f"{indent}{pack}.{k} = getelementptr inbounds ptr, ptr {pack}, i64 {k}\n"
                       f"{indent}store ptr {value.split()[-1]}, ptr {pack}.{k}, align 8\n"  # attributes dropped
                       for k, value in enumerate(shared.split(", ")))
        fork += f"{indent}call void @pyjlad.omp.fork.{index}(ptr {pack})"
    else:
        fork = f"{indent}call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 4, ptr {task}, {shared})"
    replacement = (f"{indent}{n32} = trunc i64 {threads[1]} to i32\n"
                   f"{indent}call void @omp_set_num_threads(i32 {n32})\n"
                   f"{fork}")
    tasks = _task(task, kernel, ndim, narrays, private=private if not forward else None,
                  private_kernel=private_body(index) if private and not forward else None)
    return replacement, tasks + _forward_fork(index, kernel, ndim, narrays) if forward else tasks


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


def openmp_parallel_loops(text: str, forward: bool = False, layouts: Mapping[str, LoopLayout] | None = None) -> str:
    """``text`` (a module's LLVM IR) with each recognized ``numba_parallel_for`` call made an OpenMP parallel loop.

    ``forward``: for Enzyme's forward mode, each fork in a function of its own whose derivative
    is registered (:func:`_forward_fork`).

    ``layouts``: the array layout of each loop's body, by its symbol
    (:func:`pyjlad.private_adjoints.recording_loop_layouts`); in reverse mode, each thread then reads
    the arrays every iteration reads from a private copy (:mod:`pyjlad.private_adjoints`).

    Unchanged if it holds no such call. Calls of unrecognized shape are left as they were
    (:func:`unrecognized_parallel_calls` counts them).

    >>> caller = openmp_parallel_loops(EXAMPLE).split("define i32 @caller")[1].split("}")[0]
    >>> print(caller.strip())
    (ptr %a, ptr %d, ptr %s) {
    entry:
      store atomic i32 0, ptr @pyjlad.omp.failed monotonic, align 4
      %g = alloca i32, align 4
      %n = call i64 @get_num_threads()
      %pyjlad.omp.threads.0 = trunc i64 %n to i32
      call void @omp_set_num_threads(i32 %pyjlad.omp.threads.0)
      call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 4, ptr @pyjlad.omp.task.0, ptr %a, ptr %d, ptr %s, ptr null)
      %pyjlad.omp.failed.13.7 = load atomic i32, ptr @pyjlad.omp.failed monotonic, align 4
      %pyjlad.omp.status.13.7 = or i32 0, %pyjlad.omp.failed.13.7
      ret i32 %pyjlad.omp.status.13.7
    """
    if _CALL not in text:
        return text
    text = drop_debug_attachments(text)  # (debug=True: the lines recognized here carry none)
    out: list[str] = []
    tasks: list[str] = []
    schedules: set[str] = set()
    privatized: dict[int, tuple[str, list[int]]] = {}  # the loops with private copies: body, copied arguments
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
            layout = layouts.get(kernel.lstrip("@").strip('"')) if layouts and not forward else None
            if layout is not None and layout.candidates and parsed is None:
                parsed = parse(text, strict=False)  # once per module, for every loop's body
            private = _private_copies(parsed, kernel, layout) if layout is not None else {}
            rewritten = _rewrite_call(line, len(tasks), forward, private)
            if rewritten is not None:
                if private:
                    privatized[len(tasks)] = (kernel, sorted(private))
                if forward:
                    out.insert(entry_at, f"  %pyjlad.omp.pack.{len(tasks)} = alloca [4 x ptr], align 8")
                out.append(rewritten[0])
                tasks.append(rewritten[1])
                continue
        elif any(g in line for g in _GIL_CALLS) and " call " in f" {line.strip()} ":
            continue  # the GIL release around Numba's threading layer: a derivative runs without Python
        elif "call void @numba_do_raise(" in line or (function.startswith("__gufunc__") and
                                                       line.strip() == "call void @PyErr_Clear()"):
            # an exception in a loop's body (Numba's gufunc wrapper clears Python's error, then builds and
            # raises the exception): reported through the status instead
            out.append(f"  store atomic i32 1, ptr {_FAILED} monotonic, align 4")
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
    wanted = _DECLARATIONS + (_FORWARD_DECLARATIONS if forward else "") + (_PRIVATE_DECLARATIONS if privatized else "")
    present = _defined_or_declared(body)
    declared = [d for d in wanted.strip().split("\n") if d.strip() and _declared_name(d) not in present]
    return body.rstrip("\n") + "\n\n" + "\n".join([*tasks, *bodies]) + "\n" + "\n".join(declared) + "\n"


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


#: What a user wrote for each BLAS routine Numba calls (through ``numba_xxdot``/``xxgemv``/``xxgemm``).
_BLAS_CONSTRUCTS = {"dot": "a dot product of two vectors with @", "gemv": "a matrix-vector product (@, np.dot)",
                    "gemm": "a matrix product (@, np.dot)"}


def blas_in_parallel_loops(text: str) -> list[str]:
    """What the parallel loops of ``text`` (rewritten by :func:`openmp_parallel_loops`) compute with BLAS, in words.

    Enzyme differentiates a BLAS call by its own rules, which add into the adjoint of a matrix or vector with
    BLAS itself (``cblas_dger``, ``cblas_daxpy``): without atomic operations. Inside a parallel loop, where
    every thread adds into the adjoint of an array the iterations share, that is a data race (a silently
    wrong gradient, different from run to run). Returns ``[]`` where no loop body reaches a BLAS routine.

    Examples
    --------
    >>> blas_in_parallel_loops(openmp_parallel_loops(EXAMPLE))
    []
    """
    module = parse(text, strict=False)
    tasks = [f.symbol for f in module.definitions if f.symbol.startswith("@pyjlad.omp.task.")]
    found: dict[str, None] = {}
    for task in tasks:
        for symbol in reachable(module, task):
            if symbol.startswith("@cblas_"):
                routine = symbol[len("@cblas_") + 1:]
                found[_BLAS_CONSTRUCTS.get(routine, f"BLAS {routine}")] = None
    return list(found)


def _report_failures(lines: list[str]) -> list[str] | None:
    """``lines`` with each function that runs a parallel loop clearing the failure flag on entry and
    returning its status or'ed with it (an exception raised in a loop's body, which Numba's gufunc
    wrapper raises in Python instead of returning, makes the status 1: pyjlad then calls the function
    itself for the exception). None if such a function does not return Numba's ``i32`` status."""
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
        edited = [*body[:first], f"  store atomic i32 0, ptr {_FAILED} monotonic, align 4", *body[first:]]
        for j, item in enumerate(edited):
            words = item.split(", !")[0].split()
            if words[:2] == ["ret", "i32"] and len(words) == 3:
                edited[j] = (f"  %pyjlad.omp.failed.{k}.{j} = load atomic i32, ptr {_FAILED} monotonic, align 4\n"
                             f"  %pyjlad.omp.status.{k}.{j} = or i32 {words[2]}, %pyjlad.omp.failed.{k}.{j}\n"
                             f"  ret i32 %pyjlad.omp.status.{k}.{j}")
        out[start + 1:] = edited
    return out


def _declared_name(line: str) -> str:
    """The ``@`` symbol a ``declare`` line or a global's definition names (``""`` for other lines)."""
    if line.startswith(("declare ", "define ")):
        return line.split("(")[0].split()[-1]
    if line.startswith("@"):
        return line.split("=")[0].strip()
    return ""


def _defined_or_declared(text: str) -> set[str]:
    """The ``@`` symbols ``text`` declares or defines (functions and globals)."""
    return {name for name in map(_declared_name, text.split("\n")) if name}


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
