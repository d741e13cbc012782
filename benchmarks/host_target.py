"""What targeting this machine's CPU in the derivative's final optimization changes (``HOST_TARGET``).

Usage: ``.venv/bin/python benchmarks/host_target.py [--repeats 7]``.

pyjlad runs Enzyme in one ``opt-15`` process and the final ``default<O2>`` in a second one with
``pyjlad.engines.differentiate.HOST_TARGET`` (``-mcpu=native -unroll-runtime=false``). This script
builds every derivative three times in one process, from fresh copies of the same ``@njit``
functions (the disk cache off, so each variant is built here), with the final ``opt`` given:

- ``baseline``: no target options (a baseline x86-64: SSE2; what pyjlad did before);
- ``cpu``: ``-mcpu=native`` alone (the CPU's vector width and its loop unrolling);
- ``shipped``: :data:`~pyjlad.engines.differentiate.HOST_TARGET`.

Workloads: the gradients of ``benchmarks/workloads.py`` (the main table's) and the 64x64
Jacobians and Hessian of ``benchmarks/vector_mode.py``. Each figure is the median over
``repeats`` rounds of a ~0.1 s loop, the rounds interleaving the variants; ratios are to
``baseline`` in this one run. Every variant's result is checked equal to the baseline's to
rounding (relative 1e-12): Enzyme writes the derivative's own arithmetic with fast-math flags
(its ``-enzyme-fast-math`` default), which lets the optimizer reassociate it differently per target.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np
from numba import njit

import pyjlad
import pyjlad.engines.differentiate as differentiate

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vector_mode  # noqa: E402
import workloads  # noqa: E402

VARIANTS = {"baseline": (), "cpu": ("-mcpu=native",), "shipped": differentiate.HOST_TARGET}


def _tasks() -> dict[str, Callable[[], object]]:
    """Every timed call, on fresh copies of the functions (so that this variant builds its own derivatives)."""
    tasks: dict[str, Callable[[], object]] = {}
    for wl in workloads.build(include_large=True, peers=False):
        g = pyjlad.grad(njit(wl.numba_f.py_func), wrt=wl.wrt)
        tasks[f"gradient: {wl.name}"] = lambda g=g, a=wl.args: g(*a)
    rng = np.random.default_rng(20)
    n = 64
    w, x, b = rng.normal(size=(n, n)) / np.sqrt(n), rng.normal(size=n), rng.normal(size=n)
    layer, loss = njit(vector_mode.layer.py_func), njit(vector_mode.loss.py_func)
    for mode in ("forward", "reverse"):
        tasks[f"Jacobian {n}x{n}, mode='{mode}'"] = (
            lambda m=mode: pyjlad.jacobian(layer, w, x, b, wrt=1, mode=m, chunk=64))
    tasks[f"Hessian {n}x{n}"] = lambda: pyjlad.hessian(loss, x, w, chunk=32)
    return tasks


def _per_call(fn: Callable[[], object], seconds: float = 0.1) -> float:
    start, calls = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        fn()
        calls += 1
    return (time.perf_counter() - start) / calls


def _flat(result: object) -> np.ndarray:
    parts = result if isinstance(result, tuple) else (result,)
    return np.concatenate([np.ravel(np.asarray(p, dtype=float)) for p in parts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    opts = parser.parse_args()
    os.environ["PYJLAD_DISABLE_DISK_CACHE"] = "1"
    built: dict[str, dict[str, Callable[[], object]]] = {}
    shipped = differentiate.HOST_TARGET
    try:
        for name, options in VARIANTS.items():
            differentiate.HOST_TARGET = options
            built[name] = _tasks()
            for task, fn in built[name].items():  # build now, under this variant's options
                got = _flat(fn())
                if name != "baseline" and not np.allclose(got, _flat(built["baseline"][task]()), rtol=1e-12, atol=0):
                    raise SystemExit(f"{task}: {name} differs from baseline")
    finally:
        differentiate.HOST_TARGET = shipped
    times: dict[str, dict[str, list[float]]] = {v: {t: [] for t in built["baseline"]} for v in VARIANTS}
    for _ in range(opts.repeats):
        for task in built["baseline"]:
            for name in VARIANTS:
                times[name][task].append(_per_call(built[name][task]))
    median = {v: {t: statistics.median(ts) for t, ts in per.items()} for v, per in times.items()}

    import llvmlite.binding as llvm

    print("### The derivative optimized for this machine's CPU\n")
    print(f"command: `.venv/bin/python benchmarks/host_target.py --repeats {opts.repeats}`  ")
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, LLVM's name for the CPU: "
          f"{llvm.get_host_cpu_name()}; versions: numba {numba.__version__}, pyjlad {pyjlad.__version__}  ")
    print(f"load average (1 min) after: {os.getloadavg()[0]:.2f}; shipped options: `{' '.join(shipped)}`\n")
    print("| call | baseline (SSE2) | `-mcpu=native` | shipped | `-mcpu=native` / baseline | shipped / baseline |")
    print("|---|---:|---:|---:|---:|---:|")
    for task in built["baseline"]:
        base = median["baseline"][task]
        cells = " | ".join(f"{median[v][task] * 1e6:,.1f} us" for v in VARIANTS)
        print(f"| {task} | {cells} | {median['cpu'][task] / base:.2f} | {median['shipped'][task] / base:.2f} |")
    print("\nMedian per-call time over the rounds, all variants in one process; every result equal to the "
          "baseline's to a relative 1e-12. A ratio under 1: faster than the baseline.")


if __name__ == "__main__":
    main()
