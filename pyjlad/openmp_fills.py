"""Large fills and copies of a parallel derivative done by all its threads.

Between the parallel loops of a parallel derivative (:mod:`pyjlad.parallel_derivatives`) runs serial code,
and Enzyme adds some of it: it zeroes the shadow of each array the function allocates (a ``calloc``, the
shadow of Numba's ``np.zeros``' ``memset``) and copies arrays it keeps for the reverse sweep (a
``memcpy``). For a 1024x1024 grid each is 8 MiB of memory written by one thread while the others wait:
by Amdahl's law, the more threads, the larger their share of the derivative's time.

:func:`parallel_fills` rewrites Enzyme's output so that each such ``memset``, ``memcpy`` and ``calloc``
whose size is not a constant calls pyjlad's own (:data:`HELPERS`): at run time, a block of at least
:data:`THRESHOLD` bytes, outside any parallel region, with more than one thread allowed
(``numba.get_num_threads()``), is split into one contiguous part per thread (cache-line aligned) and each
thread writes its part inside one OpenMP parallel region; anything else is the libc call it replaced. The
bytes written are the same; only who writes them changes, and the region's join comes before the call
returns.

Examples
--------
>>> text = "\\n".join(["define void @f(ptr %p, i64 %n) {", "entry:",
...                   "  call void @llvm.memset.p0.i64(ptr align 8 %p, i8 0, i64 %n, i1 false), !noalias !3",
...                   "  call void @llvm.memset.p0.i64(ptr align 8 %p, i8 0, i64 16, i1 false)",
...                   "  %c = call ptr @calloc(i64 1, i64 %n)", "  ret void", "}", ""])
>>> out = parallel_fills(text)
>>> print("\\n".join(out.splitlines()[2:5]))
  call void @pyjlad.omp.memset(ptr %p, i8 0, i64 %n)
  call void @llvm.memset.p0.i64(ptr align 8 %p, i8 0, i64 16, i1 false)
  %c = call ptr @pyjlad.omp.calloc(i64 1, i64 %n)
"""

from __future__ import annotations

from .ir.instructions import parse_instruction
from .openmp_loops import defined_or_declared

__all__ = ["HELPERS", "THRESHOLD", "parallel_fills"]

#: Fewest bytes a fill or copy is split between threads for (below it, one thread's call is about as fast:
#: a parallel region's fork and join cost microseconds, writing 1 MiB tens of them).
THRESHOLD = 1 << 20

#: The calls :func:`parallel_fills` replaces, by the helper taking their place (same parameters, volatile flag
#: dropped).
_REPLACED = {"@llvm.memset.p0.i64": "@pyjlad.omp.memset", "@llvm.memcpy.p0.p0.i64": "@pyjlad.omp.memcpy",
             "@calloc": "@pyjlad.omp.calloc"}

