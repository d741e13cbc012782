"""Per-sample gradients of 10^5 samples: ``pyjlad.vmap`` (prange) vs serial loops vs JAX (issue 16, part 2).

Usage: ``.venv/bin/python benchmarks/per_sample_gradients.py [--n 100000] [--d 16] [--repeats 7]``.

The gradient of one sample's logistic-regression log-likelihood with respect to the
parameters, for every sample of a batch, computed:

- ``vmap, T threads``: ``pyjlad.vmap(pyjlad.grad(f, wrt=2), in_axes=(0, 0, None))``, the
  ``@njit(parallel=True)`` ``prange`` loop, with ``numba.set_num_threads(T)`` for T = 1 and
  every thread Numba has;
- ``serial @njit loop``: the same derivative called from a plain ``@njit`` ``for`` loop;
- ``Python loop``: the derivative called from Python once per sample;
- ``jax.jit(jax.vmap(jax.grad(f)))`` in float64 (XLA's CPU threads, as JAX configures them);
- baseline: ``f`` itself (no derivative) in the same ``prange`` loop with 1 and all threads, which
  shows how much a second thread can give on the (shared) machine at that moment.

Each timing is the minimum over ``--repeats`` runs (with the smallest process CPU time of a run,
all threads together: near the 1-thread figure when the threads do no extra work), the methods interleaved (the machine
is shared: the load average is printed with the figures, and ratios come from one run).
The results of every method are checked equal (pyjlad's exactly, JAX's to 1e-12).
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Callable

import numba
import numpy as np
from numba import njit

import pyjlad


@njit
def log_likelihood(x, y, theta):
    z = 0.0
    for j in range(x.shape[0]):
        z += x[j] * theta[j]
    return y * z - math.log1p(math.exp(z))


def log_likelihood_jax(x, y, theta):  # noqa: D103 - the JAX twin
    import jax.numpy as jnp

    z = jnp.dot(x, theta)
    return y * z - jnp.log1p(jnp.exp(z))


@njit(parallel=True)
def primal(x, y, theta):
    """The function itself over the samples in the same prange loop: how much 2 threads give on this machine now."""
    out = np.empty(x.shape[0])
    for i in numba.prange(x.shape[0]):
        out[i] = log_likelihood(x[i], y[i], theta)
    return out


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """Wall-clock and process CPU seconds (all threads) of one run of ``fn``."""
    cpu, start = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def _methods(x: np.ndarray, y: np.ndarray, theta: np.ndarray) -> dict[str, Callable[[], object]]:
    """Each way of computing the per-sample gradients, ready to run (compiled and warmed by the caller)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    df = pyjlad.grad(log_likelihood, wrt=2)
    batched = pyjlad.vmap(df, in_axes=(0, 0, None))

    @njit
    def serial(x, y, theta):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = df(x[i], y[i], theta)
        return out

    def python_loop() -> np.ndarray:
        return np.stack([df(x[i], y[i], theta) for i in range(x.shape[0])])

    jax_fn = jax.jit(jax.vmap(jax.grad(log_likelihood_jax, argnums=2), in_axes=(0, 0, None)))
    jx, jy, jt = (jax.numpy.asarray(a) for a in (x, y, theta))
    threads = numba.get_num_threads()

    def with_threads(t: int) -> Callable[[], object]:
        def run() -> object:
            numba.set_num_threads(t)
            try:
                return batched(x, y, theta)
            finally:
                numba.set_num_threads(threads)
        return run

    def primal_with_threads(t: int) -> Callable[[], object]:
        def run() -> object:
            numba.set_num_threads(t)
            try:
                return primal(x, y, theta)
            finally:
                numba.set_num_threads(threads)
        return run

    methods = {f"vmap, {t} thread{'s' if t > 1 else ''}": with_threads(t) for t in sorted({1, threads})}
    methods.update({f"baseline: f itself (no derivative) in prange, {t} thread{'s' if t > 1 else ''}":
                    primal_with_threads(t) for t in sorted({1, threads})})
    methods["serial @njit loop"] = lambda: serial(x, y, theta)
    methods["jax.jit(jax.vmap(jax.grad))"] = lambda: jax_fn(jx, jy, jt).block_until_ready()
    methods["Python loop"] = python_loop
    return methods


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.n, args.d))
    theta = rng.normal(size=args.d) * 0.3
    y = (rng.random(args.n) < 0.5).astype(np.float64)

    methods = _methods(x, y, theta)
    results = {name: np.asarray(fn()) for name, fn in methods.items()}  # compile, warm, check
    reference = results["serial @njit loop"]
    for name, got in results.items():
        if name.startswith("baseline"):
            continue
        if name.startswith(("vmap", "Python")):
            assert np.array_equal(got, reference), name
        else:
            np.testing.assert_allclose(got, reference, rtol=1e-12, atol=1e-12)

    load_before = os.getloadavg()
    times = {name: [] for name in methods}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            if name == "Python loop" and len(times[name]) >= 2:
                continue  # seconds per run: two are enough for its minimum
            times[name].append(_timed(fn))
    load_after = os.getloadavg()
    best = {name: min(t)[0] for name, t in times.items()}
    cpu = {name: min(c for _, c in t) for name, t in times.items()}

    serial_time = best["serial @njit loop"]
    one_thread = best["vmap, 1 thread"]
    print(f"# Per-sample gradients, n={args.n:,}, d={args.d} (logistic-regression log-likelihood, grad wrt theta)\n")
    print(f"command: {' '.join([os.path.basename(sys.executable), *sys.argv])}")
    print(f"machine: {_machine()}")
    print(f"numba threads: {numba.get_num_threads()} (threading layer {numba.threading_layer()})")
    print(f"versions: python {platform.python_version()}, numba {numba.__version__}, numpy {np.__version__}, "
          f"jax {__import__('jax').__version__}, pyjlad {pyjlad.__version__}")
    print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}\n")
    print("| method | time (ms) | per sample (ns) | vs serial @njit loop | vs vmap, 1 thread | CPU time, all threads (ms) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, t in best.items():
        print(f"| {name} | {t * 1e3:.2f} | {t / args.n * 1e9:.0f} | {serial_time / t:.2f}x | {one_thread / t:.2f}x "
              f"| {cpu[name] * 1e3:.2f} |")


if __name__ == "__main__":
    main()
