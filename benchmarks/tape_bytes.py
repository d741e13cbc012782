"""Tape bytes per gradient for the workloads of the main table, and the heat stencil's time ratio (issue 20).

Usage: ``.venv/bin/python benchmarks/tape_bytes.py``.

For each workload of :func:`workloads.build`: the bytes one gradient call allocates in large
blocks (Enzyme's tape, shadows and temporaries), measured as the suite measures them: pyjlad's
block pool (``pyjlad/engines/pool.py``) is emptied, one gradient runs, and the pool then holds
every block of 64 KiB or more the call freed, each counted as its power-of-two size. Beside it,
one state per step where the workload has steps (the heat grid). Beside them, each workload's
function and gradient times and their ratio (best per-call times taken in the same run), the gradient
both as ``pyjlad.grad`` (Enzyme told the value is not needed: ``pyjlad.sweep.Sweep.value``) and as
``pyjlad.value_and_grad`` (the value computed too, as ``grad`` did before). Prints markdown.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import describe  # noqa: E402


def best_time(fn, budget: float = 1.0, repeats: int = 5) -> float:
    """Best per-call time (s) of ``fn`` over ``repeats`` timed batches within about ``budget`` seconds."""
    fn()
    start = time.perf_counter()
    fn()
    number = max(1, int(budget / repeats / max(time.perf_counter() - start, 1e-7)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def tape_bytes(f, args: tuple, wrt: tuple[int, ...]) -> int:
    """Bytes the gradient of ``f`` at ``args`` allocates in blocks the pool keeps (one warmed call)."""
    import pyjlad
    from pyjlad.engines import pool

    df = pyjlad.grad(f, wrt=wrt)
    return pool.kept_by(lambda: df(*args))


def main() -> None:
    import numba
    import workloads as w

    import pyjlad

    rows = []
    for load in w.build(peers=False):
        kept = tape_bytes(load.numba_f, load.args, load.wrt)
        inputs = sum(np.asarray(a).nbytes for a in load.args)
        df = pyjlad.grad(load.numba_f, wrt=load.wrt)
        vdf = pyjlad.value_and_grad(load.numba_f, wrt=load.wrt)
        primal = best_time(lambda load=load: load.numba_f(*load.args), budget=0.5)
        gradient = best_time(lambda load=load, df=df: df(*load.args), budget=0.5)
        with_value = best_time(lambda load=load, vdf=vdf: vdf(*load.args), budget=0.5)
        rows.append((load.name, kept, inputs, primal, gradient, with_value))
    grid = w.GRID * w.GRID * 8

    print("### Tape bytes per gradient\n")
    print(f"Command: `python benchmarks/tape_bytes.py`; machine: {describe()} "
          f"(shared); Python {platform.python_version()}, numba {numba.__version__}, "
          f"numpy {np.__version__}.\n")
    print("| workload | blocks one gradient allocates (pool) | input | function | gradient (`grad`) | ratio "
          "| `value_and_grad` | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, kept, inputs, primal, gradient, with_value in rows:
        print(f"| {name} | {kept / 2**20:.1f} MiB | {inputs / 2**20:.2f} MiB | {primal * 1e3:.3f} ms "
              f"| {gradient * 1e3:.3f} ms | {gradient / primal:.2f} | {with_value * 1e3:.3f} ms "
              f"| {with_value / primal:.2f} |")
    print(f"\nThe pool counts each block as its power-of-two size. Heat stencil: one {w.GRID}x{w.GRID} grid "
          f"per step is {grid * w.HEAT_STEPS / 2**20:.1f} MiB over {w.HEAT_STEPS} steps "
          f"({2 ** int(np.ceil(np.log2(grid * w.HEAT_STEPS))) / 2**20:.0f} MiB as the pool counts it), the least "
          "a reverse sweep without recomputation keeps: kappa's adjoint needs every step's Laplacian.")
    print("\nTimes are the best per-call times of a few batches, function and gradients measured one after the "
          "other in this run; each ratio is that gradient's time / the function's. `grad` returns only the "
          "gradient, so Enzyme may leave out what only computes the value (a loop summing the loss's terms); "
          "`value_and_grad` computes it too.")


if __name__ == "__main__":
    main()
