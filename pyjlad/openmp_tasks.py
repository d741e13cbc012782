"""The OpenMP tasks that run a Numba parallel loop's rows (:mod:`pyjlad.openmp_loops`), and the split of a
stencil's rows into those no other thread's rows read (interior) and the rest (edges).

A task runs ``kernel`` (Numba's gufunc body) over this thread's static share of the schedule's rows
(``__kmpc_for_static_init_8``), each row's arguments as Numba's threading layer passes them.

Split rows (:func:`split_rows`): a stencil reads its array ``u`` within ``below`` rows below and ``above``
rows above each index (:func:`pyjlad.row_offsets.row_offsets`), so in the reverse sweep every index adds
into the adjoints of its neighbours, which the neighbouring chunk of the schedule (another thread) also
adds into: Enzyme adds atomically. Yet the indices ``start + below`` to ``end - above`` of a chunk
``[start, end]`` add only into the chunk's own elements. So each row of Numba's schedule is split into
three parts, ``[start, start + below - 1]``, ``[start + below, end - above]`` and ``[end - above + 1,
end]`` (all of it the first part where the chunk is too short, or where ``start`` is negative and an
index could wrap around to another chunk's element), and the loop runs as two parallel loops: the middle
parts (:data:`INTERIOR`) on the body's copy that reads ``u`` in place and adds into its adjoint plainly
(:mod:`pyjlad.private_bodies`), then the outer parts (:data:`EDGES`) on the body as Numba compiled it,
whose adds are atomic. Each parallel loop ends when all its threads have, so in the reverse sweep the
edges' atomic adds all happen before any interior's plain add, and no two threads' interior parts share
an element. The parts are computed before the loops by ``@pyjlad.omp.split``, a function Enzyme does not
differentiate (``"enzyme_inactive"``: it writes integers only, which Enzyme could not type).

A Hessian-vector product's forward form splits the rows the same way (:func:`split_rows` with a ``pack``): each
of the two parallel loops is a fork wrapped with its registered forward derivative (:func:`forward_fork` with
``parts``), so the product's reverse sweep runs the reverse of the edges' forward task, then the interior's, as
in reverse mode.

Each part a row runs has an array of the body's arguments of its own (``%rowargs0``, ``%rowargs2``; in a forward
task, of their shadows too, ``%rowdargs0``, where a part's row bounds are their own shadow: integers): with
one array for both edges, rewritten between the two calls, Enzyme v0.0.289's reverse of the first call read
the bounds the second had stored there (wrong gradients where the two edges differ in width: ``u[i - 1]``
and ``u[i + 2]``; ``tests/test_halo_copies.py``).

Examples
--------
>>> text = task("@t", "@k", 1, 2, parts=INTERIOR)
>>> "ptr %parts" in text.splitlines()[0] and "call void @k(" in text
True
>>> "define internal void @pyjlad.omp.split(" in split_definition()
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .private_adjoints import ArrayLayout

__all__ = ["EDGES", "INTERIOR", "PARTS_PER_ROW", "forward_fork", "split_definition", "split_rows", "task",
           "typed_arguments"]

#: How many parts :func:`split_rows` makes of each row of the schedule, in order: below, interior, above.
PARTS_PER_ROW = 3
#: The part of each row whose indices read no element another row reads (:func:`split_rows`).
INTERIOR = (1,)
#: The parts of each row next to the neighbouring rows.
EDGES = (0, 2)
_SPLIT = "@pyjlad.omp.split"


def split_definition() -> str:
    """The IR of ``@pyjlad.omp.split(sched, rows, step, below, above, parts)``: for each of the ``rows`` rows
    ``[start, end]`` of Numba's schedule of a loop of one dimension (``step`` bytes apart), its three parts
    (see the module docstring) into ``parts`` (:data:`PARTS_PER_ROW` rows per row, ``step`` bytes apart). An
    empty part is ``[1, 0]``."""
    return (
        f"define internal void {_SPLIT}(ptr %sched, i64 %rows, i64 %step, i64 %below, i64 %above, ptr %parts) "
        'nounwind "enzyme_inactive" {\n'
        "entry:\n"
        "  %any = icmp sgt i64 %rows, 0\n"
        "  br i1 %any, label %row, label %done\n"
        "row:\n"
        "  %r = phi i64 [ 0, %entry ], [ %next, %row ]\n"
        "  %o = mul i64 %r, %step\n"
        "  %sp = getelementptr inbounds i8, ptr %sched, i64 %o\n"
        "  %s = load i64, ptr %sp, align 8\n"
        "  %ep = getelementptr inbounds i8, ptr %sp, i64 8\n"
        "  %e = load i64, ptr %ep, align 8\n"
        "  %ilo = add i64 %s, %below\n"
        "  %ihi = sub i64 %e, %above\n"
        "  %nonneg = icmp sge i64 %s, 0\n"
        "  %fits = icmp sle i64 %ilo, %ihi\n"
        "  %split = and i1 %nonneg, %fits\n"
        "  %ilo1 = add i64 %ilo, -1\n"
        "  %ae = select i1 %split, i64 %ilo1, i64 %e\n"
        "  %is = select i1 %split, i64 %ilo, i64 1\n"
        "  %ie = select i1 %split, i64 %ihi, i64 0\n"
        "  %ihi1 = add i64 %ihi, 1\n"
        "  %bs = select i1 %split, i64 %ihi1, i64 1\n"
        "  %be = select i1 %split, i64 %e, i64 0\n"
        f"  %r3 = mul i64 %r, {PARTS_PER_ROW}\n"
        "  %qa = mul i64 %r3, %step\n"
        "  %pa = getelementptr inbounds i8, ptr %parts, i64 %qa\n"
        "  %pi = getelementptr inbounds i8, ptr %pa, i64 %step\n"
        "  %pb = getelementptr inbounds i8, ptr %pi, i64 %step\n"
        + "".join(f"  store i64 %{s}, ptr %p{p}, align 8\n"
                  f"  %p{p}.e = getelementptr inbounds i8, ptr %p{p}, i64 8\n"
                  f"  store i64 %{e}, ptr %p{p}.e, align 8\n" for p, s, e in (("a", "s", "ae"), ("i", "is", "ie"),
                                                                               ("b", "bs", "be"))) +
        "  %next = add nuw nsw i64 %r, 1\n"
        "  %more = icmp slt i64 %next, %rows\n"
        "  br i1 %more, label %row, label %done\n"
        "done:\n"
        "  ret void\n"
        "}\n"
    )


def typed_arguments(index: int, indent: str, args: str, arrays: Sequence[ArrayLayout]) -> tuple[str, set[str]]:
    """The caller's lines telling Enzyme, before loop ``index`` runs, the type of the elements of each array of
    ``arrays`` it passes the loop (``args[a.index]``, whose elements are ``a.element``), and the hints used.

    The loop's body reads the arrays through the pointers in ``args``, which Enzyme's type analysis does not
    follow into the body: where the caller itself only copies such an array (``u = u.copy()`` in a time loop
    whose steps are parallel loops), Enzyme could not type the copy, and with loose types, the last resort,
    took the copied doubles for integers: the adjoint through the copy was lost (zero gradients, silently).
    Typing the pointer loaded back from ``args`` types the value stored there and, through Enzyme's analysis,
    the copies it comes from.

    >>> from pyjlad.private_adjoints import ArrayLayout
    >>> print(typed_arguments(0, "  ", "ptr %a", [ArrayLayout(1, 8, (1,), (3,), element="double")])[0])
      %pyjlad.omp.typed.0.1.at = getelementptr inbounds ptr, ptr %a, i64 1
      %pyjlad.omp.typed.0.1 = load ptr, ptr %pyjlad.omp.typed.0.1.at, align 8
      call void @__enzyme_double(ptr %pyjlad.omp.typed.0.1, i64 8)
    """
    array = args.split()[-1]
    lines, hints = [], set()
    for a in sorted((a for a in arrays if a.element), key=lambda a: a.index):
        hint, value = f"__enzyme_{a.element}", f"%pyjlad.omp.typed.{index}.{a.index}"
        lines += [f"{value}.at = getelementptr inbounds ptr, ptr {array}, i64 {a.index}",
                  f"{value} = load ptr, ptr {value}.at, align 8", f"call void @{hint}(ptr {value}, i64 {a.itemsize})"]
        hints.add(hint)
    return "\n".join(indent + line for line in lines), hints


def split_rows(index: int, indent: str, shared: str, halo: tuple[int, int], forks: tuple[str, str],
               pack: str | None = None) -> str:
    """The caller's lines running loop ``index`` as the parallel loops ``forks`` (tasks over :data:`INTERIOR`,
    then over :data:`EDGES`) on the parts of its schedule's rows that :func:`split_definition` makes with
    ``halo`` (``(below, above)``). ``shared``: the fork's operands (``args``, ``dims``, ``steps``, ``data``).
    The parts are allocated as Numba's schedule is (see :func:`pyjlad.openmp_loops._threads_and_schedule`), so
    that Enzyme keeps them until its reverse sweep has read them.

    With ``pack`` (forward mode: an ``alloca [5 x ptr]`` of the caller's), ``forks`` are the functions wrapping
    each fork (:func:`forward_fork` with ``parts``), called with the operands and the parts stored in ``pack``."""
    args, dims, steps = (a.split()[-1] for a in shared.split(", ")[:3])
    p = f"%pyjlad.omp.parts.{index}"
    lines = [f"{p}.rows = load i64, ptr {dims}, align 8", f"{p}.step = load i64, ptr {steps}, align 8",
             f"{p}.row = mul i64 {p}.rows, {p}.step", f"{p}.bytes = mul i64 {p}.row, {PARTS_PER_ROW}",
             f"{p}.mi = call ptr @NRT_MemInfo_alloc_aligned(i64 {p}.bytes, i32 32)",
             f"{p}.field = getelementptr i8, ptr {p}.mi, i64 24", f"{p} = load ptr, ptr {p}.field, align 8",
             f"{p}.sched = load ptr, ptr {args}, align 8",
             f"call void {_SPLIT}(ptr {p}.sched, i64 {p}.rows, i64 {p}.step, i64 {halo[0]}, i64 {halo[1]}, ptr {p})"]
    if pack is None:
        lines += [f"call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 5, ptr {fork}, {shared}, "
                  f"ptr {p})" for fork in forks]
    else:  # (attributes dropped)
        for k, value in enumerate([*(a.split()[-1] for a in shared.split(", ")), p]):
            lines += [f"{pack}.{k} = getelementptr inbounds ptr, ptr {pack}, i64 {k}",
                      f"store ptr {value}, ptr {pack}.{k}, align 8"]
        lines += [f"call void {fork}(ptr {pack})" for fork in forks]
    lines.append(f"call void @NRT_decref(ptr {p}.mi)")
    return "\n".join(indent + line for line in lines)


def task(name: str, kernel: str, ndim: int, narrays: int, shadows: bool = False,
         private: Mapping[int, tuple[str, str, str]] | None = None, private_kernel: str | None = None,
         parts: tuple[int, ...] | None = None) -> str:
    """The OpenMP task running ``kernel`` over this thread's static share of the schedule's rows.

    ``private``: for argument ``j``, this thread's private copy of it (``(setup, prefix, release)``
    of :func:`pyjlad.private_adjoints.private_copy`). Where every copy was made (none overlapped an
    array the body writes, and none passed in place overlapped any other array), the rows run
    ``private_kernel`` instead of ``kernel``: the body's copy that takes the copies' row pointers as
    parameters after its own (:mod:`pyjlad.private_bodies`); no copies are made without it.

    ``parts``: the task takes the parts of the schedule's rows (:func:`split_rows`) after its other
    parameters, and runs, for each of its rows, those parts of it (:data:`INTERIOR` or :data:`EDGES`) that are
    not empty, each as a row of its own.

    With ``shadows``, the forward-mode derivative of that task: it takes the shadow of the argument
    array after the arguments (``%dargs``) and runs Enzyme's forward derivative of ``kernel`` on each
    row, the rows' argument pointers duplicated (see :func:`forward_fork`); with ``private``, each copied
    array's tangent is copied too (:func:`pyjlad.private_adjoints.tangent_copy`), and the rows run the
    forward derivative of ``private_kernel``, each copy's row pointer duplicated with its tangent copy's (a
    Hessian-vector product's reverse sweep then adds into thread-local adjoints). Enzyme is told that the rows'
    argument arrays hold pointers (``__enzyme_pointer``): a Hessian-vector product's reverse sweep over this
    task stores the shadows of those pointers, and could not type them otherwise ("Cannot deduce type of
    store").
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
    tangents = {}
    if shadows and private:  # the tangents' copies too, made as the values' are from the shadow arguments
        from .private_adjoints import tangent_copy

        tangents = {j: tangent_copy(copy) for j, copy in private.items()}
    copies = [*private.values(), *tangents.values()]
    for d, made in (("", private), ("d", tangents)):  # each copy's row pointer, passed to private_kernel
        for j, (_, prefix, _) in made.items():
            arrays[j] += f"  %{d}pnv{j} = getelementptr i8, ptr {prefix}.copy, i64 %off{j}\n"
    setup = "".join(c[0] for c in copies)
    release = "".join(c[2] for c in copies)
    if private:  # every copy made: none overlaps an array the body writes
        prefixes = [prefix for _, prefix, _ in copies]
        setup += "".join(f"  %private.{k} = and i1 {'true' if k == 0 else f'%private.{k - 1}'}, {m}.ok\n"
                         for k, m in enumerate(prefixes))
        flag = f"%private.{len(prefixes) - 1}"
        extra = "".join(f", ptr %pnv{j}" for j in private)
        dual = "".join(f", ptr @enzyme_dup, ptr %pnv{j}, ptr %dpnv{j}" for j in private)

    def calls(tag: str, rowargs: str = "%rowargs") -> str:
        """The call of the body for one row (labels ending in ``tag``, its arguments in ``rowargs``, their shadows
        in ``%rowdargs`` for ``%rowargs``), ending in its last block."""
        if shadows:
            def forward(body: str, more: str = "") -> str:
                return (f"  call void (...) @__enzyme_fwddiff_pyjlad_omp(ptr {body}, ptr @enzyme_dup, ptr {rowargs}, "
                        f"ptr {rowargs.replace('%rowargs', '%rowdargs')}, ptr @enzyme_const, ptr %count, ptr @enzyme_const, ptr %steps, "
                        f"ptr @enzyme_const, ptr %data{more})\n")
            if not private:
                return forward(kernel)
            return (f"  br i1 {flag}, label %row.private{tag}, label %row.shared{tag}\n"
                    f"row.private{tag}:\n" + forward(private_kernel, dual) + f"  br label %row.next{tag}\n"
                    f"row.shared{tag}:\n" + forward(kernel) + f"  br label %row.next{tag}\n"
                    f"row.next{tag}:\n")
        if not private:
            return f"  call void {kernel}(ptr {rowargs}, ptr %count, ptr %steps, ptr %data)\n"
        return (f"  br i1 {flag}, label %row.private{tag}, label %row.shared{tag}\n"
                f"row.private{tag}:\n"
                f"  call void {private_kernel}(ptr {rowargs}, ptr %count, ptr %steps, ptr %data{extra})\n"
                f"  br label %row.next{tag}\n"
                f"row.shared{tag}:\n"
                f"  call void {kernel}(ptr {rowargs}, ptr %count, ptr %steps, ptr %data)\n"
                f"  br label %row.next{tag}\n"
                f"row.next{tag}:\n")

    if shadows:
        arrays += [f"  %dap{j} = getelementptr inbounds ptr, ptr %dargs, i64 {j}\n"
                   f"  %dav{j} = load ptr, ptr %dap{j}, align 8\n"
                   f"  %dnv{j} = getelementptr inbounds i8, ptr %dav{j}, i64 %off{j}\n"
                   f"  %dnp{j} = getelementptr inbounds ptr, ptr %rowdargs, i64 {j}\n"
                   f"  store ptr %dnv{j}, ptr %dnp{j}, align 8\n" for j in range(narrays)]
    body = calls("") if parts is None else f"  %r.parts = mul i64 %r, {PARTS_PER_ROW}\n" + "".join(
        f"  %pr{k} = add i64 %r.parts, {k}\n"
        f"  %po{k} = mul i64 %pr{k}, %sv0\n"
        f"  %pp{k} = getelementptr inbounds i8, ptr %parts, i64 %po{k}\n"
        f"  %ps{k} = load i64, ptr %pp{k}, align 8\n"
        f"  %pep{k} = getelementptr inbounds i8, ptr %pp{k}, i64 8\n"
        f"  %pe{k} = load i64, ptr %pep{k}, align 8\n"
        f"  %pgo{k} = icmp sle i64 %ps{k}, %pe{k}\n"
        f"  br i1 %pgo{k}, label %part{k}, label %part{k}.done\n"
        f"part{k}:\n"
        + "".join(f"  %{d}np{j}.{k} = getelementptr inbounds ptr, ptr %row{d}args{k}, i64 {j}\n"
                  f"  store ptr {f'%pp{k}' if j == 0 else f'%{d}nv{j}'}, ptr %{d}np{j}.{k}, align 8\n"
                  for d in ("", "d")[:1 + shadows] for j in range(narrays))
        + calls(f".{k}", f"%rowargs{k}") +
        f"  br label %part{k}.done\n"
        f"part{k}.done:\n" for k in parts)
    return (
        f"define internal void {name}(ptr noalias %gtid, ptr noalias %btid, ptr %args, "
        f"{'ptr %dargs, ' if shadows else ''}ptr %dims, ptr %steps, ptr %data{', ptr %parts' if parts else ''}) {{\n"
        "entry:\n"
        f"  %count = alloca [{ndim + 1} x i64], align 8\n"
        f"  %rowargs = alloca [{narrays} x ptr], align 8\n"
        + (f"  %rowdargs = alloca [{narrays} x ptr], align 8\n"
           f"  call void @__enzyme_pointer(ptr %rowargs, i64 {8 * narrays})\n"
           f"  call void @__enzyme_pointer(ptr %rowdargs, i64 {8 * narrays})\n" if shadows else "")
        + "".join(f"  %row{d}args{k} = alloca [{narrays} x ptr], align 8\n"
                  + (f"  call void @__enzyme_pointer(ptr %row{d}args{k}, i64 {8 * narrays})\n" if shadows else "")
                  for k in parts or () for d in ("", "d")[:1 + shadows]) +
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
        "  %r = phi i64 [ %lo, %init ], [ %next, %row.end ]\n"
        + "".join(count) + "".join(arrays) + body +
        "  br label %row.end\n"
        "row.end:\n"
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


def forward_fork(index: int, kernel: str, ndim: int, narrays: int,
                 private: Mapping[int, tuple[str, str, str]] | None = None, private_kernel: str | None = None,
                 parts: tuple[int, ...] | None = None) -> str:
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
    internal globals. ``private`` and ``private_kernel``: as for :func:`task`, in the forward task.

    ``parts`` (:data:`INTERIOR` or :data:`EDGES`): the fork runs those parts of the rows of the schedule
    (:func:`split_rows`, whose parts are the pack's fifth pointer); the fork and its task are named with
    ``.interior`` after the index for :data:`INTERIOR`.

    >>> text = forward_fork(0, "@k", 1, 2, parts=INTERIOR)
    >>> "define internal void @pyjlad.omp.fork.0.interior.fwd(ptr %pack, ptr %dpack)" in text
    True
    """
    suffix = ".interior" if parts == INTERIOR else ""
    fork, name = f"@pyjlad.omp.fork.{index}{suffix}", f"@pyjlad.omp.task.{index}{suffix}"
    operands = ("args", "dims", "steps", "data", *(("parts",) if parts else ()))
    unpack = "".join(f"  %{name}.at = getelementptr inbounds ptr, ptr %pack, i64 {k}\n"
                     f"  %{name} = load ptr, ptr %{name}.at, align 8\n"
                     for k, name in enumerate(operands))
    shared = ", ".join(f"ptr %{o}" for o in operands[1:])
    return (
        f"define internal void {fork}(ptr %pack) noinline {{\n"
        "entry:\n" + unpack +
        f"  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 {len(operands)}, ptr {name}, "
        f"ptr %args, {shared})\n"
        "  ret void\n"
        "}\n"
        f"define internal void {fork}.fwd(ptr %pack, ptr %dpack) {{\n"
        "entry:\n" + unpack +
        "  %dargs = load ptr, ptr %dpack, align 8\n"
        f"  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.omp.loc, i32 {len(operands) + 1}, "
        f"ptr {name}.fwd, ptr %args, ptr %dargs, {shared})\n"
        "  ret void\n"
        "}\n"
        + task(f"{name}.fwd", kernel, ndim, narrays, shadows=True, private=private, private_kernel=private_kernel,
               parts=parts)
        + f"@__enzyme_register_derivative_pyjlad.omp.fork.{index}{suffix} = weak_odr global [2 x ptr] "
        f"[ptr {fork}, ptr {fork}.fwd]\n"
    )