#: The definitions of the helpers, and what they need. ``@malloc`` and ``@calloc`` are those of the
#: derivative (pyjlad's pool once it is loaded: :mod:`pyjlad.engines.pool`).
HELPERS = f"""
%pyjlad.fill.ident = type {{ i32, i32, i32, i32, ptr }}
@pyjlad.fill.where = private unnamed_addr constant [23 x i8] c";unknown;unknown;0;0;;\\00", align 1
@pyjlad.fill.loc = private unnamed_addr constant %pyjlad.fill.ident {{ i32 0, i32 2, i32 0, i32 22, ptr @pyjlad.fill.where }}, align 8

define internal void @pyjlad.omp.memset(ptr %dst, i8 %byte, i64 %bytes) {{
entry:
  %threads = call i1 @pyjlad.omp.fill.threads(i64 %bytes)
  br i1 %threads, label %fork, label %serial
fork:
  call void @pyjlad.omp.fill.fork(ptr %dst, ptr null, i8 %byte, i64 %bytes)
  ret void
serial:
  call void @llvm.memset.p0.i64(ptr %dst, i8 %byte, i64 %bytes, i1 false)
  ret void
}}

define internal void @pyjlad.omp.memcpy(ptr %dst, ptr %src, i64 %bytes) {{
entry:
  %threads = call i1 @pyjlad.omp.fill.threads(i64 %bytes)
  br i1 %threads, label %fork, label %serial
fork:
  call void @pyjlad.omp.fill.fork(ptr %dst, ptr %src, i8 0, i64 %bytes)
  ret void
serial:
  call void @llvm.memcpy.p0.p0.i64(ptr %dst, ptr %src, i64 %bytes, i1 false)
  ret void
}}

define internal ptr @pyjlad.omp.calloc(i64 %count, i64 %size) {{
entry:
  %product = call {{ i64, i1 }} @llvm.umul.with.overflow.i64(i64 %count, i64 %size)
  %bytes = extractvalue {{ i64, i1 }} %product, 0
  %overflow = extractvalue {{ i64, i1 }} %product, 1
  br i1 %overflow, label %libc, label %check
check:
  %threads = call i1 @pyjlad.omp.fill.threads(i64 %bytes)
  br i1 %threads, label %own, label %libc
own:
  %p = call ptr @malloc(i64 %bytes)
  %failed = icmp eq ptr %p, null
  br i1 %failed, label %done, label %zero
zero:
  call void @pyjlad.omp.fill.fork(ptr %p, ptr null, i8 0, i64 %bytes)
  br label %done
done:
  ret ptr %p
libc:
  %c = call ptr @calloc(i64 %count, i64 %size)
  ret ptr %c
}}

; Whether %bytes are written by all threads: enough of them, outside a parallel region, more than one thread.
define internal i1 @pyjlad.omp.fill.threads(i64 %bytes) {{
entry:
  %big = icmp uge i64 %bytes, {THRESHOLD}
  br i1 %big, label %region, label %no
region:
  %inside = call i32 @omp_in_parallel()
  %outside = icmp eq i32 %inside, 0
  br i1 %outside, label %count, label %no
count:
  %n = call i64 @get_num_threads()
  %many = icmp sgt i64 %n, 1
  ret i1 %many
no:
  ret i1 false
}}

; One parallel region on numba.get_num_threads() threads, each writing its part (a copy from %src unless it
; is null, else %byte).
define internal void @pyjlad.omp.fill.fork(ptr %dst, ptr %src, i8 %byte, i64 %bytes) {{
entry:
  %job = alloca {{ ptr, ptr, i64, i8 }}, align 8
  store ptr %dst, ptr %job, align 8
  %srcat = getelementptr inbounds {{ ptr, ptr, i64, i8 }}, ptr %job, i32 0, i32 1
  store ptr %src, ptr %srcat, align 8
  %bytesat = getelementptr inbounds {{ ptr, ptr, i64, i8 }}, ptr %job, i32 0, i32 2
  store i64 %bytes, ptr %bytesat, align 8
  %byteat = getelementptr inbounds {{ ptr, ptr, i64, i8 }}, ptr %job, i32 0, i32 3
  store i8 %byte, ptr %byteat, align 8
  %n = call i64 @get_num_threads()
  %n32 = trunc i64 %n to i32
  call void @omp_set_num_threads(i32 %n32)
  call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @pyjlad.fill.loc, i32 1, ptr @pyjlad.omp.fill.part, ptr %job)
  ret void
}}

define internal void @pyjlad.omp.fill.part(ptr noalias %gtid, ptr noalias %btid, ptr %job) {{
entry:
  %dst = load ptr, ptr %job, align 8
  %srcat = getelementptr inbounds {{ ptr, ptr, i64, i8 }}, ptr %job, i32 0, i32 1
  %src = load ptr, ptr %srcat, align 8
  %bytesat = getelementptr inbounds {{ ptr, ptr, i64, i8 }}, ptr %job, i32 0, i32 2
  %bytes = load i64, ptr %bytesat, align 8
  %byteat = getelementptr inbounds {{ ptr, ptr, i64, i8 }}, ptr %job, i32 0, i32 3
  %byte = load i8, ptr %byteat, align 8
  %t32 = call i32 @omp_get_thread_num()
  %nt32 = call i32 @omp_get_num_threads()
  %t = zext i32 %t32 to i64
  %nt = zext i32 %nt32 to i64
  %ceil = add i64 %bytes, %nt
  %ceil1 = sub i64 %ceil, 1
  %share = udiv i64 %ceil1, %nt
  %share63 = add i64 %share, 63
  %part = and i64 %share63, -64
  %lo = mul i64 %t, %part
  %any = icmp ult i64 %lo, %bytes
  br i1 %any, label %write, label %done
write:
  %end = add i64 %lo, %part
  %over = icmp ugt i64 %end, %bytes
  %hi = select i1 %over, i64 %bytes, i64 %end
  %len = sub i64 %hi, %lo
  %to = getelementptr inbounds i8, ptr %dst, i64 %lo
  %copy = icmp ne ptr %src, null
  br i1 %copy, label %memcpy, label %memset
memcpy:
  %from = getelementptr inbounds i8, ptr %src, i64 %lo
  call void @llvm.memcpy.p0.p0.i64(ptr %to, ptr %from, i64 %len, i1 false)
  br label %done
memset:
  call void @llvm.memset.p0.i64(ptr %to, i8 %byte, i64 %len, i1 false)
  br label %done
done:
  ret void
}}
"""

