"""The C library's next small allocations made to start as NaN, so that a derivative reading memory
it never wrote shows, every time, as NaN.

A new array's memory holds whatever its block last held. A derivative that reads such memory
before writing it (Enzyme's forward-mode BLAS rules scaled a new product's unset tangent by
``beta = 0``: ``tests/test_unset_outputs.py``) is right whenever the block held finite numbers,
and NaN when it held a NaN: a rare, unrepeatable wrong answer. :func:`poison_small_free_blocks`
makes it certain: it fills glibc's per-thread cache of free blocks (seven of each size up to
1,032 bytes, handed out last in, first out) with NaN, all bits set.

Examples
--------
>>> poison_small_free_blocks()  # the next small malloc of this thread returns NaN-filled memory
"""

from __future__ import annotations

import ctypes

__all__ = ["poison_small_free_blocks"]

_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]
#: glibc's per-thread cache: 7 free blocks per size class, classes 16 bytes apart, up to 1,032 bytes.
_SIZES = [size for size in range(24, 1032, 16) for _ in range(7)]


def poison_small_free_blocks() -> None:
    """Fill the C library's cache of small free blocks with NaN (all bits set)."""
    blocks = [_LIBC.malloc(size) for size in _SIZES]
    for block, size in zip(blocks, _SIZES):
        ctypes.memset(block, 0xFF, size)
    for block in reversed(blocks):
        _LIBC.free(block)
