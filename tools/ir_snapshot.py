"""Snapshot every LLVM module pyjlad produces, to prove a refactor leaves them byte for byte identical.

For each exported function it records, one file per item named by a stable key:

``KEY.numba.ll``          Numba's module as ``make_portable`` received it (LLVM 22 IR; object addresses
                          in symbols zeroed: they change from one process to the next)
``KEY.portable.ll``       the exported portable module (``exported.module.text``, LLVM 15 text)
``KEY.abi.json``          the ABI description, external functions and LAPACK links
``KEY.enzyme-numba.ll``   Numba's module of the unvectorized copy Enzyme differentiates
``KEY.enzyme.ll``         its portable module (``exported.enzyme_module.text``)
``KEY.driver-reverse.ll`` / ``KEY.driver-forward.ll`` / ``KEY.driver-hvp.ll``
                          the module handed to Enzyme (``prepare_special(driver.module(enzyme text))``,
                          as ``pyjlad.engines.embedded`` builds it) for a reverse and a forward sweep with
                          every differentiable argument active, and a Hessian-vector product with
                          respect to the first one
``KEY.*.error``           the exception, where a step refuses the function

and ``index.json`` (file name to SHA-256). Recording runs with ``PYTHONHASHSEED=0`` (the script
restarts itself so): Numba names string constants by Python's ``hash()`` (``@.bytes.<hash>``), so
without a fixed seed those names, and every module holding one, change from one process to the next. Keys: ``fuzz-NNNN`` for the fuzzer's programs
(``tests/program_generator.py``), ``t-<module>.<qualname>(<argtypes>)-<hash>`` for the functions the
test suite exports (``~2``, ``~3`` appended where one key exports different modules).

Sources
-------
``--tests pytest`` (default): runs ``pytest tests`` in a subprocess with this file as a plugin, which
records every module ``pyjlad.export._export`` produces (as tests/conftest.py records ``cases.EXPORTED``).
Enzyme is not run: the plugin makes the embedded engine's library loader raise once the driver
module is recorded, so each test stops at its first differentiation (the exports before it are
recorded; ``--with-enzyme`` runs the suite for real, which takes far longer). Tests that spawn
processes or notebooks are left out (``--ignore`` options in ``DEFAULT_PYTEST_ARGS``).
``--tests cases``: only ``tests/cases.py``'s ``CASES`` (fast). ``--tests none``: fuzz programs only.

Workflow (refactor proving byte-identical output)::

    git worktree add /tmp/ir-base <commit before the refactor>
    cp tools/ir_snapshot.py /tmp/ir-base/tools/     # if that commit predates the tool
    (cd /tmp/ir-base && /work/main/.venv/bin/python tools/ir_snapshot.py /tmp/snap-base)
    /work/main/.venv/bin/python tools/ir_snapshot.py /tmp/snap-after     # in the refactored tree
    /work/main/.venv/bin/python tools/ir_snapshot.py --compare /tmp/snap-base /tmp/snap-after
    git worktree remove /tmp/ir-base

``--check-ir DIR`` parses every module of a snapshot with ``pyjlad.ir``: each must render back byte
for byte, and agree with llvmlite (Numba's modules: functions, declarations, parameter counts, globals) and with
today's regex readers (reachability from every definition of Numba's modules; pointer flow and
entry parameters of the portable modules).

``--compare`` prints the items only one side has and those that differ (a unified diff of the
first few) and exits 1 if there are any. Run the script from the tree being snapshotted: it
imports that tree's ``pyjlad`` (the repository root is put first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTEST_ARGS = [
    "tests", "-q", "-p", "no:cacheprovider",
    "--ignore=tests/test_notebooks.py", "--ignore=tests/test_pool.py", "--ignore=tests/test_concurrency.py",
    "--ignore=tests/test_fuzz.py", "--ignore-glob=tests/test_ir_*.py",
]
_ENV_DIR = "PYJLAD_IR_SNAPSHOT_DIR"
_ENV_ENZYME = "PYJLAD_IR_SNAPSHOT_ENZYME"


class _SnapshotStop(Exception):
    """Raised instead of running Enzyme while the test suite is recorded."""


# ----------------------------------------------------------------------------------------- recording
def _sanitize(text: str, limit: int = 100) -> str:
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")
    return clean[:limit]


#: A Python object's address in a Numba symbol (``__numba_array_expr_0x7efc5a6e7890B3v53...``): differs
#: from one process to the next. Replaced by as many zeros in Numba's modules (kept the same length, as
#: the mangled name counts its characters) and ignored by ``--compare``.
_ADDRESS_RE = re.compile(r"(?<=_0x)[0-9a-f]+(?=B\d)")


def _without_addresses(text: str) -> str:
    return _ADDRESS_RE.sub(lambda m: "0" * len(m.group()), text)


def _write(directory: Path, key: str, part: str, text: str) -> None:
    if part.endswith("numba.ll"):
        text = _without_addresses(text)
    (directory / f"{key}.{part}").write_text(text)


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}\n"


class Recorder:
    """Writes the items of each function ``pyjlad.export._export`` exports into ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.numba_inputs: list[str] = []
        self.seen: dict[str, str] = {}  # key -> sha of its portable module
        self.next_key: str | None = None
        self.context = ""  # the test being run (its node id), part of the keys

    def install(self) -> None:
        """Wrap ``pyjlad.export._export`` and ``make_portable`` (kept for the life of the process)."""
        import pyjlad.export as export_module

        original_export, original_portable = export_module._export, export_module.make_portable

        def make_portable(ir: str, entry: str, **options: Any) -> Any:
            self.numba_inputs.append(ir)
            return original_portable(ir, entry, **options)

        def recording(func: Any, argtypes: tuple) -> Any:
            self.numba_inputs.clear()
            exported = original_export(func, argtypes)
            key = self.next_key or self._key(func, exported)
            self.next_key = None
            self.record(key, exported)
            return exported

        export_module.make_portable = make_portable
        export_module._export = recording

    def _key(self, func: Any, exported: Any) -> str:
        from pyjlad.export import as_numba_function, describe_function

        target = as_numba_function(func)
        inner = getattr(target, "py_func", None) or getattr(target, "_pyfunc", None) or target
        function = f"{getattr(inner, '__module__', '')}.{describe_function(target)}{exported.argtypes}"
        full = f"{self.context}::{function}"
        base = (f"t-{_sanitize(self.context, 60)}--{_sanitize(function, 60)}-"
                f"{hashlib.sha256(full.encode()).hexdigest()[:8]}")
        digest = hashlib.sha256(exported.module.text.encode()).hexdigest()
        key, n = base, 1
        while key in self.seen and self.seen[key] != digest:
            n += 1
            key = f"{base}~{n}"
        self.seen[key] = digest
        return key

    def record(self, key: str, exported: Any) -> None:
        """Write every item of ``exported`` under ``key``."""
        directory = self.directory
        if self.numba_inputs:
            _write(directory, key, "numba.ll", self.numba_inputs[0])
        _write(directory, key, "portable.ll", exported.module.text)
        meta = {"abi": exported.abi.to_dict(), "external_functions": list(exported.module.external_functions),
                "links": [list(link) for link in exported.module.links], "name": exported.name}
        _write(directory, key, "abi.json", json.dumps(meta, indent=1, sort_keys=True) + "\n")
        before = len(self.numba_inputs)
        try:
            enzyme_text = exported.enzyme_module.text
        except Exception as exc:  # noqa: BLE001 - recorded as an item
            _write(directory, key, "enzyme.error", _error_text(exc))
            return
        if len(self.numba_inputs) > before:
            _write(directory, key, "enzyme-numba.ll", self.numba_inputs[before])
        _write(directory, key, "enzyme.ll", enzyme_text)
        for part, make in _driver_modules(exported, enzyme_text).items():
            try:
                _write(directory, key, f"{part}.ll", make())
            except Exception as exc:  # noqa: BLE001 - recorded as an item
                _write(directory, key, f"{part}.error", _error_text(exc))


