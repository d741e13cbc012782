"""Argument builders for the NumPy-API families: shapes, dtypes, memory layouts, margins.

Every builder takes the seeded ``numpy.random.Generator`` of :func:`corpus.check.arguments`
and returns an array whose *values* do not depend on the layout, so one program checked
with a contiguous, strided, reversed, transposed or Fortran-ordered input differentiates
the same function through different code (Numba compiles one specialisation per layout).

Values keep a margin from the kinks of non-smooth functions (``abs``, ``maximum``, ``clip``,
``where``): :func:`away` moves entries within ``margin`` of a threshold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Rng = np.random.Generator
Builder = Callable[[Rng], tuple[Any, ...]]

LAYOUTS = ("C", "strided", "reversed", "transposed", "F")


def away(x: np.ndarray, thresholds: Sequence[float] = (0.0,), margin: float = 0.1) -> np.ndarray:
    """``x`` with every entry at least ``margin`` from each threshold (moved outwards)."""
    x = np.array(x, dtype=np.float64)
    for t in thresholds:
        near = np.abs(x - t) < margin
        x[near] = t + margin * np.where(x[near] >= t, 1.0, -1.0)
    return x


def distinct(x: np.ndarray, gap: float = 0.05) -> np.ndarray:
    """``x`` with entries at least ``gap`` apart (no ties for max, sort, median)."""
    flat = np.array(x, dtype=np.float64).ravel()
    order = np.argsort(flat)
    ranks = np.empty_like(order)
    ranks[order] = np.arange(flat.size)
    return (flat + gap * ranks).reshape(np.shape(x))


def layout(x: np.ndarray, kind: str) -> np.ndarray:
    """An array with the values of ``x`` in memory layout ``kind`` (see :data:`LAYOUTS`).

    ``strided``: every other element of a larger array along each axis; ``reversed``: a
    negative-stride view; ``transposed``: the transpose of a C-ordered array (for 1-D arrays,
    a column of a matrix); ``F``: a Fortran-ordered copy.
    """
    x = np.asarray(x)
    if kind == "C":
        return np.ascontiguousarray(x)
    if kind == "strided":
        big = np.full(tuple(2 * n + 1 for n in x.shape), np.nan, dtype=x.dtype)
        view = big[tuple(slice(1, None, 2) for _ in x.shape)]
        view[...] = x
        return view
    if kind == "reversed":
        full = np.ascontiguousarray(x[tuple(slice(None, None, -1) for _ in x.shape)])
        return full[tuple(slice(None, None, -1) for _ in x.shape)]
    if kind == "transposed":
        if x.ndim == 1:
            big = np.full((x.shape[0], 3), np.nan, dtype=x.dtype)
            big[:, 1] = x
            return big[:, 1]
        return np.ascontiguousarray(x.T).T
    if kind == "F":
        return np.asfortranarray(x)
    raise ValueError(f"unknown layout {kind!r}")


def normal(*shape: int, dtype: Any = np.float64, kind: str = "C", scale: float = 1.0,
           thresholds: Sequence[float] | None = None, gap: float | None = None) -> Callable[[Rng], np.ndarray]:
    """A builder of one standard-normal array (times ``scale``) of ``shape``, ``dtype``, layout ``kind``.

    ``thresholds`` keeps entries 0.1 away from those values; ``gap`` makes entries distinct.
    """

    def build(rng: Rng) -> np.ndarray:
        x = scale * rng.standard_normal(shape)
        if thresholds is not None:
            x = away(x, thresholds)
        if gap is not None:
            x = distinct(x, gap)
        return layout(x.astype(dtype), kind)

    return build


def positive(*shape: int, dtype: Any = np.float64, kind: str = "C", low: float = 0.5,
             high: float = 2.0) -> Callable[[Rng], np.ndarray]:
    """A builder of a uniform array in ``[low, high)`` (logs, square roots, powers, products)."""

    def build(rng: Rng) -> np.ndarray:
        return layout(rng.uniform(low, high, shape).astype(dtype), kind)

    return build


def spd(n: int, dtype: Any = np.float64, kind: str = "C") -> Callable[[Rng], np.ndarray]:
    """A builder of a well-conditioned symmetric positive definite ``n x n`` matrix."""

    def build(rng: Rng) -> np.ndarray:
        b = rng.standard_normal((n, n))
        return layout((b @ b.T / n + np.eye(n)).astype(dtype), kind)

    return build


def well_conditioned(n: int, dtype: Any = np.float64, kind: str = "C") -> Callable[[Rng], np.ndarray]:
    """A builder of a nonsymmetric ``n x n`` matrix near ``2 I`` (invertible, modest condition number)."""

    def build(rng: Rng) -> np.ndarray:
        return layout((2.0 * np.eye(n) + 0.4 * rng.standard_normal((n, n))).astype(dtype), kind)

    return build


def args(*builders: Callable[[Rng], Any] | Any) -> Builder:
    """``make_args`` from per-argument builders; a non-callable entry is passed as is."""

    def make(rng: Rng) -> tuple[Any, ...]:
        return tuple(b(rng) if callable(b) else b for b in builders)

    return make


def indices(n: int, size: int, unique: bool = False) -> Callable[[Rng], np.ndarray]:
    """A builder of an ``int64`` index array into an axis of length ``n``."""

    def build(rng: Rng) -> np.ndarray:
        if unique:
            return rng.permutation(n)[:size].astype(np.int64)
        return rng.integers(0, n, size).astype(np.int64)

    return build


def scalar(low: float = -1.0, high: float = 1.0, dtype: Any = float) -> Callable[[Rng], Any]:
    """A builder of one float in ``[low, high)``."""

    def build(rng: Rng) -> Any:
        return dtype(rng.uniform(low, high))

    return build


#: Tolerances for float32 programs (their oracle runs in float64 on the same values cast up).
F32 = {"rtol": 2e-4, "atol": 1e-5}

#: Transforms for programs returning arrays.
ARRAY = ("jacobian", "jvp", "vjp")
