"""Record the outputs of the two target pipelines (llvmcall, nvptx) over a snapshot, for a before/after compare.

usage: PYTHONPATH=<checkout> python tools/target_outputs.py SNAPSHOT_DIR OUT_DIR [--live]
       (then `diff -r` two OUT_DIRs: one recorded at the commit before a change, one after)

For every SNAPSHOT/*.portable.ll (entry, name and external functions from the matching .abi.json), and for
the same module re-printed by llvm-link-15 (LLVM's own spelling, as julia_module_text gets it after a link),
and for every .enzyme.ll (what julia_module_text starts from), it writes:
  <stem>.<source>.llvmcall.ll      LLVMCALL.run(text, entry, label=entry), or the exception's type and message
  <stem>.<source>.unresolvable.txt unresolvable_symbols(that output)
  <stem>.<source>.nvptx.ll         device_module(text, external_functions, name=name, label=entry)
  <stem>.<source>.nvptx-noext.ll   device_module(text)  (the derivative's call in tests/test_nvptx.py)
  <stem>.<source>.nvptx-of-llvmcall.ll  device_module(llvmcall output, external, ...) (the CLI's --target nvptx)
With --live, also julia_module_text of a few functions exported here (LAPACK loops linked, BLAS refused).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path


def _call(fn, *args, **kwargs) -> str:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - recorded, whatever it is
        return f"!! {type(exc).__name__}: {exc}\n"


def _pipelines():
    """The pipelines' entry points: in pyjlad.targets, or where they were before it (to record an older commit)."""
    try:
        llvmcall = importlib.import_module("pyjlad.targets.llvmcall")
        nvptx = importlib.import_module("pyjlad.targets.nvptx")
    except ImportError:
        llvmcall = importlib.import_module("pyjlad.engines.julia")
        nvptx = importlib.import_module("pyjlad.nvptx")
    return llvmcall.LLVMCALL, llvmcall.unresolvable_symbols, nvptx.device_module


def record(stem: str, source: str, text: str, abi: dict, out: Path) -> None:
    LLVMCALL, unresolvable_symbols, device_module = _pipelines()
    entry, name, ext = abi["abi"]["entry"], abi["name"], tuple(abi["external_functions"])
    llvmcall = _call(LLVMCALL.run, text, entry, label=entry)
    (out / f"{stem}.{source}.llvmcall.ll").write_text(llvmcall)
    (out / f"{stem}.{source}.nvptx.ll").write_text(_call(device_module, text, ext, name=name, label=entry))
    (out / f"{stem}.{source}.nvptx-noext.ll").write_text(_call(device_module, text))
    if llvmcall.startswith("!! "):
        return
    (out / f"{stem}.{source}.unresolvable.txt").write_text(repr(_call(unresolvable_symbols, llvmcall)))
    (out / f"{stem}.{source}.nvptx-of-llvmcall.ll").write_text(
        _call(device_module, llvmcall, ext, name=name, label=entry))


def live(out: Path) -> None:
    import numpy as np
    from numba import njit

    from pyjlad.engines.julia import julia_module_text
    from pyjlad.export import export, numba_argtypes

    @njit
    def inverse_sum(a):
        return np.sum(np.linalg.inv(a))

    @njit
    def solve_sum(a, b):
        return np.sum(np.linalg.solve(a, b))

    @njit
    def det_inv(a):
        return np.linalg.det(a) + np.sum(np.linalg.inv(a))

    @njit
    def uses_blas(a, b):
        return np.dot(a, b).sum()

    m = np.eye(3) + 0.1
    for label, func, args in [("inverse_sum", inverse_sum, (m,)), ("solve_sum", solve_sum, (m, np.ones(3))),
                              ("det_inv", det_inv, (m,)), ("uses_blas", uses_blas, (m, m))]:
        exported = export(func, numba_argtypes(args))
        text = _call(julia_module_text, exported)
        (out / f"live-{label}.julia_module_text.ll").write_text(text)
        if text.startswith("!! "):
            continue
        _, unresolvable_symbols, device_module = _pipelines()
        (out / f"live-{label}.unresolvable.txt").write_text(repr(_call(unresolvable_symbols, text)))
        (out / f"live-{label}.nvptx-of-llvmcall.ll").write_text(_call(
            device_module, text, exported.module.external_functions, name=exported.name, label=exported.abi.entry))


def main() -> None:
    snapshot, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    for portable in sorted(snapshot.glob("*.portable.ll")):
        stem = portable.name[: -len(".portable.ll")]
        abi = json.loads((snapshot / f"{stem}.abi.json").read_text())
        text = portable.read_text()
        record(stem, "portable", text, abi, out)
        relinked = subprocess.run(["llvm-link-15", "-S", "-o", "-", str(portable)], capture_output=True, text=True)
        if relinked.returncode == 0:
            record(stem, "relinked", relinked.stdout, abi, out)
        else:
            (out / f"{stem}.relinked.error.txt").write_text(relinked.stderr)
        enzyme = snapshot / f"{stem}.enzyme.ll"
        if enzyme.exists():
            record(stem, "enzyme", enzyme.read_text(), abi, out)
    if "--live" in sys.argv:
        live(out)


if __name__ == "__main__":
    main()
