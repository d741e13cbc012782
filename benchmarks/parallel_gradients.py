"""Parallel gradients and forward-mode derivatives of ``prange`` code (issue 17): time at 1 and 2 threads.

For each kernel: the primal (Numba, ``parallel=True``), pyjlad's gradient with
``PYJLAD_PARALLEL_DERIVATIVES=1`` (the default: OpenMP loops, ``numba.set_num_threads``), the serial
gradient (the setting off, ``0``) and ``jax.jit(jax.grad)`` of a ``jax.numpy`` twin; then ``pyjlad.jvp``
(forward mode) with the setting on and off; then ``vjp`` and ``jvp`` of an array result, and
Jacobians and Hessians (their chunks of directions on Numba's threads, :mod:`pyjlad.chunk_threads`,
against the setting off and ``jax.jit`` of ``jacrev``/``jacfwd``/``hessian``). Best of ``--repeat``
wall-clock times, and the process CPU time per thread over the same calls (the machine is shared, so
wall-clock speedups are noisy; CPU per thread shows the work split). Prints markdown.

Run: ``python benchmarks/parallel_gradients.py`` (``--quick`` for small sizes).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numba
import numpy as np
from numba import njit, prange

import pyjlad


@njit(parallel=True)
def remote_loss(mse, v, b):
    """Seed 003's ``remote_stats`` (Coinstac), the squared t-statistics summed in the same function."""
    n, k = b.shape
    ts = np.zeros((n, k))
    for voxel in prange(n):
        var_covar_beta_global = mse[voxel] * np.linalg.inv(v)
        se_beta_global = np.sqrt(np.diag(var_covar_beta_global))
        ts[voxel, :] = b[voxel, :] / se_beta_global
    return np.sum(ts ** 2)


@njit(parallel=True)
def pairwise(x):
    e = 0.0
    for i in prange(x.shape[0]):
        for j in range(x.shape[0]):
            d = x[i] - x[j]
            e += 1.0 / (1.0 + d * d)
    return e


@njit(parallel=True)
def stencil(u, k):
    n = u.shape[0]
    out = np.zeros(n)
    for i in prange(1, n - 1):
        out[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    s = 0.0
    for i in range(n):
        s += out[i] * out[i]
    return s


@njit(parallel=True)
def heat2d(u, k):
    """One explicit step of the 2-D heat equation (5-point stencil), the squared result summed."""
    n, m = u.shape
    out = np.zeros((n, m))
    for i in prange(1, n - 1):
        for j in range(1, m - 1):
            out[i, j] = u[i, j] + k * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j])
    return np.sum(out * out)


@njit(parallel=True)
def classifier(w, x, y):
    """A softmax classifier's mean cross-entropy: a matrix-vector product with the shared weights per sample."""
    n = x.shape[0]
    loss = 0.0
    for i in prange(n):
        z = w @ x[i]
        m = z.max()
        loss += m + np.log(np.sum(np.exp(z - m))) - z[y[i]]
    return loss / n


@njit(parallel=True)
def interactions(x, w):
    """An array result: output ``i`` reads the whole shared input."""
    y = np.empty_like(x)
    for i in prange(x.shape[0]):
        s = 0.0
        for j in range(x.shape[0]):
            s += np.tanh(w * x[i] - x[j])
        y[i] = s
    return y


def _serial_twin(f):
    """The same kernel as a separate dispatcher, so its derivative is built with the setting off."""
    return njit(parallel=True)(f.py_func)


def _jax_twins():
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    def remote(mse, v, b):
        se = jnp.sqrt(mse[:, None] * jnp.diag(jnp.linalg.inv(v))[None, :])
        return jnp.sum((b / se) ** 2)

    def pair(x):
        return jnp.sum(1.0 / (1.0 + (x[:, None] - x[None, :]) ** 2))

    def sten(u, k):
        inner = u[1:-1] + k * (u[:-2] - 2 * u[1:-1] + u[2:])
        return jnp.sum(inner ** 2)

    def heat(u, k):
        c = u[1:-1, 1:-1]
        inner = c + k * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c)
        return jnp.sum(inner ** 2)

    def softmax(w, x, y):
        z = x @ w.T
        return jnp.mean(jax.nn.logsumexp(z, axis=1) - z[jnp.arange(x.shape[0]), y])

    return jax, {"remote_stats": (remote, (0, 1, 2)), "pairwise": (pair, 0), "stencil": (sten, 0),
                 "heat2d": (heat, 0), "classifier": (softmax, 0)}


