"""What the parallel-derivative tests check around every gradient they take (tests/test_*.py import it)."""

from __future__ import annotations

import warnings

import numpy as np

import pyjlad
from pyjlad.errors import ParallelFallbackWarning


def parallel_grad(f, args: tuple, wrt) -> tuple:
    """``pyjlad.grad(f, wrt=wrt)(*args)`` as a tuple, failing on a ``ParallelFallbackWarning`` (the parallel
    derivative must have been built) and on any change to the caller's arrays."""
    copies = [np.copy(a) for a in args]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        g = pyjlad.grad(f, wrt=wrt)(*args)
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)
    return g if isinstance(g, tuple) else (g,)
