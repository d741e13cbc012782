"""Run pyjlad's reliability probes (issue 14) and report the figures.

Every probe of ``tests/reliability/probes.py`` runs in a process of its own, with a timeout: a
forked child of a warmed worker (``pyjlad`` imported and one gradient built, so a probe costs only
its own work), or a fresh interpreter when the probe sets environment variables or is a script.
A process that dies is counted (outcome ``death`` with its signal) and the run goes on.

Outcomes: ``clear-error`` (the declared exception, its message containing the declared words),
``correct`` (equal to the hand-derived oracle, inputs unchanged), ``degraded`` (the cache fell back to
memory: right answer, one ``CacheWarning``), ``unclear-error`` (another exception type or message, or a
silent degradation), ``wrong-answer``, ``death``, ``timeout``. A probe passes when its outcome is the one
it declares (``defect`` probes are reported, never counted).

Usage::

    python tools/reliability.py --workers 2 --json /tmp/reliability.json
    python tools/reliability.py --quick          # the subset the test suite runs
    python tools/reliability.py -k cache         # probes whose name or category contains "cache"

Exit status 1 when any probe gives a wrong answer, dies, times out, raises an unclear error, or
otherwise differs from what it declares.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __name__ == "__main__":  # tools/ off the path: ``reliability`` is the package tests/reliability, not this file
    sys.path[:] = [str(ROOT / "tests"), str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "tools"
                                                      and p not in (str(ROOT / "tests"), str(ROOT))]

OUTCOMES = ("correct", "clear-error", "degraded", "unclear-error", "wrong-answer", "death", "timeout")
EXPECTED_OUTCOME = {"correct": "correct", "clear-error": "clear-error", "degrades": "degraded"}
_RESULT = "@@RELIABILITY-RESULT "


# ----------------------------------------------------------------------------------------- judging one probe


def same(got: Any, expected: Any, rtol: float, atol: float) -> bool:
    """``got`` equals ``expected``: nested sequences entry by entry, arrays of the same shape within tolerance
    (NaN equal to NaN, infinities exactly)."""
    if isinstance(expected, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(expected) and all(
            same(g, e, rtol, atol) for g, e in zip(got, expected))
    if isinstance(expected, (bool, bytes, str)) or expected is None:
        return got == expected
    import numpy as np

    try:
        g = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    e = np.asarray(expected, dtype=np.float64)
    return g.shape == e.shape and bool(np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True))


def _unchanged(before: tuple, after: tuple) -> bool:
    import numpy as np

    for b, a in zip(before, after):
        if isinstance(b, np.ndarray):
            if not (a.shape == b.shape and np.array_equal(a, b, equal_nan=True)):
                return False
        elif not same(a, b, 0.0, 0.0):
            return False
    return True


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {str(exc)[:600]}"


def _cache_warnings(caught: list) -> list[str]:
    from pyjlad.errors import CacheWarning

    return [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


def judge(probe: Any) -> tuple[str, str]:
    """Run ``probe`` (a call probe) here and return (outcome, detail)."""
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        args: tuple = ()
        try:
            args = probe.inputs() if probe.inputs else ()
            copies = copy.deepcopy(args)
            expected = None
            if probe.oracle is not None:
                expected = (probe.oracle() if probe.expect == "degrades" else probe.oracle(*copy.deepcopy(args)))
            value = probe.call(*args)
        except AssertionError as exc:
            return "wrong-answer", f"a check failed: {exc}\n{traceback.format_exc()[-1500:]}"
        except BaseException as exc:  # noqa: BLE001 - every exception is an outcome here
            if probe.expect == "clear-error":
                if isinstance(exc, probe.error) and re.search(probe.words, str(exc)):
                    return "clear-error", _describe(exc)
                return "unclear-error", f"expected {probe.error} matching {probe.words!r}; got {_describe(exc)}"
            return "unclear-error", f"{_describe(exc)}\n{traceback.format_exc()[-1500:]}"
    if probe.expect == "clear-error":
        return "wrong-answer", f"returned {value!r:.300} instead of raising {probe.error}"
    if probe.expect == "degrades":
        if not same(value["value"], expected, probe.rtol, probe.atol):
            return "wrong-answer", f"got {value['value']!r:.500}, expected {expected!r:.500}"
        found = value["warnings"]
        if len(found) != 1 or not re.search(probe.words or "", found[0]):
            return "unclear-error", f"expected one CacheWarning matching {probe.words!r}; got {found!r:.800}"
        return "degraded", found[0][:400]
    if probe.oracle is not None and not same(value, expected, probe.rtol, probe.atol):
        return "wrong-answer", f"got {value!r:.600}, expected {expected!r:.600}"
    if not _unchanged(copies, args):
        return "wrong-answer", "the probe's inputs were changed by the call"
    return "correct", ""


def judge_script(proc: subprocess.CompletedProcess) -> tuple[str, str]:
    """Classify a script probe's finished process."""
    if proc.returncode < 0:
        return "death", f"killed by {signal.Signals(-proc.returncode).name}\n{proc.stderr[-1500:]}"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode == 0 and lines and lines[-1].strip() == "ok":
        return "correct", ""
    if "AssertionError" in proc.stderr:
        return "wrong-answer", proc.stderr[-1500:]
    return "unclear-error", f"exit {proc.returncode}\n{proc.stdout[-500:]}\n{proc.stderr[-1500:]}"


