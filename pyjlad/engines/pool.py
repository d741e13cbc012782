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
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm

from .. import config, runtime
from ..errors import OutOfMemoryError
from .driver import OOM_ENTER, OOM_LEAVE

__all__ = ["POOL_MALLOC", "POOL_CALLOC", "POOL_FREE", "use_pool", "resolve_pool_symbols", "release", "kept_bytes",
           "kept_by", "failed_bytes",
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
    """The pool's module (pyjlad/runtime/pool.ll) for a capacity of ``cap`` bytes and thread key ``key``."""
    n = _MAX_CLASS - _MIN_CLASS + 1
    return runtime.fill("pool.ll", key=key, capacity=cap, min_class=_MIN_CLASS, max_class=_MAX_CLASS,
                        min_bytes=MIN_BYTES, slots=SLOTS, classes=n, slot_count=n * SLOTS)


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
