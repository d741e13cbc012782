"""Matrix work stays at BLAS speed in the gradient: a 500x500 matrix-product loss.

Usage: ``.venv/bin/python benchmarks/matmul_speed.py``

Times, in one run and interleaved, the loss ``sum((A @ B) ** 2)`` (Numba calls
BLAS gemm) and its gradient with respect to both matrices (Enzyme's BLAS rules:
more gemm calls), and reports the ratio. A naive triple-loop derivative would
be orders of magnitude slower.
"""

from __future__ import annotations

import timeit

import numpy as np
from numba import njit

import pyjlad


@njit
def loss(a, b):
    c = a @ b
    return np.sum(c * c)


def main(n: int = 500) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(n, n)), rng.normal(size=(n, n))
    grad = pyjlad.grad(loss, wrt=(0, 1))
    loss(a, b)
    grad(a, b)
    t_f = min(timeit.repeat(lambda: loss(a, b), number=5, repeat=7)) / 5
    t_g = min(timeit.repeat(lambda: grad(a, b), number=5, repeat=7)) / 5
    print(f"{n}x{n}: loss {t_f * 1e3:.2f} ms, gradient wrt A and B {t_g * 1e3:.2f} ms, "
          f"ratio {t_g / t_f:.2f}")


if __name__ == "__main__":
    main()
