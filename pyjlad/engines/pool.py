"""A cache of large memory blocks for differentiated code.

A gradient allocates the same large blocks on every call: Enzyme's tape (the
values its reverse sweep reads back), shadows of temporaries, Numba's
temporary arrays. The C library hands blocks of that size out of fresh pages,
mapped on ``malloc`` and unmapped again on ``free`` (or trimmed off the heap),
so every call pays a page fault per 4 KiB page: the 500x500 matrix-product
gradient spent more time in the kernel's page-fault handler than in its matrix
products, and with two BLAS threads the unmapping also stalls the other
thread (TLB shootdowns).

The differentiated module's ``malloc``, ``calloc`` and ``free`` are renamed to this pool's
functions when it is loaded (:func:`use_pool`). Blocks of at least
:data:`MIN_BYTES` are rounded up to a power of two and, when freed, kept (up to
:data:`SLOTS` per size, :func:`capacity` bytes in all) for the next request of
that size; smaller blocks go straight to the C library. A kept block is an
ordinary ``malloc`` block, so memory from the pool may be freed by Numba's
runtime with ``free`` and the other way round. The pool is one spin-locked
table, shared by all threads; :func:`release` returns the kept blocks to the C
library.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import llvmlite.binding as llvm

from .. import config
from ..errors import OutOfMemoryError
from .driver import OOM_ENTER, OOM_LEAVE

__all__ = ["POOL_MALLOC", "POOL_CALLOC", "POOL_FREE", "use_pool", "resolve_pool_symbols", "release", "kept_bytes",
           "failed_bytes",
           "capacity", "MIN_BYTES", "SLOTS"]

POOL_MALLOC, POOL_CALLOC, POOL_FREE = "pyjlad_pool_malloc", "pyjlad_pool_calloc", "pyjlad_pool_free"
_RENAMED = {"malloc": POOL_MALLOC, "calloc": POOL_CALLOC, "free": POOL_FREE}
_MIN_CLASS, _MAX_CLASS = 16, 36
#: Smallest block the pool keeps (smaller ones are cheap for the C library).
MIN_BYTES = 1 << _MIN_CLASS
#: Blocks kept per power-of-two size.
SLOTS = 16


def capacity() -> int:
    """Most bytes the pool keeps: ``$PYJLAD_POOL_BYTES`` (0 disables the pool), default 1 GiB."""
    return config.pool_bytes()


def _pool_ir(cap: int, key: int) -> str:
    n = _MAX_CLASS - _MIN_CLASS + 1
    return f"""
@pool = internal global [{n} x [{SLOTS} x ptr]] zeroinitializer
@pool_bytes = internal global i64 0
@pool_mutex = internal global i32 0

