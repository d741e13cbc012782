"""Sample points that keep a margin from the branch thresholds of the corpus programs.

A program whose control flow depends on its data (a running maximum, an early exit, a
clamp) is differentiable almost everywhere, and its JAX twin is an exact oracle only where
neither side is near a switch of branch. These helpers draw arguments that stay clear of
the switches, so any disagreement is pyjlad's and not the sample's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def distinct(rng: np.random.Generator, n: int, lo: float = -2.0, hi: float = 2.0,
             gap: float = 0.05) -> np.ndarray:
    """``n`` values in ``[lo, hi]`` in random order, any two at least ``gap`` apart."""
    step = (hi - lo) / max(n - 1, 1)
    if step < 2 * gap:
        raise ValueError(f"cannot place {n} values {gap} apart in [{lo}, {hi}]")
    grid = lo + step * np.arange(n)
    jitter = rng.uniform(-(step - gap) / 2, (step - gap) / 2, n)
    jitter[0], jitter[-1] = abs(jitter[0]), -abs(jitter[-1])
    return rng.permutation(grid + jitter)


def away(rng: np.random.Generator, shape: int | tuple[int, ...], lo: float, hi: float,
         thresholds: Sequence[float] = (0.0,), margin: float = 0.1) -> np.ndarray:
    """Uniform values in ``[lo, hi]`` at least ``margin`` from every threshold."""
    x = rng.uniform(lo, hi, shape)
    for _ in range(100):
        near = np.zeros(x.shape, dtype=bool)
        for t in thresholds:
            near |= np.abs(x - t) < margin
        if not near.any():
            return x
        x[near] = rng.uniform(lo, hi, int(near.sum()))
    raise ValueError("could not keep the sample away from the thresholds")


def split_between(values: np.ndarray, k: int) -> float:
    """A threshold halfway between the ``k``-th and ``k+1``-th smallest of ``values``."""
    s = np.sort(np.asarray(values).ravel())
    return float(0.5 * (s[k] + s[k + 1]))
