"""How parallel gradients of ``prange`` code scale with the thread count (issue 17), and whether they stay right.

For each kernel of :mod:`parallel_gradients` (seed 003's ``remote_stats``, an O(n^2) pairwise energy, a 1-D
stencil step, a 2-D heat step) and each thread count (``numba.set_num_threads``): the primal's time, the
gradient's (``pyjlad.grad``, parallel derivatives on: the default) and forward mode's (``pyjlad.jvp``), best
of ``--repeat`` wall-clock calls; then ``--runs`` more gradients, each compared with ``jax.grad`` of the
kernel's ``jax.numpy`` twin in float64 (computed once, from copies of the inputs taken before any call),
their spread run to run, and the caller's arrays checked unchanged. The serial derivative
(``PYJLAD_PARALLEL_DERIVATIVES=0``) and ``jax.jit(jax.grad)`` (XLA's own threads) are timed once, for scale.

Writes the figures as JSON (``--json``), prints a markdown table, and exits 1 if a gradient disagrees with JAX
(relative to the largest component, over ``--tolerance``) or a caller's array changed. ``--plot A.json B.json``
draws the speedup curves of JSONs written earlier (runs on another machine, say) into ``--png``.

Run: ``python benchmarks/parallel_scaling.py --threads 1,2,4,8,16 --json scaling.json``, then
``python benchmarks/parallel_scaling.py --plot scaling.json --png scaling.png``. The figures in
``benchmarks/parallel_scaling.md`` were measured on a lent 16-core machine with ``tools/gpu_check/``
(``SCALING=1,2,4,8,12,16 bash .gpu/run.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def _default_threads() -> list[int]:
    """Powers of two up to the number of threads Numba may use, and that number."""
    import numba

    most = numba.config.NUMBA_NUM_THREADS
    counts = [1 << k for k in range(most.bit_length()) if 1 << k <= most]
    return sorted(set(counts + [most]))


def _best(call, repeat: int) -> float:
    """Best wall-clock seconds of ``repeat`` calls, after one call to warm up."""
    call()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def _relative_error(got, want) -> float:
    """Largest difference over all arguments' gradients, relative to the largest component of the oracle's."""
    scale = max(float(np.max(np.abs(w))) for w in want) or 1.0
    return max(float(np.max(np.abs(np.asarray(g) - np.asarray(w)))) for g, w in zip(got, want)) / scale


def _as_tuple(g) -> tuple:
    return g if isinstance(g, tuple) else (g,)


def measure(ns: argparse.Namespace) -> dict:
    """Time and check every kernel at every thread count; the figures as a JSON-ready dict."""
    import numba
    from machine import describe  # beside this script, on the path when it runs
    from parallel_gradients import _jax_twins, _serial_twin, kernel_cases

    import pyjlad

    rng = np.random.default_rng(0)
    cases = kernel_cases(ns, rng)
    jax, twins = _jax_twins()
    warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
    report = {"machine": describe(), "cpus": os.cpu_count(), "numba": numba.__version__, "jax": jax.__version__,
              "pyjlad": pyjlad.__version__, "repeat": ns.repeat, "runs": ns.runs, "threads": ns.threads,
              "kernels": {}}
    for name, (f, args, wrt, size) in cases.items():
        copies = [np.copy(a) for a in args]
        twin, argnums = twins[name]
        jgrad = jax.jit(jax.grad(twin, argnums=argnums))
        jargs = [jax.numpy.asarray(c) for c in copies]
        want = tuple(np.asarray(w) for w in _as_tuple(jgrad(*jargs)))
        jax_s = _best(lambda g=jgrad, a=jargs: jax.block_until_ready(g(*a)), ns.repeat)
        serial = _serial_twin(f)
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
        serial_grad = pyjlad.grad(serial, wrt=wrt)
        numba.set_num_threads(1)
        serial_s = _best(lambda g=serial_grad, a=args: g(*a), ns.repeat)
        os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
        grad = pyjlad.grad(f, wrt=wrt)
        tangents = tuple((rng.normal(size=a.shape) if a.dtype.kind == "f" else None) if isinstance(a, np.ndarray)
                         else 0.0 for a in args)
        rows = []
        for threads in ns.threads:
            numba.set_num_threads(threads)
            primal_s = _best(lambda f=f, a=args: f(*a), ns.repeat)
            grad_s = _best(lambda g=grad, a=args: g(*a), ns.repeat)
            jvp_s = _best(lambda f=f, a=args, t=tangents: pyjlad.jvp(f, a, t), ns.repeat)
            runs = [_as_tuple(grad(*args)) for _ in range(ns.runs)]
            spread = max(_relative_error(r, runs[0]) for r in runs)
            error = max(_relative_error(r, want) for r in runs)
            unchanged = all(np.array_equal(a, c) for a, c in zip(args, copies))
            rows.append({"threads": threads, "primal_ms": primal_s * 1e3, "grad_ms": grad_s * 1e3,
                         "jvp_ms": jvp_s * 1e3, "error_vs_jax": error, "spread": spread,
                         "caller_unchanged": unchanged})
            print(f"{name} threads={threads}: primal {primal_s * 1e3:.2f} ms, grad {grad_s * 1e3:.2f} ms, "
                  f"jvp {jvp_s * 1e3:.2f} ms, error {error:.1e}, spread {spread:.1e}", file=sys.stderr, flush=True)
        report["kernels"][name] = {"size": size, "serial_grad_ms": serial_s * 1e3, "jax_grad_ms": jax_s * 1e3,
                                   "rows": rows}
        if ns.json:  # after each kernel: a run stopped by a time limit keeps what it measured
            Path(ns.json).write_text(json.dumps(report, indent=1))
    report["threading_layer"] = numba.threading_layer()
    if ns.json:
        Path(ns.json).write_text(json.dumps(report, indent=1))
    return report


def markdown(report: dict) -> str:
    """The figures as RESULTS.md's table."""
    lines = [f"Machine: {report['machine']} ({report['cpus']} CPUs); numba {report['numba']} (threading layer "
             f"{report.get('threading_layer', '?')}), jax {report['jax']}, pyjlad {report['pyjlad']}. Best of "
             f"{report['repeat']}; error = largest difference from `jax.grad` (float64) relative to its largest "
             f"component, over {report['runs']} gradients; spread = the same between those gradients.\n",
             "| kernel | size | threads | primal ms | grad ms | jvp ms | grad speedup | grad/primal | error | "
             "spread | serial grad ms | jax.jit(grad) ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, kernel in report["kernels"].items():
        first = kernel["rows"][0]
        for row in kernel["rows"]:
            lines.append(
                f"| {name} | {kernel['size']} | {row['threads']} | {row['primal_ms']:.2f} | {row['grad_ms']:.2f} | "
                f"{row['jvp_ms']:.2f} | {first['grad_ms'] / row['grad_ms']:.2f}x | "
                f"{row['grad_ms'] / row['primal_ms']:.1f} | {row['error_vs_jax']:.1e} | {row['spread']:.1e} | "
                f"{kernel['serial_grad_ms']:.2f} | {kernel['jax_grad_ms']:.2f} |")
    return "\n".join(lines)


def plot(reports: list[dict], png: str) -> None:
    """Speedup over one thread of the gradient, forward mode and the primal, one panel per kernel; each report
    (a run on a fresh machine, say) in its own line style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kernels = list(reports[0]["kernels"])
    fig, axes = plt.subplots(1, len(kernels), figsize=(4 * len(kernels), 3.8), sharey=True)
    axes = np.atleast_1d(axes)
    colors = {"grad_ms": "C0", "jvp_ms": "C1", "primal_ms": "C2"}
    for run, (report, style) in enumerate(zip(reports, ("-", "--", ":", "-."))):
        for ax, name in zip(axes, kernels):
            kernel = report["kernels"][name]
            threads = [r["threads"] for r in kernel["rows"]]
            for key, label in (("grad_ms", "pyjlad.grad"), ("jvp_ms", "pyjlad.jvp"), ("primal_ms", "primal (Numba)")):
                base = kernel["rows"][0][key]
                ax.plot(threads, [base / r[key] for r in kernel["rows"]], marker="o", markersize=3, linestyle=style,
                        color=colors[key], label=f"{label}, run {chr(ord('A') + run)}" if len(reports) > 1 else label)
            if run == 0:
                ax.plot(threads, threads, color="gray", linestyle=":", label="ideal")
                ax.set_title(f"{name}\n{kernel['size']}", fontsize=9)
                ax.set_xlabel("threads")
                ax.set_xscale("log", base=2)
                ax.set_yscale("log", base=2)
                ax.set_xticks(threads, [str(t) for t in threads])
    axes[0].set_ylabel("speedup over 1 thread")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Parallel derivatives of prange code: {reports[0]['machine']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> int:
    sys.path.insert(0, str(HERE))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=None,
                        help="comma-separated thread counts (default: powers of two up to Numba's, and Numba's)")
    from parallel_gradients import add_kernel_sizes  # (HERE is on the path now)

    add_kernel_sizes(parser)
    parser.add_argument("--runs", type=int, default=10, help="gradients compared with JAX and with each other")
    parser.add_argument("--tolerance", type=float, default=1e-10)
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument("--plot", metavar="FILE.json", nargs="+",
                        help="only draw the curves of JSONs written earlier (one per run) and print their tables")
    parser.add_argument("--png", default=str(HERE / "parallel_scaling.png"))
    ns = parser.parse_args()
    if ns.plot:
        reports = [json.loads(Path(f).read_text()) for f in ns.plot]
        plot(reports, ns.png)
        print("\n\n".join(markdown(r) for r in reports))
        return 0
    if ns.quick:
        ns.voxels, ns.pairs, ns.cells, ns.grid, ns.samples, ns.repeat, ns.runs = 500, 200, 10_000, 64, 500, 2, 3
    ns.threads = ns.threads or _default_threads()
    report = measure(ns)
    print(markdown(report))
    bad = [f"{name} at {row['threads']} threads: error {row['error_vs_jax']:.1e}"
           + ("" if row["caller_unchanged"] else ", the caller's arrays changed")
           for name, kernel in report["kernels"].items() for row in kernel["rows"]
           if row["error_vs_jax"] > ns.tolerance or not row["caller_unchanged"]]
    for line in bad:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