# ----------------------------------------------------------------------------------------- processes


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_bounded(cmd: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess | None:
    """Run ``cmd`` in a session of its own; None (after killing the whole session) if it outlives ``timeout``."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=tempfile.gettempdir(), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, **extra)
    # no empty entry: it would put the working directory (the temporary directory) on the path, where any
    # stray file shadows a module (a /tmp/nt.py made every probe worker fail to start)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONFAULTHANDLER", "1")
    return env


def run_fresh(probe: Any) -> tuple[str, str]:
    """Run ``probe`` in a new interpreter (its ``env`` applied; a script, or ``--child NAME``)."""
    from reliability.probes import script_source

    if probe.script is not None:
        cmd = [sys.executable, "-c", script_source(probe)]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", probe.name]
    with tempfile.TemporaryDirectory(prefix="pyjlad-reliability-") as scratch:
        proc = _run_bounded(cmd, _child_env({**probe.env, "TMPDIR": scratch}), probe.timeout)
    if proc is None:
        return "timeout", f"still running after {probe.timeout:g} s"
    if probe.script is not None:
        return judge_script(proc)
    if proc.returncode < 0:
        return "death", f"killed by {signal.Signals(-proc.returncode).name}\n{proc.stderr[-1500:]}"
    for line in proc.stdout.splitlines():
        if line.startswith(_RESULT):
            outcome, detail = json.loads(line[len(_RESULT):])
            return outcome, detail
    return "death", f"exit {proc.returncode} without a result\n{proc.stderr[-1500:]}"


def _child_main(name: str) -> int:
    from reliability.probes import BY_NAME

    outcome, detail = judge(BY_NAME[name])
    sys.stdout.flush()
    print(_RESULT + json.dumps([outcome, detail]), flush=True)
    return 0


def _warm_up() -> None:
    import numpy as np
    from numba import njit

    import pyjlad

    pyjlad.gradient(njit(lambda x: np.sum(x * x) * 0.5), np.ones(2))


def _fork_one(probe: Any) -> tuple[str, str]:
    """Fork, judge ``probe`` in the child, wait at most its timeout."""
    read_fd, write_fd = os.pipe()
    log = tempfile.TemporaryFile()
    scratch = tempfile.mkdtemp(prefix="pyjlad-reliability-")
    pid = os.fork()
    if pid == 0:  # the child: its output to a log, its verdict through the pipe
        try:
            os.setpgid(0, 0)  # its own group: a timeout kills what it started too (opt)
            os.environ["TMPDIR"] = tempfile.tempdir = scratch  # what it leaves in /tmp goes with it
            os.close(read_fd)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            verdict = judge(probe)
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(write_fd, json.dumps(verdict).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks, deadline = [], time.monotonic() + probe.timeout
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_fd)
    if timed_out:
        _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    log.seek(0)
    tail = log.read()[-1500:].decode(errors="replace")
    log.close()
    shutil.rmtree(scratch, ignore_errors=True)
    if timed_out:
        return "timeout", f"still running after {probe.timeout:g} s\n{tail}"
    if os.WIFSIGNALED(status):
        return "death", f"killed by {signal.Signals(os.WTERMSIG(status)).name}\n{tail}"
    if not chunks:
        return "death", f"exit {os.waitstatus_to_exitcode(status)} without a result\n{tail}"
    outcome, detail = json.loads(b"".join(chunks))
    return outcome, detail


def _server_main() -> int:
    """Read probe names from stdin; fork a child for each; answer one JSON line each."""
    from reliability.probes import BY_NAME

    _warm_up()
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the protocol stream
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        name = line.rstrip("\n")
        start = time.monotonic()
        outcome, detail = _fork_one(BY_NAME[name])
        out.write(json.dumps([outcome, detail, time.monotonic() - start]) + "\n")
        out.flush()
    return 0


class Worker:
    """A warmed server process that forks one child per probe (restarted if it dies itself)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--server"], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env({}),
                                     cwd=tempfile.gettempdir())
        if self.proc.stdout.readline().strip() != "ready":
            self.proc.wait()
            raise RuntimeError("the probe worker did not start (pyjlad import or warm-up failed)")

    def run(self, probe: Any) -> tuple[str, str]:
        if self.proc is None or self.proc.poll() is not None:
            try:
                self._start()
            except RuntimeError as exc:
                self.proc = None
                return "death", str(exc)
        self.proc.stdin.write(probe.name + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            return "death", f"the worker itself ended (status {code})"
        outcome, detail, _ = json.loads(line)
        return outcome, detail

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(60)


# ----------------------------------------------------------------------------------------- the run


def run_probes(probes: list, workers: int = 2, progress: bool = False) -> list[dict]:
    """Run ``probes`` on ``workers`` processes at a time; one result dict per probe, in table order."""
    local = threading.local()
    made: list[Worker] = []
    lock = threading.Lock()

    def one(probe: Any) -> dict:
        start = time.monotonic()
        if probe.env or probe.script is not None:
            outcome, detail = run_fresh(probe)
        else:
            if not hasattr(local, "worker"):
                local.worker = Worker()
                with lock:
                    made.append(local.worker)
            outcome, detail = local.worker.run(probe)
        passed = probe.expect == "defect" or outcome == EXPECTED_OUTCOME[probe.expect]
        result = {"name": probe.name, "category": probe.category, "expect": probe.expect, "outcome": outcome,
                  "passed": passed, "seconds": round(time.monotonic() - start, 2), "rows": list(probe.rows),
                  "detail": detail, "note": probe.note}
        if progress:
            mark = "ok  " if passed else "FAIL"
            with lock:
                print(f"[{mark}] {outcome:13s} {result['seconds']:6.1f}s  {probe.category:13s} {probe.name}",
                      flush=True)
                if not passed:
                    print("       " + detail.replace("\n", "\n       ")[:2000], flush=True)
        return result

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(one, probes))
    finally:
        for worker in made:
            worker.close()