#: Declarations the helpers need, each added unless the module declares or defines the symbol.
_DECLARATIONS = {
    "@llvm.memset.p0.i64": "declare void @llvm.memset.p0.i64(ptr nocapture writeonly, i8, i64, i1 immarg)",
    "@llvm.memcpy.p0.p0.i64": "declare void @llvm.memcpy.p0.p0.i64(ptr noalias nocapture writeonly, "
                              "ptr noalias nocapture readonly, i64, i1 immarg)",
    "@llvm.umul.with.overflow.i64": "declare { i64, i1 } @llvm.umul.with.overflow.i64(i64, i64)",
    "@malloc": "declare ptr @malloc(i64)",
    "@calloc": "declare ptr @calloc(i64, i64)",
    "@omp_in_parallel": "declare i32 @omp_in_parallel()",
    "@omp_get_thread_num": "declare i32 @omp_get_thread_num()",
    "@omp_get_num_threads": "declare i32 @omp_get_num_threads()",
    "@omp_set_num_threads": "declare void @omp_set_num_threads(i32)",
    "@get_num_threads": "declare i64 @get_num_threads()",
    "@__kmpc_fork_call": "declare void @__kmpc_fork_call(ptr, i32, ptr, ...)",
}


def parallel_fills(text: str) -> str:
    """``text`` (a parallel derivative as Enzyme wrote it, IR text) with each ``memset``, ``memcpy`` and
    ``calloc`` of a size that is not a constant calling its helper (see the module docstring), and the helpers
    defined. Text without such a call comes back unchanged."""
    lines = text.split("\n")
    changed = False
    for k, line in enumerate(lines):
        replaced = _replaced(line)
        if replaced is not None:
            lines[k], changed = replaced, True
    if not changed:
        return text
    present = defined_or_declared("\n".join(lines))
    needed = [d for symbol, d in _DECLARATIONS.items() if symbol not in present]
    return "\n".join([*lines, HELPERS, *needed, ""])


def _replaced(line: str) -> str | None:
    """The call on ``line`` made a call of its helper, or None where ``line`` is no such call (or its size is a
    constant)."""
    if "call" not in line or not any(symbol + "(" in line for symbol in _REPLACED):
        return None
    ins = parse_instruction(line)
    call = ins.call() if ins is not None else None
    if call is None or call.callee not in _REPLACED:
        return None
    values = call.values
    if call.callee == "@calloc":
        kept = [f"i64 {v}" for v in values]
        if not any(v.startswith("%") for v in values):
            return None
    else:
        size = values[-2]
        if not size.startswith("%"):
            return None
        kept = [f"{a.split()[0]} {v}" for a, v in zip(call.arguments[:-1], values[:-1], strict=True)]
    indent = line[: len(line) - len(line.lstrip())]
    head = f"{ins.result} = call ptr" if ins.result else "call void"
    return f"{indent}{head} {_REPLACED[call.callee]}({', '.join(kept)})"