def _driver_modules(exported: Any, enzyme_text: str) -> dict[str, Any]:
    """Builders of the modules Enzyme gets for a reverse, a forward and a Hessian-vector sweep."""
    from pyjlad.engines import embedded
    from pyjlad.engines.driver import ad_driver
    from pyjlad.engines.hvp_driver import hvp_driver
    from pyjlad.special import prepare as prepare_special

    abi = exported.abi
    diff = [i for i, arg in enumerate(abi.args) if arg.differentiable]
    if not diff:
        return {}
    noalias = not any(embedded.is_rule_symbol(n) for n in exported.module.external_functions)
    salt = exported.module.text
    wanted = tuple("diff" if i in diff else "const" for i in range(len(abi.args)))

    def ad(mode: str) -> str:
        activities = embedded.resolve_activities(exported, embedded.Sweep("ad", mode, wanted))
        driver = ad_driver(abi, mode, activities, noalias=noalias, salt=salt)
        return prepare_special(driver.module(enzyme_text))

    def hvp() -> str:
        if not abi.result.dtype.startswith("float"):
            raise ValueError(f"result is {abi.result.dtype}: no Hessian")
        driver = hvp_driver(abi, diff[0], noalias=noalias, salt=salt)
        return prepare_special(driver.module(enzyme_text))

    return {"driver-reverse": lambda: ad("reverse"), "driver-forward": lambda: ad("forward"),
            "driver-hvp": hvp}


