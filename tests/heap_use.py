"""Bytes the C library's allocator has handed out and not got back: a leak probe for repeated calls.

``mallinfo2`` (glibc 2.33+) counts every ``malloc`` block in use, the ones pyjlad's pool keeps for reuse
included; a derivative called again and again reaches a steady state after its first calls, so any growth
after that is memory no call gives back.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_in_use() -> int:
    """Bytes of ``malloc`` blocks in use now (heap and separately mapped blocks)."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def growth_over(call: Callable[[], object], warm: int = 3, repeats: int = 10) -> int:
    """Bytes in use after ``repeats`` more calls of ``call`` than after ``warm`` calls.

    >>> growth_over(lambda: None) <= 0
    True
    """
    for _ in range(warm):
        call()
    before = heap_in_use()
    for _ in range(repeats):
        call()
    return heap_in_use() - before