declare ptr @malloc(i64)
declare ptr @calloc(i64, i64)
declare void @free(ptr)
declare {{ i64, i1 }} @llvm.umul.with.overflow.i64(i64, i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i64 @malloc_usable_size(ptr)
declare i64 @llvm.ctlz.i64(i64, i1)
declare ptr @pthread_getspecific(i32)
declare i32 @pthread_setspecific(i32, ptr)
declare void @longjmp(ptr, i32) noreturn

; The out-of-memory exit (see driver._guard_out_of_memory): each thread's armed jmp_buf.
define ptr @{OOM_ENTER}(ptr %jb) {{
entry:
  %prev = call ptr @pthread_getspecific(i32 {key})
  %r = call i32 @pthread_setspecific(i32 {key}, ptr %jb)
  ret ptr %prev
}}

define void @{OOM_LEAVE}(ptr %prev) {{
entry:
  %r = call i32 @pthread_setspecific(i32 {key}, ptr %prev)
  ret void
}}

@pool_failed_bytes = internal global i64 0

; %p, unless it is null (the allocation of %bytes failed) and a driver armed the exit: then
; jump there. A request beyond any address space (2^47 bytes and more) is let through as null:
; Enzyme sizes the cache of a loop before knowing the loop runs, and such a request comes from
; a trip count that is never used.
define internal ptr @pool_checked(ptr %p, i64 %bytes) {{
entry:
  %failed = icmp eq ptr %p, null
  %possible = icmp ult i64 %bytes, 140737488355328
  %fatal = and i1 %failed, %possible
  br i1 %fatal, label %check, label %ok
ok:
  ret ptr %p
check:
  store atomic i64 %bytes, ptr @pool_failed_bytes monotonic, align 8
  %jb = call ptr @pthread_getspecific(i32 {key})
  %armed = icmp ne ptr %jb, null
  br i1 %armed, label %jump, label %ok
jump:
  call void @longjmp(ptr %jb, i32 1)
  unreachable
}}

define internal void @pool_lock() {{
entry:
  br label %spin
spin:
  %r = cmpxchg weak ptr @pool_mutex, i32 0, i32 1 acquire monotonic
  %ok = extractvalue {{ i32, i1 }} %r, 1
  br i1 %ok, label %done, label %spin
done:
  ret void
}}

define internal void @pool_unlock() {{
entry:
  store atomic i32 0, ptr @pool_mutex release, align 4
  ret void
}}

; The slots of blocks of 2^class bytes, or null for a class the pool does not keep.
define internal ptr @pool_row(i64 %class) {{
entry:
  %low = icmp ult i64 %class, {_MIN_CLASS}
  %high = icmp ugt i64 %class, {_MAX_CLASS}
  %outside = or i1 %low, %high
  br i1 %outside, label %none, label %row
none:
  ret ptr null
row:
  %index = sub i64 %class, {_MIN_CLASS}
  %slots = getelementptr [{SLOTS} x ptr], ptr @pool, i64 %index
  ret ptr %slots
}}

; Called with the lock held: the first slot of %slots that holds a block (%occupied) or is
; empty (not %occupied), or null.
define internal ptr @pool_find(ptr %slots, i1 %occupied) {{
entry:
  br label %loop
loop:
  %k = phi i64 [ 0, %entry ], [ %next, %step ]
  %slot = getelementptr ptr, ptr %slots, i64 %k
  %v = load ptr, ptr %slot, align 8
  %empty = icmp eq ptr %v, null
  %hit = xor i1 %empty, %occupied
  br i1 %hit, label %found, label %step
step:
  %next = add i64 %k, 1
  %more = icmp ult i64 %next, {SLOTS}
  br i1 %more, label %loop, label %missing
found:
  ret ptr %slot
missing:
  ret ptr null
}}

define ptr @{POOL_MALLOC}(i64 %size) {{
entry:
  %small = icmp ult i64 %size, {MIN_BYTES}
  br i1 %small, label %direct, label %classify
direct:
  %p0 = call ptr @malloc(i64 %size)
  %p = call ptr @pool_checked(ptr %p0, i64 %size)
  ret ptr %p
classify:
  %m1 = sub i64 %size, 1
  %lz = call i64 @llvm.ctlz.i64(i64 %m1, i1 false)
  %class = sub i64 64, %lz
  %slots = call ptr @pool_row(i64 %class)
  %kept = icmp eq ptr %slots, null
  br i1 %kept, label %direct, label %locked
locked:
  %bytes = shl i64 1, %class
  call void @pool_lock()
  %slot = call ptr @pool_find(ptr %slots, i1 true)
  %miss = icmp eq ptr %slot, null
  br i1 %miss, label %fresh, label %take
take:
  %block = load ptr, ptr %slot, align 8
  store ptr null, ptr %slot, align 8
  %held = load i64, ptr @pool_bytes, align 8
  %left = sub i64 %held, %bytes
  store i64 %left, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret ptr %block
fresh:
  call void @pool_unlock()
  %new0 = call ptr @malloc(i64 %bytes)
  %new = call ptr @pool_checked(ptr %new0, i64 %bytes)
  ret ptr %new
}}

define ptr @{POOL_CALLOC}(i64 %n, i64 %size) {{
entry:
  %m = call {{ i64, i1 }} @llvm.umul.with.overflow.i64(i64 %n, i64 %size)
  %bytes = extractvalue {{ i64, i1 }} %m, 0
  %overflow = extractvalue {{ i64, i1 }} %m, 1
  %small = icmp ult i64 %bytes, {MIN_BYTES}
  %direct = or i1 %overflow, %small
  br i1 %direct, label %libc, label %pooled
libc:
  %c0 = call ptr @calloc(i64 %n, i64 %size)
  %c = call ptr @pool_checked(ptr %c0, i64 %bytes)
  ret ptr %c
pooled:
  %p = call ptr @{POOL_MALLOC}(i64 %bytes)
  %failed = icmp eq ptr %p, null
  br i1 %failed, label %out, label %zero
zero:
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %bytes, i1 false)
  br label %out
out:
  ret ptr %p
}}