# ------------------------------------------------------------------------------ pytest plugin side
_PLUGIN_RECORDER: list[Recorder] = []


def pytest_configure(config: Any) -> None:
    """Plugin hook (``-p ir_snapshot``): record exports into ``$PYJLAD_IR_SNAPSHOT_DIR``."""
    directory = os.environ.get(_ENV_DIR)
    if not directory:
        return
    recorder = Recorder(Path(directory))
    recorder.install()
    _PLUGIN_RECORDER.append(recorder)
    if os.environ.get(_ENV_ENZYME) != "1":
        from pyjlad.engines import embedded

        def no_enzyme(key: str, build_bitcode: Any, name: str) -> Any:
            raise _SnapshotStop("ir_snapshot: Enzyme is not run while recording")

        embedded._load_library = no_enzyme


def pytest_runtest_setup(item: Any) -> None:
    """Plugin hook: the keys of what a test exports start with its node id."""
    for recorder in _PLUGIN_RECORDER:
        recorder.context = item.nodeid


def _record_tests(directory: Path, pytest_args: list[str], with_enzyme: bool) -> int:
    env = dict(os.environ)
    env[_ENV_DIR] = str(directory)
    env[_ENV_ENZYME] = "1" if with_enzyme else "0"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tools"), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", "-p", "ir_snapshot", *pytest_args]
    print("running:", " ".join(command), flush=True)
    return subprocess.run(command, cwd=ROOT, env=env).returncode


def _record_cases(recorder: Recorder) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import cases

    from pyjlad.export import export, numba_argtypes

    for case in cases.CASES:
        try:
            export(case.func, numba_argtypes(case.args))
        except Exception as exc:  # noqa: BLE001 - recorded as an item
            _write(recorder.directory, f"case-{_sanitize(case.name)}", "export.error", _error_text(exc))


