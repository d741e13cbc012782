"""Time to a first derivative, for idioms whose error paths format run-time values into their messages.

A slice assignment checks its shapes and an axis reduction its axis; when the check fails, Numba formats the
values into the exception's message with its string code (``numba.cpython.unicode``). Every derivative of
such a function carries that code on its error path. Each case here runs in a fresh process with the disk
cache off: Numba compiles the function first (not counted), then the first call of the transform builds
the derivative (export, Enzyme, machine code), timed, and its result is checked against central differences
(exact here: every case is a quadratic function of its input).

``--baseline DIR`` runs every case with another checkout of pyjlad (its root, e.g. a ``git worktree``) first on
the path too, alternating with this one, so both see the same load; the table then gives both and their ratio.

Run ``python benchmarks/build_time.py [--repeat 2] [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def pad_rows(x):
    """Rows of ``x`` between a copy of its last row and zeros, times their neighbours (a 2-D slice assignment)."""
    y = np.zeros((x.shape[0] + 2, x.shape[1]))
    y[1:-1] = x
    y[0] = x[-1]
    return y[1:] * y[:-1]


def padded_energy(x):
    """A 1-D slice assignment."""
    y = np.zeros(x.shape[0] + 2)
    y[1:-1] = x
    return np.sum(y[1:] * y[:-1])


def column_sums(x):
    """A sum along an axis."""
    return np.sum(np.sum(x, axis=0) ** 2)


def running_sums(x):
    """A cumulative sum along an axis."""
    return np.sum(np.cumsum(x, axis=1) ** 2)


def loop_energy(x):
    """A loop with no formatted error message (the control)."""
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += x[i] * x[i + 1]
    return s


#: name -> (function, transform, input shape).
CASES = {
    "2-D slice assignment, reverse jacobian": (pad_rows, "jacobian", (3, 2)),
    "1-D slice assignment, gradient": (padded_energy, "gradient", (5,)),
    "sum along an axis, gradient": (column_sums, "gradient", (3, 2)),
    "cumsum along an axis, gradient": (running_sums, "gradient", (3, 2)),
    "loop (control), gradient": (loop_energy, "gradient", (5,)),
}


def _central_differences(f, x: np.ndarray) -> np.ndarray:
    """d f / d x by central differences with step 1: exact for a quadratic ``f`` (up to rounding)."""
    columns = []
    for k in range(x.size):
        step = np.zeros(x.size)
        step[k] = 1.0
        step = step.reshape(x.shape)
        columns.append((np.asarray(f(x + step)) - np.asarray(f(x - step))) / 2.0)
    return np.moveaxis(np.array(columns).reshape(x.shape + np.shape(f(x))), tuple(range(x.ndim)),
                       tuple(range(-x.ndim, 0)))


def child(name: str) -> dict[str, float]:
    """Run case ``name`` in this (fresh) process: seconds of Numba's compile and of the first derivative."""
    from numba import njit

    import pyjlad

    function, transform, shape = CASES[name]
    x = np.random.default_rng(0).standard_normal(shape)
    before = x.copy()
    f = njit(function)
    start = time.perf_counter()
    f(x)
    compiled = time.perf_counter()
    got = pyjlad.jacobian(f, x, mode="reverse") if transform == "jacobian" else pyjlad.gradient(f, x)
    built = time.perf_counter()
    np.testing.assert_array_equal(x, before)
    np.testing.assert_allclose(got, _central_differences(f, before), rtol=1e-12, atol=1e-12)
    return {"numba": compiled - start, "first": built - compiled}


def _run(name: str, root: Path) -> dict[str, float]:
    env = dict(os.environ, PYJLAD_DISABLE_DISK_CACHE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2, help="fresh processes per case and checkout (best kept)")
    parser.add_argument("--baseline", type=Path, help="another checkout's root, measured alternately")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    sys.path.insert(0, str(HERE))  # machine.py, beside this script
    import numba
    from machine import describe

    import pyjlad

    roots = {"this": HERE.parent, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    best: dict[tuple[str, str], dict[str, float]] = {}
    for name in CASES:
        for _ in range(args.repeat):
            for label, root in roots.items():
                got = _run(name, root)
                kept = best.get((name, label))
                if kept is None or got["first"] < kept["first"]:
                    best[name, label] = got
    command = "python benchmarks/build_time.py" + (f" --repeat {args.repeat}" if args.repeat != 2 else "")
    print("### Time to a first derivative\n")
    print(f"Command: `{command}{' --baseline DIR' if args.baseline else ''}`; machine: {describe()} (shared); "
          f"Python {platform.python_version()}, numba {numba.__version__}, pyjlad {pyjlad.__version__}. "
          f"Fresh process per call, disk cache off, best of {args.repeat}; seconds of the first call of the "
          "transform (export, Enzyme, machine code), after Numba's compile of the function"
          + (f"; baseline: the checkout at `{args.baseline}`." if args.baseline else ".") + "\n")
    if args.baseline:
        print("| function | Numba's compile | first derivative, baseline | first derivative | ratio |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name in CASES:
            this, base = best[name, "this"], best[name, "baseline"]
            print(f"| {name} | {this['numba']:.2f} s | {base['first']:.2f} s | {this['first']:.2f} s "
                  f"| {this['first'] / base['first']:.2f} |")
    else:
        print("| function | Numba's compile | first derivative |")
        print("| --- | ---: | ---: |")
        for name in CASES:
            this = best[name, "this"]
            print(f"| {name} | {this['numba']:.2f} s | {this['first']:.2f} s |")


if __name__ == "__main__":
    main()
