"""The 2-D heat step's parallel derivatives by the layout of the grid it reads (issue 17): time at 1 and 2 threads.

``parallel_gradients.heat2d`` (one explicit step of a 5-point stencil in a ``prange`` over rows) on a
``--grid`` x ``--grid`` grid passed as a C-contiguous array, a Fortran-ordered one, a view of every other row
and column of a grid twice as large (strided), and a C array read backwards (``[::-1, ::-1]``). Each is read in
place, each thread's rows split into interior and edges, the views' strides checked at run time
(:mod:`pyjlad.private_adjoints`; before 2026-12-01 the views were copied per thread with their halo). For each:
``pyjlad.grad`` and ``pyjlad.hvp`` with ``PYJLAD_PARALLEL_DERIVATIVES=1`` (the default) and ``0`` (the serial
derivative); a derivative that fell back to the serial one says so. Every result is checked against the serial
derivative's (1e-10 relative) before it is timed. Best of ``--repeat``. Prints markdown.

Run: ``python benchmarks/stencil_layouts.py`` (``--grid 128`` for a quick run).
"""

from __future__ import annotations

import argparse
import os
import warnings

import numba
import numpy as np
from parallel_gradients import _serial_twin, _time, first_call, heat2d  # beside this script

import pyjlad


def layouts(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The grid in each layout (the same values where the layouts allow it)."""
    c = rng.normal(size=(n, n))
    return {"C": c, "F": np.asfortranarray(c), "strided (every other row and column)": rng.normal(size=(2 * n, 2 * n))[::2, ::2],
            "reversed ([::-1, ::-1])": c[::-1, ::-1]}


def main() -> None:
    from machine import describe  # beside this script, on the path when it runs

    parser = argparse.ArgumentParser()
    parser.add_argument("--grid", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    ns = parser.parse_args()
    rng = np.random.default_rng(0)
    warnings.simplefilter("ignore", numba.NumbaPerformanceWarning)
    rows = []
    for name, u in layouts(ns.grid, rng).items():
        v = rng.normal(size=u.shape)
        parallel, serial = _serial_twin(heat2d), _serial_twin(heat2d)  # (built afresh for each layout)
        for what in ("grad", "hvp"):
            def call(f, what=what, u=u, v=v):
                return pyjlad.grad(f)(u, 0.1) if what == "grad" else pyjlad.hvp(f, (u, 0.1), v)

            os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
            reference = call(serial)
            os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
            got, fell_back = first_call(lambda c=call, f=parallel: c(f))
            np.testing.assert_allclose(got, reference, rtol=1e-10, atol=1e-10 * np.abs(reference).max())
            for threads in (1, 2):
                numba.set_num_threads(threads)
                os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "1"
                on = _time(lambda c=call, f=parallel: c(f), ns.repeat, threads)[0]
                os.environ["PYJLAD_PARALLEL_DERIVATIVES"] = "0"
                off = _time(lambda c=call, f=serial: c(f), ns.repeat, threads)[0]
                rows.append((name, what, threads, on, off, fell_back))
    os.environ.pop("PYJLAD_PARALLEL_DERIVATIVES", None)
    print("### The heat step's derivatives by the grid's layout (issue 17)\n")
    print(f"`python benchmarks/stencil_layouts.py --grid {ns.grid} --repeat {ns.repeat}` on {describe()} (shared, "
          f"noisy); numba {numba.__version__} (threading layer {numba.threading_layer()}). Best of {ns.repeat}. "
          "`parallel` = `PYJLAD_PARALLEL_DERIVATIVES=1` (the default), `serial` = `0`; every result checked against "
          "the serial derivative's first.\n")
    print("| grid layout | derivative | threads | parallel ms | serial ms | parallel / serial |")
    print("|---|---|---|---|---|---|")
    for name, what, threads, on, off, fell_back in rows:
        note = " (fell back: serial)" if fell_back else ""
        print(f"| {name} | {what}{note} | {threads} | {on * 1e3:.2f} | {off * 1e3:.2f} | {on / off:.2f} |")


if __name__ == "__main__":
    main()