def _record_fuzz(recorder: Recorder, count: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from program_generator import generate, sample_point

    from pyjlad.export import export, numba_argtypes

    for seed in range(count):
        key = f"fuzz-{seed:04d}"
        try:
            program = generate(seed)
            recorder.next_key = key
            export(program.func, numba_argtypes(sample_point(seed)))
            print(f"fuzz {seed}", flush=True)
        except Exception as exc:  # noqa: BLE001 - recorded as an item
            _write(recorder.directory, key, "export.error", _error_text(exc))
        recorder.next_key = None


def write_index(directory: Path) -> dict[str, str]:
    """Write ``index.json`` (every item's SHA-256) and return it."""
    index = {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(directory.iterdir()) if p.is_file() and p.name != "index.json"}
    (directory / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return index


# ------------------------------------------------------------------------------------------ compare
def compare(a: Path, b: Path, diffs: int = 3, context_lines: int = 80) -> int:
    """Print how snapshots ``a`` and ``b`` differ; 0 if identical, 1 otherwise."""
    index_a = json.loads((a / "index.json").read_text())
    index_b = json.loads((b / "index.json").read_text())
    only_a = sorted(set(index_a) - set(index_b))
    only_b = sorted(set(index_b) - set(index_a))
    changed = sorted(k for k in set(index_a) & set(index_b) if index_a[k] != index_b[k]
                     and _without_addresses((a / k).read_text()) != _without_addresses((b / k).read_text()))
    for name in only_a:
        print(f"only in {a}: {name}")
    for name in only_b:
        print(f"only in {b}: {name}")
    for name in changed:
        print(f"differs: {name}")
    for name in changed[:diffs]:
        lines = list(difflib.unified_diff((a / name).read_text().splitlines(), (b / name).read_text().splitlines(),
                                          f"{a}/{name}", f"{b}/{name}", lineterm=""))
        print("\n".join(lines[:context_lines]) + ("\n..." if len(lines) > context_lines else ""))
    same = len(set(index_a) & set(index_b)) - len(changed)
    print(f"{same} identical (up to Numba's object addresses), {len(changed)} differ, {len(only_a)} only in {a}, {len(only_b)} only in {b}")
    return 1 if (only_a or only_b or changed) else 0


# ----------------------------------------------------------------------------------------- check IR
def _locals_only(edges: dict, merges: list) -> tuple[dict, list]:
    """A pointer-flow graph with constants (no ``%``) as one ``<const>``: ``pyjlad.aliasing`` names a
    vector constant operand by its last word (``0x7FEF...>``), ``pyjlad.ir`` by the whole constant;
    either way it is an operand of no tracked origin."""
    def name(value: tuple[str, str]) -> tuple[str, str]:
        return value if value[1].startswith("%") else (value[0], "<const>")

    out: dict = {}
    for source, targets in edges.items():
        out.setdefault(name(source), []).extend(name(t) for t in targets)
    return out, [(f, tuple(v if v.startswith("%") else "<const>" for v in ops)) for f, ops in merges]


def _existing_views(text: str, entry: str | None) -> dict[str, Any]:
    """What today's regex passes read from ``text`` (absent where a refactor removed them)."""
    views: dict[str, Any] = {}
    try:
        from pyjlad.aliasing import _graph

        graph = _graph(text)
        views["pointer_flow"] = _locals_only(graph.edges, graph.merges)
    except (ImportError, AttributeError):
        pass
    if entry is not None:
        try:
            from pyjlad.export import _entry_params

            views["entry_parameters"] = _entry_params(text, entry)
        except (ImportError, AttributeError):
            pass
    return views


def _reachability_agrees(text: str, module: Any) -> bool | None:
    """Whether :func:`pyjlad.ir.analysis.reachable` gives ``pyjlad.portable._reachable``'s order from every
    definition of Numba's module ``text`` (``None`` where a refactor removed the latter)."""
    from pyjlad.ir.analysis import reachable

    try:
        from pyjlad.portable import _PORTABLE_RUNTIME_DEPS, PORTABLE_RUNTIME, _reachable, split_module
    except ImportError:
        return None
    _, entity_list, _ = split_module(text)
    entities = {e.name: e for e in entity_list}
    extra = {name: _PORTABLE_RUNTIME_DEPS.get(name, set()) for name in PORTABLE_RUNTIME}
    agrees = True
    for entity in entity_list:
        if entity.kind != "define":
            continue
        old, new = _reachable(entities, entity.name), reachable(module, entity.name, extra=extra)
        if old != new:
            agrees = False
            print(f"  from {entity.name[:80]}: only pyjlad.portable reaches {sorted(set(old) - set(new))[:3]}, "
                  f"only pyjlad.ir reaches {[s[:80] for s in sorted(set(new) - set(old))[:3]]}")
    return agrees


def check_ir(directory: Path) -> int:
    """Parse every ``.ll`` item of a snapshot: it must render back byte for byte; Numba's modules must
    agree with llvmlite (function names, declarations, parameter counts, globals); portable modules
    with the pointer-flow graph and entry parameters today's regex passes read. 0 if all hold."""
    import llvmlite.binding as llvm

    from pyjlad.ir import parse
    from pyjlad.ir.analysis import llvmlite_signatures, numba_entry, pointer_flow

    counts = {"modules": 0, "round-trip": 0, "llvmlite": 0, "reachable": 0, "pointer_flow": 0,
              "entry_parameters": 0}
    failures: list[str] = []
    for path in sorted(directory.glob("*.ll")):
        text = path.read_text()
        counts["modules"] += 1
        module = parse(text)
        if module.render() != text:
            failures.append(f"{path.name}: does not render back")
            continue
        counts["round-trip"] += 1
        if path.name.endswith("numba.ll"):
            mine = {f.name: (f.is_declaration, len(f.parameters)) for f in module.functions.values()}
            globals_ = {g.name for g in module.globals.values() if g.kind in ("global", "constant")}
            theirs = {g.name for g in llvm.parse_assembly(text).global_variables}
            if mine != llvmlite_signatures(text) or globals_ != theirs:
                failures.append(f"{path.name}: differs from llvmlite's view")
            else:
                counts["llvmlite"] += 1
            agrees = _reachability_agrees(text, module)
            if agrees is False:
                failures.append(f"{path.name}: reachability differs from pyjlad.portable's")
            counts["reachable"] += bool(agrees)
            continue
        if not path.name.endswith((".portable.ll", ".enzyme.ll")):
            continue
        key = path.name.removesuffix(".portable.ll").removesuffix(".enzyme.ll")
        abi = json.loads((directory / f"{key}.abi.json").read_text())["abi"]
        views = _existing_views(text, abi["entry"])
        if "pointer_flow" in views:
            flow = pointer_flow(module)
            if _locals_only(flow.edges, flow.merges) != views["pointer_flow"]:
                failures.append(f"{path.name}: pointer flow differs from pyjlad.aliasing's")
            else:
                counts["pointer_flow"] += 1
        if "entry_parameters" in views:
            entry = numba_entry(module, abi["entry"])
            mine = [p.render() for p in (entry.retptr, entry.excinfo, *entry.arguments)]
            if mine != views["entry_parameters"]:
                failures.append(f"{path.name}: entry parameters differ from pyjlad.export's")
            else:
                counts["entry_parameters"] += 1
    for failure in failures:
        print(failure)
    print(", ".join(f"{k} {v}" for k, v in counts.items()) + f"; {len(failures)} failures")
    return 1 if failures else 0


# --------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, help="where to write the snapshot")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("DIR_A", "DIR_B"))
    parser.add_argument("--check-ir", type=Path, metavar="DIR",
                        help="round-trip every module of snapshot DIR through pyjlad.ir and cross-check it")
    parser.add_argument("--fuzz", type=int, default=200, help="the fuzzer's first N programs (default 200)")
    parser.add_argument("--tests", choices=("pytest", "cases", "none"), default="pytest")
    parser.add_argument("--with-enzyme", action="store_true", help="let the test suite run Enzyme")
    parser.add_argument("--pytest-args", nargs=argparse.REMAINDER, default=None,
                        help=f"instead of {' '.join(DEFAULT_PYTEST_ARGS)}")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.check_ir:
        sys.path.insert(0, str(ROOT))
        return check_ir(args.check_ir)
    if args.directory is None:
        parser.error("give a directory to write, or --compare DIR_A DIR_B")
    if os.environ.get("PYTHONHASHSEED") != "0":
        # Numba names string constants by Python's hash() (``@.bytes.-4446739099191175225``), which
        # changes from one process to the next unless the hash seed is fixed.
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *(argv or sys.argv[1:])], env)
    sys.path.insert(0, str(ROOT))
    directory: Path = args.directory
    directory.mkdir(parents=True, exist_ok=True)
    if any(directory.iterdir()):
        parser.error(f"{directory} is not empty")
    start = time.perf_counter()
    recorder = Recorder(directory)
    recorder.install()
    try:
        _record_fuzz(recorder, args.fuzz)
        if args.tests == "cases":
            _record_cases(recorder)
    except Exception:  # noqa: BLE001 - the snapshot is still written
        traceback.print_exc()
    if args.tests == "pytest":
        _record_tests(directory, args.pytest_args or DEFAULT_PYTEST_ARGS, args.with_enzyme)
    index = write_index(directory)
    print(f"{len(index)} items in {directory} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