def figures(results: list[dict]) -> dict[str, Any]:
    """The counts README reports; outcomes are counted over the probes not declared known defects."""
    by_cat = Counter(r["category"] for r in results)
    counted = [r for r in results if r["expect"] != "defect"]
    outcomes = Counter(r["outcome"] for r in counted)
    return {
        "probes": len(results),
        "integrity checks": by_cat["integrity"],
        "bad or odd inputs tried": by_cat["bad-input"] + by_cat["odd-input"],
        "clear errors": outcomes["clear-error"],
        "correct": outcomes["correct"],
        "degraded gracefully": outcomes["degraded"],
        "cache fault cases": by_cat["cache-fault"],
        "cache attack cases": by_cat["cache-attack"],
        "concurrency cases": by_cat["concurrency"],
        "memory-safety cases": by_cat["memory-safety"],
        "unclear errors": outcomes["unclear-error"],
        "wrong answers": outcomes["wrong-answer"],
        "process deaths": outcomes["death"],
        "timeouts": outcomes["timeout"],
        "known defects": [f"{r['name']} ({r['outcome']})" for r in results if r["expect"] == "defect"],
        "failed": sum(not r["passed"] for r in results),
    }


def tally_text(results: list[dict]) -> str:
    """A table: categories by outcome, then the figures."""
    from reliability.probes import CATEGORIES

    counts = Counter((r["category"], r["outcome"]) for r in results)
    head = f"{'category':14s}" + "".join(f"{o:>14s}" for o in OUTCOMES) + f"{'total':>8s}"
    lines = [head]
    for cat in CATEGORIES:
        row = [counts[(cat, o)] for o in OUTCOMES]
        lines.append(f"{cat:14s}" + "".join(f"{n:>14d}" for n in row) + f"{sum(row):>8d}")
    lines.append("")
    lines += [f"{k}: {v}" for k, v in figures(results).items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="only the probes marked quick")
    parser.add_argument("-k", dest="filter", help="only probes whose name or category contains this text")
    parser.add_argument("--json", type=Path, help="write every result and the figures here")
    parser.add_argument("--list", action="store_true", help="list the probes and the uncovered doc rows")
    parser.add_argument("--server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.server:
        return _server_main()
    if args.child:
        return _child_main(args.child)

    from reliability.probes import PROBES, uncovered_rows

    probes = [p for p in PROBES if (not args.quick or p.quick)
              and (not args.filter or args.filter in p.name or args.filter in p.category)]
    missing = uncovered_rows()
    if args.list:
        for p in probes:
            print(f"{p.category:14s} {p.expect:12s} {'Q' if p.quick else ' '} {p.name}")
        print(f"{len(probes)} probes; docs/errors.md rows without a probe: {missing or 'none'}")
        return 0
    start = time.monotonic()
    results = run_probes(probes, workers=args.workers, progress=True)
    wall = time.monotonic() - start
    print()
    print(tally_text(results))
    print(f"wall time: {wall:.0f} s with {args.workers} workers")
    print(f"docs/errors.md rows without a probe: {missing or 'none'}")
    failed = [r for r in results if not r["passed"]]
    for r in failed:
        print(f"FAILED: {r['name']} ({r['category']}): expected {r['expect']}, got {r['outcome']}")
    if args.json:
        args.json.write_text(json.dumps({"figures": figures(results), "wall_s": round(wall, 1),
                                         "workers": args.workers, "uncovered_rows": missing,
                                         "results": results}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
