"""Guard zones around the shadows pyjlad allocates, and the check that a derivative wrote none of them.

Numba does not check indices unless asked (``boundscheck``), so a function that reads one element past
the end of its argument (``x[i + 1]`` up to the last ``i``) runs and returns an undefined value. Its
reverse-mode derivative then adds that read's adjoint one element past the end of the argument's shadow:
into glibc's bookkeeping of the next allocation, and glibc aborted the whole process later
(``free(): invalid next size``, ``malloc(): corrupted top size``; a Jupyter kernel died with it).

Each shadow :func:`pyjlad.sweep.shadow_like` makes lies in a zeroed buffer with a guard zone,
as wide as the array's largest step between neighbouring elements along one axis (at least 64 bytes), after
its elements (and before them too for a strided view, whose reversed axes step down): an index one past the
end along any axis lands there instead.
After the sweep :func:`pyjlad.out_of_bounds.check_guards` raises :class:`~pyjlad.errors.OutOfBoundsError`
where a zone is no longer zero (:func:`overran`). A read further out than one step still reaches memory that
is not the shadow's: only ``boundscheck=True`` finds every such read. (A read whose adjoint is exactly zero
writes nothing and is not found: it harms nothing either.)

Examples
--------
>>> import numpy as np
>>> shadow = guarded_zeros(np.ones((3, 5)))
>>> shadow.shape, shadow.base.size > shadow.size, overran(shadow)
((3, 5), True, False)
>>> shadow.base[-1] = 1.0  # what a write one row past the end does
>>> overran(shadow)
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["guarded", "guarded_zeros", "overran"]

#: The least width of a guard zone, in bytes; whole zones keep the shadow as aligned as its buffer.
_MIN_GUARD_BYTES = 64


def _extent(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> tuple[int, int]:
    """The lowest and one past the highest byte offset an array of ``shape`` and ``strides`` addresses."""
    low = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    high = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides)) + itemsize
    return low, high


def _guard_elements(strides: tuple[int, ...], itemsize: int) -> int:
    """The width of a guard zone, in elements: the largest step along one axis (``strides``), at least
    :data:`_MIN_GUARD_BYTES`, rounded up to a whole multiple of that."""
    step = max((_MIN_GUARD_BYTES, *strides, *(-s for s in strides)))
    return (step + _MIN_GUARD_BYTES - 1) // _MIN_GUARD_BYTES * _MIN_GUARD_BYTES // itemsize


def guarded(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Zeros of ``shape`` (C order) at the start of a buffer (its ``base``) that has a zeroed guard zone after
    them, one step along the widest axis (at least :data:`_MIN_GUARD_BYTES`) wide: a stack of a vector-mode
    sweep's shadows (an overrun of the last one lands there) or the shadows interleaved with their primal.

    >>> stacked = guarded((4, 3), np.float64)
    >>> stacked.base.size - stacked.size  # one row of 3, rounded up to 64 bytes
    8
    """
    dtype = np.dtype(dtype)
    size = int(np.prod(shape))
    if size == 0:
        return np.zeros(shape, dtype)
    strides = [dtype.itemsize] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    guard = _guard_elements(tuple(strides), dtype.itemsize)
    return np.zeros(size + guard, dtype)[:size].reshape(shape)


def guarded_zeros(x: np.ndarray) -> np.ndarray:
    """A zeroed array addressable with ``x``'s strides (compact ones where ``x`` is contiguous), inside a
    buffer (its ``base``) with a zeroed guard zone after the elements it addresses, and one before them too
    where ``x`` is not contiguous (a reversed view steps down from its first element)."""
    size = x.size
    if size == 0:
        return np.zeros(x.shape, x.dtype)
    flags = x.flags
    if x.ndim == 1 and flags.c_contiguous:  # the common case, kept cheap: a gradient of 1,000 floats takes ~10 us
        return np.zeros(size + _MIN_GUARD_BYTES // x.itemsize, x.dtype)[:size]
    if flags.c_contiguous or flags.f_contiguous:
        guard = _guard_elements(x.strides, x.itemsize)
        shadow = np.zeros(size + guard, x.dtype)[:size]
        return shadow.reshape(x.shape, order="C" if flags.c_contiguous else "F")
    itemsize = x.itemsize
    guard = _guard_elements(x.strides, itemsize)
    low, high = _extent(x.shape, x.strides, itemsize)
    span = (high - low + itemsize - 1) // itemsize
    buffer = np.zeros(span + 2 * guard, x.dtype)
    return np.ndarray(x.shape, dtype=x.dtype, buffer=buffer, offset=guard * itemsize - low, strides=x.strides)


def overran(shadow: np.ndarray) -> bool:
    """Whether something wrote into a guard zone of ``shadow``, made by :func:`guarded_zeros` or
    :func:`guarded` (``False`` for a shadow of no elements)."""
    buffer = shadow.base
    if buffer is None:
        return False
    flags = shadow.flags
    if flags.c_contiguous or flags.f_contiguous:
        return bool(np.count_nonzero(buffer[shadow.size:]))
    low, high = _extent(shadow.shape, shadow.strides, shadow.itemsize)
    span = (high - low + shadow.itemsize - 1) // shadow.itemsize
    guard = (buffer.size - span) // 2
    return bool(np.count_nonzero(buffer[:guard]) or np.count_nonzero(buffer[guard + span:]))
