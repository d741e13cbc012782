"""Hessian-vector products of ``prange`` code at 1 and 2 threads (issue 17): the parallel module and the serial one.

For each kernel of ``parallel_gradients.py`` (same sizes and arguments): the primal (Numba, ``parallel=True``),
``pyjlad.hvp`` with respect to its first differentiated argument with ``PYJLAD_PARALLEL_DERIVATIVES=1`` (the
default: reverse over forward of the parallel module, its loops on ``numba.set_num_threads`` threads) and
``0`` (the serial copy), and ``jax.jit`` of JAX's ``jvp`` of ``grad`` of the ``jax.numpy`` twin. Each product is
checked against JAX (float64) before it is timed; a product that fell back to the serial derivative says so.
Best of ``--repeat`` wall-clock times. Prints markdown.

Run: ``python benchmarks/parallel_hvp.py`` (``--quick`` for small sizes).
"""

from __future__ import annotations

import argparse
import os
import warnings

import numba
import numpy as np
from parallel_gradients import (  # beside this script
    _jax_twins,
    _serial_twin,
    _time,
    first_call,
    kernel_cases,
    parsed_sizes,
)

import pyjlad


def _jax_hvp(jax, twin, args, k: int, v):
    """A call of ``jax.jit`` of JAX's Hessian-vector product of ``twin`` at ``args`` along ``v`` (argument ``k``)."""
    primals = tuple(jax.numpy.asarray(a) for a in args)
    direction = jax.numpy.asarray(v)
    grad = jax.grad(twin, argnums=k)

    def product(*p):
        return jax.jvp(lambda a: grad(*p[:k], a, *p[k + 1:]), (p[k],), (direction,))[1]

    jitted = jax.jit(product)
    return lambda: jitted(*primals)


def main() -> None:
    from machine import describe  # beside this script, on the path when it runs

    ns = parsed_sizes(argparse.ArgumentParser())
    rng = np.random.default_rng(0)
    jax, twins = _jax_twins()
    warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
    rows = []
    for name, (f, args, wrt, size) in kernel_cases(ns, rng).items():
        k = wrt[0]
        v = rng.normal(size=np.shape(args[k]))
        jhvp = _jax_hvp(jax, twins[name][0], args, k, v)
        expected = np.asarray(jhvp())
        serial = _serial_twin(f)
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
        np.testing.assert_allclose(pyjlad.hvp(serial, args, v, wrt=k), expected, rtol=1e-9,
                                   atol=1e-9 * np.abs(expected).max())  # built now, with the setting off
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
        got, fell_back = first_call(lambda f=f, a=args, v=v, k=k: pyjlad.hvp(f, a, v, wrt=k))
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max())
        times = {}
        for threads in (1, 2):
            numba.set_num_threads(threads)
            times[threads] = (
                _time(lambda f=f, a=args: f(*a), ns.repeat, threads)[0],
                _time(lambda f=f, a=args, v=v, k=k: pyjlad.hvp(f, a, v, wrt=k), ns.repeat, threads)[0],
                _time(lambda s=serial, a=args, v=v, k=k: pyjlad.hvp(s, a, v, wrt=k), ns.repeat, threads)[0],
            )
        jax_t = _time(lambda j=jhvp: jax.block_until_ready(j()), ns.repeat, 1)[0]
        rows.append((name, size, k, fell_back, times, jax_t))
    print("### Hessian-vector products of `prange` code (issue 17)\n")
    print(f"`python benchmarks/parallel_hvp.py` on {describe()} (shared, noisy); numba {numba.__version__} "
          f"(threading layer {numba.threading_layer()}), jax {jax.__version__}, pyjlad {pyjlad.__version__}. "
          f"Best of {ns.repeat}. `parallel` = `PYJLAD_PARALLEL_DERIVATIVES=1` (the default), `serial` = the serial "
          "derivative (`0`); every product checked against `jax.jvp` of `jax.grad` (float64) first.\n")
    print("| kernel | size | wrt | threads | primal ms | parallel hvp ms | serial hvp ms | hvp/primal | "
          "speedup 1->2 | jax.jit(jvp(grad)) ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, size, k, fell_back, times, jax_t in rows:
        for threads in (1, 2):
            p, h, s = times[threads]
            speed = f"{times[1][1] / h:.2f}x" if threads == 2 else ""
            note = " (fell back: serial)" if fell_back else ""
            print(f"| {name}{note} | {size} | {k} | {threads} | {p * 1e3:.2f} | {h * 1e3:.2f} | {s * 1e3:.2f} | "
                  f"{h / p:.1f} | {speed} | {jax_t * 1e3:.2f} |")


if __name__ == "__main__":
    main()