def kernel_cases(ns: argparse.Namespace, rng: np.random.Generator) -> dict:
    """name -> (kernel, arguments, ``wrt``, size in words) at the sizes ``ns`` names (``--voxels``, ``--pairs``,
    ``--cells``, ``--grid``); also measured by ``parallel_scaling.py``."""
    x = rng.normal(size=(40, 8))
    return {
        "remote_stats": (remote_loss, (rng.uniform(0.5, 1.5, ns.voxels), x.T @ x, rng.normal(size=(ns.voxels, 8))),
                         (0, 1, 2), f"{ns.voxels} voxels, 8x8"),
        "pairwise": (pairwise, (rng.uniform(-2, 2, ns.pairs),), (0,), f"n = {ns.pairs} (O(n^2))"),
        "stencil": (stencil, (rng.normal(size=ns.cells), 0.2), (0,), f"{ns.cells} cells, one step"),
        "heat2d": (heat2d, (rng.normal(size=(ns.grid, ns.grid)), 0.1), (0,), f"{ns.grid}x{ns.grid}, one step"),
        "classifier": (classifier, (rng.normal(size=(10, 32)) / 4, rng.normal(size=(ns.samples, 32)),
                                    rng.integers(0, 10, ns.samples)), (0,), f"{ns.samples} samples, 10x32 weights"),
    }


def add_kernel_sizes(parser: argparse.ArgumentParser) -> None:
    """The options of :func:`kernel_cases`' sizes, ``--repeat`` and ``--quick`` (small sizes)."""
    parser.add_argument("--voxels", type=int, default=20000)
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--cells", type=int, default=1_000_000)
    parser.add_argument("--grid", type=int, default=1024, help="heat2d: grid side")
    parser.add_argument("--samples", type=int, default=20000, help="classifier: samples")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes")


