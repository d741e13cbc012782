"""Checkpointed time loops (issue 20, part 1): time and peak memory of ``pyjlad.checkpointed_loop``.

Usage: ``.venv/bin/python benchmarks/checkpointing.py [--lorenz-steps N] [--heat-steps N]``

- RK4 Lorenz (3 float64 states, ``rho`` the parameter, ``h = 1e-6``): the function (the loop as one
  ``@njit`` function), the checkpointed gradient within 64 MiB, and the un-checkpointed gradient
  (``pyjlad.grad`` of the whole loop as one ``@njit`` function: Enzyme's tape holds every step).
- The 2-D heat stencil of ``benchmarks/workloads.py`` (256x256, ``ALPHA = 0.2``, ``kappa`` the
  parameter): the function and the checkpointed gradient within 1 GiB.

Each case runs in a fresh subprocess (``--case NAME``): it compiles and warms on a few steps, resets
the process's peak resident set size (``5`` into ``/proc/self/clear_refs``), runs once timed, and
reports the peak's growth over the resident size after warming (``VmHWM`` minus ``VmRSS``), so
Numba's and Enzyme's allocations are seen (tracemalloc would not see them). Times are one run each,
ratios against the function's run in the same section.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numba
import numpy as np
from numba import njit

import pyjlad

H = 1e-6
ALPHA = 0.2
GRID = 256
LORENZ_CAP = 64 * 2**20
HEAT_CAP = 2**30


@njit
def lorenz(s, rho):
    return np.array([10.0 * (s[1] - s[0]), s[0] * (rho - s[2]) - s[1], s[0] * s[1] - 8.0 / 3.0 * s[2]])


@njit
def rk4(s, rho, k):
    k1 = lorenz(s, rho)
    k2 = lorenz(s + 0.5 * H * k1, rho)
    k3 = lorenz(s + 0.5 * H * k2, rho)
    k4 = lorenz(s + H * k3, rho)
    return s + H / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


@njit
def first(s):
    return s[0] * s[0] + s[1] - s[2]


@njit
def lorenz_loop(s, rho, n):
    for k in range(n):
        s = rk4(s, rho, k)
    return first(s)


@njit
def heat(u, kappa, k):
    n = u.shape[0]
    v = np.empty_like(u)
    for i in range(n):
        for j in range(n):
            up = u[i - 1, j] if i > 0 else 0.0
            down = u[i + 1, j] if i < n - 1 else 0.0
            left = u[i, j - 1] if j > 0 else 0.0
            right = u[i, j + 1] if j < n - 1 else 0.0
            v[i, j] = u[i, j] + ALPHA * kappa * (up + down + left + right - 4.0 * u[i, j])
    return v


@njit
def energy(u):
    return np.sum(u * u)


VJP = pyjlad.vjp_fn(rk4)


@njit
def reverse_with_vjp_fn(buf, rho, n, lam):
    """The leaf's reverse loop written with ``pyjlad.vjp_fn(rk4)`` (allocates its cotangents per step)."""
    acc = 0.0
    for j in range(n - 1, -1, -1):
        _, cts = VJP((buf[j], rho, j), lam)
        lam = cts[0]
        acc += cts[1]
    return lam, acc


def vjp_forms(n: int) -> dict:
    """Nanoseconds per step: the step, the checkpointed loop's leaf (raw sweep), a loop of vjp_fn calls."""
    from pyjlad.checkpointing import _kernels

    s0, rho = np.array([1.0, 1.5, 20.0]), 28.0
    kern = _kernels(rk4, first, False)
    buf = np.empty((n, 3))
    lam = np.array([1.0, 0.0, 0.0])
    forms = {
        "step": lambda m: kern.advance(s0, rho, 0, m, 1, buf, 0, m),
        "raw sweep": lambda m: kern.leaf(buf, 0, rho, 0, m, lam.copy(), np.zeros(3), np.zeros(3), np.zeros(())),
        "vjp_fn": lambda m: reverse_with_vjp_fn(buf, rho, m, lam.copy()),
    }
    out = {}
    for name, f in forms.items():
        f(2)
        start = time.perf_counter()
        f(n)
        out[name] = (time.perf_counter() - start) / n * 1e9
    return out


def _memory() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    return float(fields["VmRSS"].split()[0]) / 1024, float(fields["VmHWM"].split()[0]) / 1024


def _measure(run, warm) -> dict:
    warm()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base, _ = _memory()
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    _, peak = _memory()
    return {"seconds": seconds, "peak_growth_mib": peak - base, **result}


