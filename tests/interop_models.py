"""Numba functions shared by the JAX and PyTorch bridge tests (their JAX/torch twins stay in each test file)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit
def energy(x, k):
    """A chain energy: sum of k (x[i+1] - x[i])^2 + k cos(x[i])."""
    s = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        s += k * d * d + math.cos(x[i]) * k
    return s


@njit
def counted(x, n):
    """sum of sin(x[i]) x[i] over the first n elements (an integer argument)."""
    s = 0.0
    for i in range(n):
        s += math.sin(x[i]) * x[i]
    return s


@njit
def squares(x):
    """An array-valued function."""
    return x * x + np.sin(x)
