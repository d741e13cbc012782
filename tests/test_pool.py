"""The block cache behind differentiated code's malloc/calloc/free (pyjlad/engines/pool.py)."""

from __future__ import annotations

import ctypes
import threading
import time

import llvmlite.binding as llvm
import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.engines import pool

_malloc_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)
_calloc_t = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
_free_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@pytest.fixture()
def functions():
    library = pool._install()
    pool.release()
    yield (_malloc_t(library.get_pointer_to_function(pool.POOL_MALLOC)),
           _calloc_t(library.get_pointer_to_function(pool.POOL_CALLOC)),
           _free_t(library.get_pointer_to_function(pool.POOL_FREE)))
    pool.release()


def test_large_blocks_are_reused_and_calloc_zeroes_them(functions) -> None:
    malloc, calloc, free = functions
    size = 3 * pool.MIN_BYTES + 5
    p = malloc(size)
    ctypes.memset(p, 0xAB, size)
    free(p)
    assert pool.kept_bytes() == 4 * pool.MIN_BYTES  # rounded up to a power of two
    q = calloc(size // 8 + 1, 8)
    assert q == p  # the kept block
    assert pool.kept_bytes() == 0
    assert not np.frombuffer((ctypes.c_char * size).from_address(q), np.uint8).any()
    free(q)


def test_small_and_foreign_blocks(functions) -> None:
    malloc, calloc, free = functions
    small = malloc(100)
    assert small
    free(small)  # kept in this thread's lists of small blocks
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    foreign = libc.malloc(4 * pool.MIN_BYTES)
    free(foreign)  # a plain malloc block may be kept...
    p = malloc(2 * pool.MIN_BYTES)
    free(p)
    libc.free.argtypes = [ctypes.c_void_p]
    q = malloc(2 * pool.MIN_BYTES)
    libc.free(q)  # ...and a pool block freed by the C library
    assert calloc(1 << 62, 1 << 62) is None  # overflow: NULL like calloc


def test_pool_is_shared_by_threads(functions) -> None:
    malloc, _, free = functions
    errors = []

    def churn() -> None:
        try:
            for _ in range(2000):
                p = malloc(pool.MIN_BYTES * 2)
                ctypes.memset(p, 1, 64)
                free(p)
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_capacity_setting(monkeypatch) -> None:
    module = llvm.parse_assembly("declare ptr @malloc(i64)\ndeclare void @free(ptr)\n"
                                 "define ptr @f() {\n  %p = call ptr @malloc(i64 8)\n  ret ptr %p\n}\n")
    monkeypatch.setenv("PYJLAD_POOL_BYTES", "0")
    assert pool.capacity() == 0
    # Allocations still go through the pool's malloc (its out-of-memory exit); it keeps nothing.
    assert pool.use_pool(module)
    assert module.get_function(pool.POOL_MALLOC).name == pool.POOL_MALLOC
    module = llvm.parse_assembly("declare ptr @malloc(i64)\ndeclare void @free(ptr)\n"
                                 "define ptr @f() {\n  %p = call ptr @malloc(i64 8)\n  ret ptr %p\n}\n")
    monkeypatch.setenv("PYJLAD_POOL_BYTES", "lots")
    with pytest.raises(ValueError, match="PYJLAD_POOL_BYTES"):
        pool.capacity()
    monkeypatch.delenv("PYJLAD_POOL_BYTES")
    assert pool.use_pool(module)
    assert module.get_function(pool.POOL_MALLOC).name == pool.POOL_MALLOC


@njit
def _temporaries(x):
    y = np.sin(x) * x  # a temporary large enough for the pool
    return np.sum(y * y)


def test_repeated_gradients_through_the_pool_stay_exact() -> None:
    x = np.linspace(-2.0, 2.0, 50_000)
    expected = 2 * np.sin(x) * x * (np.cos(x) * x + np.sin(x))
    grad = pyjlad.grad(_temporaries)
    for _ in range(5):
        np.testing.assert_allclose(grad(x), expected, rtol=1e-12, atol=1e-12)


def test_small_blocks_are_kept_by_the_thread_that_freed_them(functions) -> None:
    malloc, calloc, free = functions
    p = malloc(100)  # rounded up to 128 bytes
    free(p)
    assert pool.small_kept_bytes() == 128
    assert malloc(120) == p  # the same size class, taken back
    assert pool.small_kept_bytes() == 0
    ctypes.memset(p, 0xAB, 128)
    free(p)
    q = calloc(16, 8)
    assert q == p and not np.frombuffer((ctypes.c_char * 128).from_address(q), np.uint8).any()
    free(q)
    pool.release()
    assert pool.small_kept_bytes() == 0


def test_a_threads_small_blocks_are_emptied_when_it_exits(functions) -> None:
    malloc, _, free = functions

    kept_inside = []

    def churn() -> None:
        blocks = [malloc(48) for _ in range(100)]
        for block in blocks:
            free(block)
        kept_inside.append(pool.small_kept_bytes())

    before = pool.small_kept_bytes()
    thread = threading.Thread(target=churn)
    thread.start()
    thread.join()
    assert kept_inside == [before + 100 * 64]  # kept while the thread lived
    # The lists are emptied by the thread's pthread key destructor, which runs as the OS thread ends: after
    # Thread.join() has returned (CPython releases the join before the thread's C-level exit), so wait for it.
    deadline = time.monotonic() + 30.0
    while pool.small_kept_bytes() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool.small_kept_bytes() == before


def test_realloc_keeps_the_contents_and_takes_pool_blocks(functions) -> None:
    malloc, _, free = functions
    realloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        pool._install().get_pointer_to_function(pool.POOL_REALLOC))
    p = malloc(64)
    ctypes.memmove(p, bytes(range(64)), 64)
    assert realloc(p, 40) == p  # large enough already
    q = realloc(p, 1000)
    assert bytes((ctypes.c_char * 64).from_address(q)) == bytes(range(64))
    assert pool.small_kept_bytes() == 64  # the old block, kept for the next 64-byte request
    assert realloc(q, 0) is None  # frees, as glibc's realloc(p, 0) does
    r = realloc(None, 10)
    assert r
    free(r)
