"""The per-call work of a vector-mode Jacobian or Hessian outside its compiled sweeps (issue 20).

Usage: ``.venv/bin/python benchmarks/vector_overhead.py [--n 64] [--chunk 32] [--rounds 300]``.

For the functions of ``benchmarks/vector_mode.py`` (a 64x64 ``tanh(W @ x + b)`` Jacobian in
both modes and the Hessian of ``sum(softplus(W @ x)) + |x|^2 / 2``), each call's time is split
at the engine's boundary: the time inside the embedded engine's compiled sweeps (the
``Compiled`` callables, Numba's dispatch included), and the rest, pyjlad's Python (checks,
planning or its replay, copies into and out of the sweeps' buffers). Each figure is the
minimum over ``rounds`` short rounds of the per-call time (this machine is shared: the
minimum is the least disturbed round), the tasks interleaved. Run it with ``PYTHONPATH``
naming another checkout to measure that one's pyjlad with the same script.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

import pyjlad
from pyjlad.engines import embedded

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import describe  # noqa: E402
from vector_mode import layer, loss  # noqa: E402

_inside = [0.0]


def _timed_engine() -> None:
    """Count the time spent in the embedded engine's compiled sweeps."""
    call = embedded.Compiled.__call__

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return call(self, *args, **kwargs)
        finally:
            _inside[0] += time.perf_counter() - start

    embedded.Compiled.__call__ = timed


def _split(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    """``(per call, of which in the sweeps)`` over one round of ``calls`` calls."""
    _inside[0] = 0.0
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    total = time.perf_counter() - start
    return total / calls, _inside[0] / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--calls", type=int, default=20, help="calls per round")
    opts = parser.parse_args()
    rng = np.random.default_rng(20)
    n, chunk = opts.n, opts.chunk
    w = rng.normal(size=(n, n)) / np.sqrt(n)
    x = rng.normal(size=n)
    b = rng.normal(size=n)
    tasks = {
        f"Jacobian {n}x{n}, mode='forward'": lambda: pyjlad.jacobian(layer, w, x, b, wrt=1, mode="forward",
                                                                       chunk=chunk),
        f"Jacobian {n}x{n}, mode='reverse'": lambda: pyjlad.jacobian(layer, w, x, b, wrt=1, mode="reverse",
                                                                       chunk=chunk),
        f"Hessian {n}x{n}": lambda: pyjlad.hessian(loss, x, w, chunk=chunk),
    }
    for fn in tasks.values():  # compile
        fn()
    _timed_engine()
    best = {name: (float("inf"),) * 3 for name in tasks}  # (per call, in the sweeps, outside them)
    for _ in range(opts.rounds):
        for name, fn in tasks.items():
            total, inside = _split(fn, opts.calls)
            low_total, low_inside, low_outside = best[name]
            best[name] = (min(low_total, total), min(low_inside, inside), min(low_outside, total - inside))
    print(f"## Per-call work outside the sweeps: chunk {chunk}\n")
    print(f"command: `.venv/bin/python benchmarks/vector_overhead.py --n {n} --chunk {chunk} --rounds {opts.rounds}`"
          f"  \nmachine: {describe()}; versions: numba "
          f"{numba.__version__}, pyjlad {pyjlad.__version__} ({Path(pyjlad.__file__).resolve().parent.parent.name})"
          f"  \nload average (1 min) after: {os.getloadavg()[0]:.2f}\n")
    print("| task | per call | in the compiled sweeps | outside them (Python) |")
    print("|---|---:|---:|---:|")
    for name, (total, inside, outside) in best.items():
        print(f"| {name} | {total * 1e6:,.1f} us | {inside * 1e6:,.1f} us | {outside * 1e6:,.1f} us |")
    print(f"\nEach column the minimum over {opts.rounds} rounds of {opts.calls} calls (not a sum of the others).")


if __name__ == "__main__":
    main()