def case(name: str, n: int) -> dict:
    if name == "vjp-forms":
        return vjp_forms(n)
    if name.startswith("lorenz"):
        s0, rho = np.array([1.0, 1.5, 20.0]), 28.0
        if name == "lorenz-function":
            return _measure(lambda: {"value": lorenz_loop(s0, rho, n)}, lambda: lorenz_loop(s0, rho, 10))
        if name == "lorenz-plain":
            df = pyjlad.value_and_grad(lorenz_loop, wrt=(0, 1))
            return _measure(lambda: {"value": df(s0, rho, n)[0]}, lambda: df(s0, rho, 10))
        loop = pyjlad.checkpointed_loop(rk4, first, n, max_memory=LORENZ_CAP)
        small = pyjlad.checkpointed_loop(rk4, first, 10, max_memory=LORENZ_CAP)
        out = _measure(lambda: {"value": loop.value_and_grad(s0, rho)[0]}, lambda: small.value_and_grad(s0, rho))
        return {**out, **_schedule(loop.last_schedule)}
    u0, kappa = np.random.default_rng(0).uniform(0, 1, (GRID, GRID)), 1.0
    loop = pyjlad.checkpointed_loop(heat, energy, n, max_memory=HEAT_CAP)
    small = pyjlad.checkpointed_loop(heat, energy, 3, max_memory=HEAT_CAP)
    if name == "heat-function":
        return _measure(lambda: {"value": loop(u0, kappa)}, lambda: small(u0, kappa))
    out = _measure(lambda: {"value": loop.value_and_grad(u0, kappa)[0]}, lambda: small.value_and_grad(u0, kappa))
    return {**out, **_schedule(loop.last_schedule)}


def _schedule(s) -> dict:
    return {"levels": s.levels, "strides": list(s.strides), "states_stored": s.states_stored,
            "schedule_mib": s.memory_bytes / 2**20, "recomputed_steps": s.recomputed_steps}


def _subprocess(name: str, n: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--case", name, "--n", str(n)], capture_output=True, text=True,
                          env=os.environ.copy())
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _row(title: str, r: dict, base: dict) -> str:
    if "error" in r:
        return f"| {title} | failed: {r['error']} | | | | |"
    sched = (f"{r['levels']} level(s), strides {r['strides']}, {r['states_stored']:,} states "
             f"({r['schedule_mib']:.1f} MiB), {r['recomputed_steps']:,} steps recomputed") if "levels" in r else "-"
    return (f"| {title} | {r['seconds']:.2f} s | {r['seconds'] / base['seconds']:.1f}x | "
            f"{r['peak_growth_mib']:.1f} MiB | {sched} | {r['value']:.10g} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case")
    parser.add_argument("--n", type=int)
    parser.add_argument("--lorenz-steps", type=int, default=10**7)
    parser.add_argument("--heat-steps", type=int, default=10**5)
    parser.add_argument("--plain-steps", type=int, default=10**6,
                        help="steps of the un-checkpointed Lorenz gradient (its tape grows with the steps)")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(case(args.case, args.n)))
        return
    nl, nh = args.lorenz_steps, args.heat_steps
    print("## Checkpointed time loops (issue 20, part 1)\n")
    npl = args.plain_steps
    print(f"command: `.venv/bin/python benchmarks/checkpointing.py --lorenz-steps {nl} --heat-steps {nh} "
          f"--plain-steps {npl}`  ")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (shared, noisy); versions: "
          f"numba {numba.__version__}, numpy {np.__version__}, pyjlad {pyjlad.__version__}  ")
    print(f"load average (1 min) before: {os.getloadavg()[0]:.2f}\n")
    print("Each row is one run in a fresh process after compiling and warming on a few steps; peak memory is the "
          "growth of the peak resident set size over the resident size after warming.\n")
    print("| case | time | / function | peak memory growth | schedule | value |")
    print("|---|---:|---:|---:|---|---:|")
    base = _subprocess("lorenz-function", nl)
    print(_row(f"RK4 Lorenz, {nl:,} steps: function", base, base))
    print(_row(f"RK4 Lorenz: checkpointed gradient (max_memory {LORENZ_CAP >> 20} MiB)",
               _subprocess("lorenz-checkpointed", nl), base))
    plain = _subprocess("lorenz-plain", npl)
    scaled = dict(base, seconds=base["seconds"] * npl / nl)
    print(_row(f"RK4 Lorenz, {npl:,} steps: `pyjlad.grad` of the whole loop (no checkpointing; ratio to the "
               f"function's time scaled to {npl:,} steps)", plain, scaled))
    base = _subprocess("heat-function", nh)
    base = _subprocess("heat-function", nh)
    print(_row(f"heat {GRID}x{GRID}, {nh:,} steps: function", base, base))
    print(_row(f"heat: checkpointed gradient (max_memory {HEAT_CAP >> 20} MiB)", _subprocess("heat-checkpointed", nh),
               base))
    forms = _subprocess("vjp-forms", 10**6)
    if "error" not in forms:
        print(f"\nPer step of RK4 Lorenz (10^6 steps, one run): the step, storing its state, {forms['step']:.0f} ns; its reverse sweep "
              f"as the checkpointed loop calls it (a raw sweep, preallocated adjoints) {forms['raw sweep']:.0f} ns; "
              f"the same loop written with `pyjlad.vjp_fn(step)` inside `@njit` {forms['vjp_fn']:.0f} ns.")
    print("\nThe schedule's memory is what `checkpointed_loop` allocates for snapshots and working states; the "
          "step's own temporaries (and, for the whole-loop gradient, Enzyme's tape) come on top.")
    if "error" not in plain and npl < nl:
        gib = plain["peak_growth_mib"] * nl / npl / 1024
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        print(f"The whole-loop gradient's tape grows with the steps: scaled linearly from {npl:,} steps, "
              f"{nl:,} steps would need about {gib:.1f} GiB (this machine has {total:.0f} GiB, shared), so it is "
              f"run at {npl:,} steps only.")

if __name__ == "__main__":
    main()
