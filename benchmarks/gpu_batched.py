"""Per-sample gradients of 10^6 samples on an NVIDIA GPU: ``pyjlad.gpu`` vs the CPU paths vs JAX (issue 21).

Usage (on a machine with a GPU, cuda-core installed and the Enzyme toolchain located)::

    python benchmarks/gpu_batched.py [--n 1000000] [--repeats 5] [--json OUT.json]

The model is the test suite's ``tanh_model`` (a sample ``x`` of 3 floats, weights ``w``
shared by every sample, a per-sample bias ``b``), differentiated with respect to all three
arguments, for every sample. Timed, each the minimum over ``--repeats`` runs after a warm-up
call (build, load, first-touch) that is not timed:

- ``pyjlad.gpu, NumPy in/out``: ``pyjlad.gpu.vmap_grad`` called with NumPy arrays (copies to
  and from the device included);
- ``pyjlad.gpu, device arrays``: the same with CuPy arrays (``__cuda_array_interface__``),
  results left on the device (the kernel, its allocations and the status check);
- ``pyjlad.vmap, T threads``: ``pyjlad.vmap(pyjlad.grad(f))`` on the CPU, ``prange`` over
  the samples, T = 1 and every thread Numba has;
- ``jax.jit(jax.vmap(jax.grad))`` in float64 on JAX's default device (the GPU where JAX
  has CUDA) and on its CPU, device arrays in, results blocked on.

Agreement: the GPU's gradients against the CPU's ``pyjlad.vmap`` (float64, relative) and
JAX's. Prints a Markdown table and, with ``--json``, writes the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import njit

import pyjlad
import pyjlad.gpu as pg


@njit
def tanh_model(x, w, b):
    s = b
    for i in range(x.shape[0]):
        s += w[i] * math.tanh(x[i])
    if b < -100.0:
        raise ValueError("b is below -100")
    return s * s + math.exp(-b)


def tanh_model_jax(x, w, b):  # noqa: D103 - the JAX twin
    import jax.numpy as jnp

    s = b + jnp.sum(w * jnp.tanh(x))
    return s * s + jnp.exp(-b)


def _best(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, out = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - start)
    return best, out


def _relative(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


def _normwise(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _agreement(got: Any, ref: Any) -> str:
    """Largest relative difference element by element, and normwise (largest difference / largest value)."""
    pairs = list(zip(got, ref))
    return (f"{max(_relative(g, np.asarray(r)) for g, r in pairs):.1e} elementwise, "
            f"{max(_normwise(g, np.asarray(r)) for g, r in pairs):.1e} normwise")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    opts = parser.parse_args(argv)
    ok, why = pg.cuda_status()
    if not ok:
        raise SystemExit(f"gpu_batched needs a GPU: {why}")

    rng = np.random.default_rng(5)
    n = opts.n
    x, w, b = rng.normal(size=(n, 3)), rng.normal(size=3), rng.normal(size=n)
    axes = (0, None, 0)
    times: dict[str, float] = {}
    gpu_fn = pg.vmap_grad(tanh_model, wrt=(0, 1, 2), in_axes=axes)
    gpu_fn(x[:10], w, b[:10])
    times["pyjlad.gpu, NumPy in/out"], gpu = _best(lambda: gpu_fn(x, w, b), opts.repeats)

    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        dx, dw, db = cp.asarray(x), cp.asarray(w), cp.asarray(b)
        cp.cuda.runtime.deviceSynchronize()
        gpu_fn(dx, dw, db)
        times["pyjlad.gpu, device arrays"], dev = _best(lambda: gpu_fn(dx, dw, db), opts.repeats)
        for g, h in zip(dev, gpu):
            assert np.array_equal(g.copy_to_host(), h)

    cpu_fn = pyjlad.vmap(pyjlad.grad(tanh_model, wrt=(0, 1, 2)), in_axes=axes)
    threads = numba.get_num_threads()
    cpu_fn(x[:10], w, b[:10])
    for t in sorted({1, threads}):
        numba.set_num_threads(t)
        times[f"pyjlad.vmap, {t} thread{'s' if t > 1 else ''}"], cpu = _best(lambda: cpu_fn(x, w, b), opts.repeats)
    numba.set_num_threads(threads)
    agreement = {"gpu vs pyjlad.vmap": _agreement(gpu, cpu)}

    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jfn = jax.jit(jax.vmap(jax.grad(tanh_model_jax, argnums=(0, 1, 2)), in_axes=axes))
        for device in {jax.devices()[0], jax.devices("cpu")[0]}:
            args = [jax.device_put(a, device) for a in (x, w, b)]
            jax.block_until_ready(jfn(*args))
            label = f"jax.jit(vmap(grad)) on {device.platform}"
            times[label], ref = _best(lambda: jax.block_until_ready(jfn(*args)), opts.repeats)  # noqa: B023
            agreement[f"gpu vs {label}"] = _agreement(gpu, ref)
    except ImportError:
        pass

    from pyjlad.gpu.launch import runner

    gpu_name = str(getattr(runner().device, "name", "?"))
    result = {
        "n": n, "times_s": times, "agreement": agreement, "gpu": gpu_name, "cpu_threads": threads,
        "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
        "python": sys.version.split()[0], "numba": numba.__version__, "numpy": np.__version__,
    }
    print(f"\n{n:,} samples, tanh_model, gradients w.r.t. all three arguments; GPU: {gpu_name}; "
          f"{threads} Numba threads of {os.cpu_count()} CPUs; numba {numba.__version__}\n")
    base = times["pyjlad.gpu, NumPy in/out"]
    print("| method | time (ms) | / pyjlad.gpu NumPy in/out |\n| --- | ---: | ---: |")
    for label, seconds in times.items():
        print(f"| {label} | {seconds * 1e3:.2f} | {seconds / base:.2f} |")
    print("\nLargest relative differences (elementwise ones come from samples whose sum cancels; see "
          "tests/test_gpu_run.py):")
    for label, value in agreement.items():
        print(f"- {label}: {value}")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


if __name__ == "__main__":
    main()
