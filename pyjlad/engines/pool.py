"""A cache of large memory blocks for differentiated code.

A gradient allocates the same large blocks on every call: Enzyme's tape (the
values its reverse sweep reads back), shadows of temporaries, Numba's
temporary arrays. The C library hands blocks of that size out of fresh pages,
mapped on ``malloc`` and unmapped again on ``free`` (or trimmed off the heap),
so every call pays a page fault per 4 KiB page: the 500x500 matrix-product
gradient spent more time in the kernel's page-fault handler than in its matrix
products, and with two BLAS threads the unmapping also stalls the other
thread (TLB shootdowns).

Small blocks cost too, in another way: a loop that allocates small arrays per
iteration (``np.linalg.inv(v)`` per voxel, ``np.empty(k)`` per sample) keeps each
of them and its shadow alive until the reverse sweep frees them, hundreds of
thousands of blocks per call, more than the C library's per-thread cache holds:
``remote_stats``' gradient spent about 60% of its time in glibc's ``malloc`` and
``free`` (merging neighbouring free blocks, then returning the heap's top to the
kernel and faulting it in again on the next call).

The differentiated module's ``malloc``, ``calloc``, ``realloc`` and ``free`` are renamed to this
pool's functions when it is loaded (:func:`use_pool`). Blocks of at least
:data:`MIN_BYTES` are rounded up to a power of two and, when freed, kept (up to
:data:`SLOTS` per size, :func:`capacity` bytes in all) for the next request of
that size, in one spin-locked table shared by all threads. Smaller blocks are
rounded up to a power of two (16 bytes at least) and, when freed, kept in
lists of the freeing thread's own (up to :func:`small_capacity` bytes per
thread), which its next requests of that size take first, with no lock another
thread contends for; a thread's lists are emptied when it exits. A kept block is an
ordinary ``malloc`` block, so memory from the pool may be freed by Numba's
runtime with ``free`` and the other way round. :func:`release` returns the kept
blocks, every thread's, to the C library.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm

from .. import config, runtime
from ..allocation_exits import OOM_CHECK
from ..errors import OutOfMemoryError
from .driver import OOM_ENTER, OOM_LEAVE

__all__ = ["POOL_MALLOC", "POOL_CALLOC", "POOL_REALLOC", "POOL_FREE", "use_pool", "resolve_pool_symbols", "release",
           "kept_bytes", "small_kept_bytes", "kept_by", "failed_bytes", "capacity", "small_capacity", "MIN_BYTES",
           "SLOTS"]

POOL_MALLOC, POOL_CALLOC, POOL_FREE = "pyjlad_pool_malloc", "pyjlad_pool_calloc", "pyjlad_pool_free"
POOL_REALLOC = "pyjlad_pool_realloc"
_RENAMED = {"malloc": POOL_MALLOC, "calloc": POOL_CALLOC, "realloc": POOL_REALLOC, "free": POOL_FREE}
_MIN_CLASS, _MAX_CLASS = 16, 36
_SMALLEST_CLASS = 4  # 16 bytes: room for the link of a kept small block
#: Smallest block the pool keeps (smaller ones are cheap for the C library).
MIN_BYTES = 1 << _MIN_CLASS
#: Blocks kept per power-of-two size.
SLOTS = 16


def capacity() -> int:
    """Most bytes the pool keeps: ``$PYJLAD_POOL_BYTES`` (0 disables the pool), default 1 GiB."""
    return config.pool_bytes()


def small_capacity(cap: int | None = None) -> int:
    """Most bytes of small blocks (under :data:`MIN_BYTES`) each thread keeps: a quarter of
    :func:`capacity` (or of ``cap``), so 256 MiB by default and none with ``PYJLAD_POOL_BYTES=0``.

    >>> small_capacity(1 << 30) == 256 * 2**20
    True
    """
    return (capacity() if cap is None else cap) // 4


def _pool_ir(cap: int, key: int) -> str:
    """The pool's module (pyjlad/runtime/pool.ll) for a capacity of ``cap`` bytes and thread key ``key``."""
    n = _MAX_CLASS - _MIN_CLASS + 1
    return runtime.fill("pool.ll", key=key, capacity=cap, min_class=_MIN_CLASS, max_class=_MAX_CLASS,
                        slots=SLOTS, classes=n, slot_count=n * SLOTS,
                        small_capacity=small_capacity(cap), small_classes=_MIN_CLASS - _SMALLEST_CLASS,
                        small_bytes=MIN_BYTES // 2)


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
            if ctypes.CFUNCTYPE(ctypes.c_int)(library.get_pointer_to_function("pyjlad_pool_init"))() != 0:
                raise OutOfMemoryError("pthread_key_create failed (the pool's per-thread lists)")
            for name in (*_RENAMED.values(), OOM_ENTER, OOM_LEAVE, OOM_CHECK):
                llvm.add_symbol(name, library.get_pointer_to_function(name))
            _state["library"] = library
            _state["release"] = ctypes.CFUNCTYPE(None)(library.get_pointer_to_function("pyjlad_pool_release"))
            _state["kept"] = ctypes.CFUNCTYPE(ctypes.c_int64)(library.get_pointer_to_function("pyjlad_pool_kept"))
            _state["small_kept"] = ctypes.CFUNCTYPE(ctypes.c_int64)(
                library.get_pointer_to_function("pyjlad_pool_small_kept"))
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
    """Route ``module``'s ``malloc``, ``calloc``, ``realloc`` and ``free`` through the pool (renames their
    declarations).

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
    if {*_RENAMED.values(), OOM_ENTER, OOM_LEAVE, OOM_CHECK} & set(names):
        _install()


def release() -> None:
    """Return every block the pool keeps, large and small, every thread's, to the C library."""
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


def small_kept_bytes() -> int:
    """Bytes of the small blocks (under :data:`MIN_BYTES`) all threads keep now, each counted as its
    power-of-two size."""
    return int(_state["small_kept"]()) if "small_kept" in _state else 0


def kept_by(call: Callable[[], object]) -> int:
    """Bytes the pool keeps after ``call()`` runs once more on an emptied pool: the large blocks (tape,
    shadows, temporaries) one warmed call allocates and frees. ``call`` runs twice; the pool is emptied after.

    >>> kept_by(lambda: None)
    0
    """
    call()  # warmed: built and its first blocks taken
    release()
    call()
    kept = kept_bytes()
    release()
    return kept