define void @{POOL_FREE}(ptr %p) {{
entry:
  %null = icmp eq ptr %p, null
  br i1 %null, label %done, label %sized
done:
  ret void
direct:
  call void @free(ptr %p)
  ret void
sized:
  %usable = call i64 @malloc_usable_size(ptr %p)
  %lz = call i64 @llvm.ctlz.i64(i64 %usable, i1 false)
  %class = sub i64 63, %lz
  %slots = call ptr @pool_row(i64 %class)
  %kept = icmp eq ptr %slots, null
  br i1 %kept, label %direct, label %locked
locked:
  %bytes = shl i64 1, %class
  call void @pool_lock()
  %held = load i64, ptr @pool_bytes, align 8
  %after = add i64 %held, %bytes
  %full = icmp ugt i64 %after, {cap}
  br i1 %full, label %release, label %search
search:
  %slot = call ptr @pool_find(ptr %slots, i1 false)
  %none = icmp eq ptr %slot, null
  br i1 %none, label %release, label %keep
keep:
  store ptr %p, ptr %slot, align 8
  store i64 %after, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret void
release:
  call void @pool_unlock()
  call void @free(ptr %p)
  ret void
}}

define i64 @pyjlad_pool_failed_bytes() {{
entry:
  %b = load atomic i64, ptr @pool_failed_bytes monotonic, align 8
  ret i64 %b
}}

define i64 @pyjlad_pool_kept() {{
entry:
  call void @pool_lock()
  %held = load i64, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret i64 %held
}}

define void @pyjlad_pool_release() {{
entry:
  call void @pool_lock()
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %step ]
  %slot = getelementptr ptr, ptr @pool, i64 %i
  %v = load ptr, ptr %slot, align 8
  store ptr null, ptr %slot, align 8
  call void @free(ptr %v)
  br label %step
step:
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, {n * SLOTS}
  br i1 %more, label %loop, label %out
out:
  store i64 0, ptr @pool_bytes, align 8
  call void @pool_unlock()
  ret void
}}
"""


_lock = threading.Lock()
_state: dict[str, Any] = {}


def _install() -> Any:
    """Compile the pool once per process and make its functions resolvable by the JIT."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    with global_compiler_lock, _lock:
        library = _state.get("library")
        if library is None:
            library = cpu_target.target_context.codegen().create_library("pyjlad_pool")
            library.add_llvm_module(llvm.parse_assembly(_pool_ir(capacity(), _thread_key())))
            library.finalize()
            for name in (*_RENAMED.values(), OOM_ENTER, OOM_LEAVE):
                llvm.add_symbol(name, library.get_pointer_to_function(name))
            _state["library"] = library
            _state["release"] = ctypes.CFUNCTYPE(None)(library.get_pointer_to_function("pyjlad_pool_release"))
            _state["kept"] = ctypes.CFUNCTYPE(ctypes.c_int64)(library.get_pointer_to_function("pyjlad_pool_kept"))
            _state["failed"] = ctypes.CFUNCTYPE(ctypes.c_int64)(
                library.get_pointer_to_function("pyjlad_pool_failed_bytes"))
        return library


def _thread_key() -> int:
    """A ``pthread_key_t`` for the per-thread out-of-memory ``jmp_buf`` (made once per process)."""
    libc = ctypes.CDLL(None)
    key = ctypes.c_uint(0)
    if libc.pthread_key_create(ctypes.byref(key), None) != 0:
        raise OutOfMemoryError("pthread_key_create failed")
    return key.value


def use_pool(module: llvm.ModuleRef) -> bool:
    """Route ``module``'s ``malloc``, ``calloc`` and ``free`` through the pool (renames their declarations).

    Returns whether the module allocates (and so uses the pool). With
    :func:`capacity` 0 the pool keeps nothing, but allocations still go through
    it: its ``malloc`` turns a failed allocation into the driver's out-of-memory exit.
    """
    renamed = False
    for name, pooled in _RENAMED.items():
        try:
            function = module.get_function(name)
        except NameError:
            continue
        _install()
        function.name = pooled
        renamed = True
    return renamed


def resolve_pool_symbols(names: list[str]) -> None:
    """Make the pool's functions resolvable if ``names`` (a module's declarations) use them."""
    if {*_RENAMED.values(), OOM_ENTER, OOM_LEAVE} & set(names):
        _install()


def release() -> None:
    """Return every block the pool keeps to the C library."""
    if "release" in _state:
        _state["release"]()


def failed_bytes() -> int:
    """Size of the last allocation that failed in differentiated code (0 if none)."""
    return int(_state["failed"]()) if "failed" in _state else 0


def kept_bytes() -> int:
    """Bytes of the blocks the pool keeps now (each counted as its power-of-two size).

    Right after :func:`release` and one gradient call, this is the memory the
    call allocated in large blocks (its tape and temporaries) and freed.
    """
    return int(_state["kept"]()) if "kept" in _state else 0
