"""Host callbacks of :mod:`pyjlad.interop.jax` that ``jax.vmap`` batches onto :func:`pyjlad.vmap`.

:func:`batched_callback` wraps ``jax.pure_callback`` with ``vmap_method="expand_dims"``:
under ``jax.vmap`` (at any depth) the host function receives each argument with
the batch axes in front (size 1 for an argument that is not batched). The
arguments are then laid out for one :func:`pyjlad.vmap` call, a ``prange`` loop
over all samples on Numba's threads: batched arguments flattened to one leading
axis (``in_axes=0``), the others passed whole (``in_axes=None``), and the
results reshaped to the batch shape. Without ``jax.vmap`` the host function runs
once, on the arguments as they are.

JAX hands a callback read-only buffers: an array the function writes (``written``
says which) is given to it as a copy, its own in each sample of a batch. Until
2026-12-06 such a function failed inside the callback with Numba's "Cannot modify
readonly array" (a user-style probe); the PyTorch bridge copied already.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

__all__ = ["batched_callback", "host_argument", "host_arguments"]


def host_argument(a: Any) -> Any:
    """A JAX array as pyjlad takes it: a 0-d array as a NumPy scalar of its dtype, else a NumPy array."""
    array = np.asarray(a)
    return array[()] if array.ndim == 0 else array


def _leading(array: np.ndarray, ndim: int) -> tuple[int, ...]:
    return array.shape[: array.ndim - ndim]


#: Which of one call's host arguments the function writes (positions), for a copy of each.
Written = Callable[[Sequence[Any]], set[int]]


def host_arguments(arrays: Sequence[Any], written: Written | None) -> list[Any]:
    """The host arguments of one call (:func:`host_argument`), a copy of each array the function writes."""
    args = [host_argument(a) for a in arrays]
    for k in written(args) if written is not None else ():
        args[k] = np.array(args[k], copy=True)
    return args


def _run_batched(single: Callable[..., tuple[Any, ...]], batched: Callable[[tuple[Any, ...]], Callable[..., Any]],
                 sample_ndims: Sequence[int], arrays: tuple[np.ndarray, ...],
                 written: Written | None = None) -> tuple[np.ndarray, ...]:
    """Call ``single`` once, or ``batched(in_axes)`` over the batch that ``jax.vmap`` put in front."""
    leading = [_leading(a, nd) for a, nd in zip(arrays, sample_ndims)]
    if not any(leading):
        return single(*host_arguments(arrays, written))
    batch = np.broadcast_shapes(*leading)
    n = math.prod(batch)
    first = [host_argument(a[(0,) * len(lead)]) if math.prod(lead) else host_argument(a)
             for a, lead in zip(arrays, leading)]
    writes = written(first) if written is not None and n else set()
    in_axes, laid_out = [], []
    for k, (a, nd, lead) in enumerate(zip(arrays, sample_ndims, leading)):
        sample = a.shape[a.ndim - nd:]
        if k in writes:  # each sample its own copy
            in_axes.append(0)
            laid_out.append(np.array(np.broadcast_to(a, batch + sample)).reshape((n, *sample)))
        elif n > 1 and math.prod(lead) == 1:  # not batched: every sample shares it
            in_axes.append(None)
            laid_out.append(host_argument(a.reshape(sample)))
        else:
            in_axes.append(0)
            laid_out.append(np.ascontiguousarray(np.broadcast_to(a, batch + sample)).reshape((n, *sample)))
    results = batched(tuple(in_axes))(*laid_out)
    return tuple(np.asarray(r).reshape(batch + np.shape(r)[1:]) for r in results)


def batched_callback(single: Callable[..., tuple[Any, ...]], batched: Callable[[tuple[Any, ...]], Callable[..., Any]],
                     result_shapes: tuple[Any, ...], args: Sequence[Any], written: Written | None = None) -> tuple[Any, ...]:
    """``jax.pure_callback`` of ``single(*args)`` (a tuple of results), batched by ``batched(in_axes)``.

    ``batched(in_axes)`` returns a function of the laid-out arguments whose
    results have the samples along a new leading axis (a :func:`pyjlad.vmap`).
    ``written(host arguments of one sample)``: the positions of the arrays the
    function writes, each given as a copy.
    """
    sample_ndims = tuple(np.ndim(a) for a in args)
    dtypes = tuple(r.dtype for r in result_shapes)

    def host(*arrays: Any) -> tuple[np.ndarray, ...]:
        out = _run_batched(single, batched, sample_ndims, tuple(np.asarray(a) for a in arrays), written)
        return tuple(np.asarray(r, dtype=d) for r, d in zip(out, dtypes))

    return jax.pure_callback(host, tuple(result_shapes), *args, vmap_method="expand_dims")