def parsed_sizes(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The command line parsed by ``parser`` with :func:`add_kernel_sizes`' options, ``--quick`` applied."""
    add_kernel_sizes(parser)
    ns = parser.parse_args()
    if ns.quick:
        ns.voxels, ns.pairs, ns.cells, ns.grid, ns.samples, ns.repeat = 2000, 400, 100_000, 128, 2000, 3
    return ns


def first_call(call) -> tuple[object, bool]:
    """``call()``'s result (the first call, which builds the derivative) and whether that build fell back to the
    serial derivative (a :class:`pyjlad.ParallelFallbackWarning`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pyjlad.ParallelFallbackWarning)
        result = call()
    return result, any(issubclass(w.category, pyjlad.ParallelFallbackWarning) for w in caught)


def _time(call, repeat: int, threads: int) -> tuple[float, float]:
    """Best wall-clock seconds of ``repeat`` calls, and CPU seconds per thread per call."""
    call()
    best = float("inf")
    cpu0 = time.process_time()
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best, (time.process_time() - cpu0) / repeat / threads


def main() -> None:
    from machine import describe  # beside this script, on the path when it runs

    ns = parsed_sizes(argparse.ArgumentParser())
    rng = np.random.default_rng(0)
    cases = kernel_cases(ns, rng)
    jax, twins = _jax_twins()
    warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
    rows = []
    for name, (f, args, wrt, size) in cases.items():
        serial = _serial_twin(f)
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
        serial_grad = pyjlad.grad(serial, wrt=wrt)
        serial_grad(*args)  # built now, with the setting off (a derivative is built on its first call)
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
        parallel_grad = pyjlad.grad(f, wrt=wrt)
        parallel_grad(*args)
        tangents = tuple((rng.normal(size=a.shape) if a.dtype.kind == "f" else None) if isinstance(a, np.ndarray)
                         else 0.0 for a in args)
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
        pyjlad.jvp(serial, args, tangents)  # the serial forward derivative, built with the setting off
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
        pyjlad.jvp(f, args, tangents)
        twin, argnums = twins[name]
        jargs = [jax.numpy.asarray(a) for a in args]
        jgrad = jax.jit(jax.grad(twin, argnums=argnums))
        times = {}
        for threads in (1, 2):
            numba.set_num_threads(threads)
            times[threads] = (
                _time(lambda f=f, a=args: f(*a), ns.repeat, threads),
                _time(lambda g=parallel_grad, a=args: g(*a), ns.repeat, threads),
                _time(lambda g=serial_grad, a=args: g(*a), ns.repeat, threads),
                _time(lambda h=f, a=args, t=tangents: pyjlad.jvp(h, a, t), ns.repeat, threads),
                _time(lambda h=serial, a=args, t=tangents: pyjlad.jvp(h, a, t), ns.repeat, threads),
            )
        jax_t = _time(lambda g=jgrad, a=jargs: jax.block_until_ready(g(*a)), ns.repeat, 1)
        rows.append((name, size, times, jax_t))
    print("### Parallel gradients of `prange` code (issue 17)\n")
    print(f"`python benchmarks/parallel_gradients.py` on {describe()} "
          f"(shared, noisy); numba {numba.__version__} (threading layer "
          f"{numba.threading_layer()}), jax {jax.__version__}, pyjlad {pyjlad.__version__}. Best of {ns.repeat}; "
          "CPU = process CPU seconds per call per thread. `parallel` = `PYJLAD_PARALLEL_DERIVATIVES=1` (the default), "
          "`serial` = the serial derivative (`PYJLAD_PARALLEL_DERIVATIVES=0`).\n")
    print("| kernel | size | threads | primal ms | parallel grad ms | CPU/thread ms | serial grad ms | "
          "grad/primal | speedup 1->2 | jax.jit(grad) ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, size, times, jax_t in rows:
        for threads in (1, 2):
            (p, _), (g, cpu), (s, _), _, _ = times[threads]
            speed = f"{times[1][1][0] / g:.2f}x" if threads == 2 else ""
            print(f"| {name} | {size} | {threads} | {p * 1e3:.2f} | {g * 1e3:.2f} | {cpu * 1e3:.2f} | "
                  f"{s * 1e3:.2f} | {g / p:.1f} | {speed} | {jax_t[0] * 1e3:.2f} |")
    print("\nForward mode: `pyjlad.jvp` with one random tangent per argument (the setting on and off).\n")
    print("| kernel | threads | parallel jvp ms | CPU/thread ms | serial jvp ms | jvp/primal | speedup 1->2 |")
    print("|---|---|---|---|---|---|---|")
    for name, _, times, _ in rows:
        for threads in (1, 2):
            (p, _), _, _, (j, cpu), (s, _) = times[threads]
            speed = f"{times[1][3][0] / j:.2f}x" if threads == 2 else ""
            print(f"| {name} | {threads} | {j * 1e3:.2f} | {cpu * 1e3:.2f} | {s * 1e3:.2f} | {j / p:.1f} | {speed} |")

    _array_results(ns, rng, jax)
    _several_directions(ns, rng, jax)


def _several_directions(ns, rng, jax) -> None:
    """Jacobians and Hessians (many directions, several per sweep where vector mode applies): their chunks of
    directions on Numba's threads (:mod:`pyjlad.chunk_threads`), against the setting off (one thread) and
    ``jax.jit`` of ``jacrev``/``jacfwd``/``hessian``."""
    jnp = jax.numpy
    x, w = rng.uniform(-2, 2, ns.pairs // 4), 0.7
    px = rng.uniform(-2, 2, ns.pairs // 8)
    voxels = max(20, ns.voxels // 100)
    m = rng.normal(size=(40, 8))
    mse, v, b = rng.uniform(0.5, 1.5, voxels), m.T @ m, rng.normal(size=(voxels, 8))

    def inter(a):
        return jnp.sum(jnp.tanh(w * a[:, None] - a[None, :]), axis=1)

    def pair(a):
        return jnp.sum(1.0 / (1.0 + (a[:, None] - a[None, :]) ** 2))

    def remote(s):
        return jnp.sum(b ** 2 / (s[:, None] * jnp.diag(jnp.linalg.inv(v))[None, :]))

    cases = [
        (f"jacobian (reverse), interactions n = {x.size}", interactions,
         lambda f: pyjlad.jacobian(f, x, w), jax.jit(jax.jacrev(inter)), (x,)),
        (f"jacobian (forward), interactions n = {x.size}", interactions,
         lambda f: pyjlad.jacobian(f, x, w, mode="forward"), jax.jit(jax.jacfwd(inter)), (x,)),
        (f"hessian, pairwise n = {px.size} (vector mode)", pairwise,
         lambda f: pyjlad.hessian(f, px), jax.jit(jax.hessian(pair)), (px,)),
        (f"hessian wrt mse, remote_stats {voxels} voxels (LAPACK: one column per sweep)", remote_loss,
         lambda f: pyjlad.hessian(f, mse, v, b), jax.jit(jax.hessian(remote)), (mse,)),
    ]
    rows = []
    for name, f, call, jcall, jargs in cases:
        serial = _serial_twin(f)
        jargs = [jnp.asarray(a) for a in jargs]
        times = {}
        for threads in (1, 2):
            numba.set_num_threads(threads)
            os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
            off = _time(lambda s=serial, c=call: c(s), ns.repeat, threads)[0]
            os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", pyjlad.ParallelFallbackWarning)  # (hvp: said in the text)
                on = _time(lambda f=f, c=call: c(f), ns.repeat, threads)
            times[threads] = (on, off)
        jax_t = _time(lambda g=jcall, a=jargs: jax.block_until_ready(g(*a)), ns.repeat, 1)[0]
        rows.append((name, times, jax_t))
    print("\nSeveral directions (`jacobian`, `hessian`): Enzyme's vector mode, or one Hessian-vector product per "
          "column, of the serial copy, the chunks of directions on Numba's threads (`parallel`, the setting on) or "
          "on one (`serial`, the setting off).\n")
    print("| derivative | threads | parallel ms | CPU/thread ms | serial ms | speedup 1->2 | jax.jit ms |")
    print("|---|---|---|---|---|---|---|")
    for name, times, jax_t in rows:
        for threads in (1, 2):
            (on, cpu), off = times[threads]
            speed = f"{times[1][0][0] / on:.2f}x" if threads == 2 else ""
            print(f"| {name} | {threads} | {on * 1e3:.2f} | {cpu * 1e3:.2f} | {off * 1e3:.2f} | {speed} | "
                  f"{jax_t * 1e3:.2f} |")


def _array_results(ns, rng, jax) -> None:
    """Derivatives of an array result, ``vjp`` (one cotangent) and ``jvp`` (one tangent), the setting on and off
    (pyjlad's wrapper writing the result has the function inlined: :mod:`pyjlad.outputs`)."""
    x, w = rng.uniform(-2, 2, ns.pairs // 4), 0.7
    cot = rng.normal(size=x.shape)
    serial = _serial_twin(interactions)
    calls = {}
    for setting, f in (("serial", serial), ("parallel", interactions)):
        if setting == "parallel":
            os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
        else:
            os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
        calls[setting, "vjp"] = lambda f=f: pyjlad.vjp(f, (x, w), cot)
        calls[setting, "jvp"] = lambda f=f: pyjlad.jvp(f, (x, w), (cot, 0.0))
        for call in (calls[setting, "vjp"], calls[setting, "jvp"]):
            call()  # built now, under this setting
    os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"

    def twin(a):
        return jax.numpy.sum(jax.numpy.tanh(w * a[:, None] - a[None, :]), axis=1)

    jx, jcot = jax.numpy.asarray(x), jax.numpy.asarray(cot)
    jvjp = jax.jit(lambda a, c: jax.vjp(twin, a)[1](c))
    jax_t = _time(lambda: jax.block_until_ready(jvjp(jx, jcot)), ns.repeat, 1)[0]
    times = {}
    for threads in (1, 2):
        numba.set_num_threads(threads)
        times[threads] = {key: _time(call, ns.repeat, threads)[0] for key, call in calls.items()}
        times[threads]["primal"] = _time(lambda: interactions(x, w), ns.repeat, threads)[0]
    print(f"\nArray result (`interactions`, n = {x.shape[0]}: output i sums tanh(w x_i - x_j) over j), "
          f"`vjp` and `jvp`: jax.jit(vjp) {jax_t * 1e3:.2f} ms.\n")
    print("| derivative | threads | primal ms | parallel ms | serial ms | speedup 1->2 |")
    print("|---|---|---|---|---|---|")
    for what in ("vjp", "jvp"):
        for threads in (1, 2):
            t = times[threads]
            speed = f"{times[1]['parallel', what] / t['parallel', what]:.2f}x" if threads == 2 else ""
            print(f"| {what} | {threads} | {t['primal'] * 1e3:.2f} | {t['parallel', what] * 1e3:.2f} | "
                  f"{t['serial', what] * 1e3:.2f} | {speed} |")


if __name__ == "__main__":
    main()
