"""The differential corpus: every program's derivatives by pyjlad against JAX's, in float64.

Usage: ``.venv/bin/python tools/corpus.py [--filter SUBSTR] [--workers 2] [--json out.json]``

Prints one line per program that does not agree, then the tally: programs tried, agreeing,
refused (by reason), wrong, mutated, crashed, timed out, invalid. Exits with status 1 when any
program is wrong, mutated an input, crashed its worker, timed out or is invalid, or when a
program's outcome is not the one it declares (``expect``): a refusal of a program expected to
agree, or an agreement of one expected to be refused.

The programs live in ``tests/corpus/family_*.py``; the check is ``tests/corpus/check.py`` (the
test suite runs a subset, ``tests/test_corpus.py``). Each program runs in a spawned worker
process: a worker that dies takes only its program with it (outcome ``crash``), a program that
runs past ``--timeout`` seconds is stopped (outcome ``timeout``), and workers are replaced
every ``--recycle`` programs because JIT-compiled code is never freed within a process.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import sys
import time
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT / "tests", ROOT):  # this checkout's pyjlad and corpus, ahead of any installed copy
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

#: Outcomes that fail the run whatever the program expects.
FAILURES = ("wrong", "mutated", "crash", "timeout", "invalid-program", "error")


def matches(outcome: str, expect: str) -> bool:
    """Whether ``outcome`` (from :func:`corpus.check.check`) is what ``expect`` declares."""
    if expect == "refused":
        return outcome.startswith("refused:")
    return outcome == expect


def _serve(conn: Connection) -> None:
    """Worker loop: receive a program name, send back ``(outcome, detail, seconds)``."""
    from corpus.check import check

    while True:
        name = conn.recv()
        if name is None:
            return
        start = time.perf_counter()
        outcome, detail = check(name)
        conn.send((outcome, detail, time.perf_counter() - start))


class _Worker:
    """A spawned process checking one program at a time."""

    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.served = 0
        self.name: str | None = None
        self.started = 0.0

    def submit(self, name: str) -> None:
        self.conn.send(name)
        self.name, self.started = name, time.perf_counter()
        self.served += 1

    def stop(self, kill: bool = False) -> None:
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def run(names: list[str], workers: int, timeout: float, recycle: int,
        report: Any = None) -> dict[str, tuple[str, str, float]]:
    """Check ``names`` in worker processes; ``{name: (outcome, detail, seconds)}``.

    ``report(name, outcome, detail, seconds)`` is called as each program finishes.
    """
    ctx = multiprocessing.get_context("spawn")
    pending = collections.deque(names)
    pool = [_Worker(ctx) for _ in range(min(workers, len(names)))]
    results: dict[str, tuple[str, str, float]] = {}

    def finish(worker: _Worker, outcome: str, detail: str, seconds: float) -> None:
        assert worker.name is not None
        results[worker.name] = (outcome, detail, seconds)
        if report is not None:
            report(worker.name, outcome, detail, seconds)
        worker.name = None

    def feed(worker: _Worker) -> _Worker:
        if worker.served >= recycle and pending:
            worker.stop()
            worker = _Worker(ctx)
        if pending:
            worker.submit(pending.popleft())
        return worker

    pool = [feed(w) for w in pool]
    try:
        while any(w.name is not None for w in pool):
            busy = [w for w in pool if w.name is not None]
            now = time.perf_counter()
            remaining = min(w.started + timeout - now for w in busy)
            ready = wait([w.conn for w in busy], timeout=max(remaining, 0.0))
            for k, worker in enumerate(pool):
                if worker.name is None:
                    continue
                if worker.conn in ready:
                    try:
                        outcome, detail, seconds = worker.conn.recv()
                    except (EOFError, OSError):
                        worker.process.join(timeout=5)
                        finish(worker, "crash", f"worker died (exit code {worker.process.exitcode})",
                               time.perf_counter() - worker.started)
                        worker.stop(kill=True)
                        worker = _Worker(ctx)
                    else:
                        finish(worker, outcome, detail, seconds)
                elif time.perf_counter() - worker.started > timeout:
                    finish(worker, "timeout", f"still running after {timeout:.0f} s",
                           time.perf_counter() - worker.started)
                    worker.stop(kill=True)
                    worker = _Worker(ctx)
                pool[k] = feed(worker) if worker.name is None else worker
    finally:
        for worker in pool:
            worker.stop(kill=worker.name is not None)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", default="", help="only programs whose name contains this")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per program")
    parser.add_argument("--recycle", type=int, default=40, help="programs per worker process")
    parser.add_argument("--json", type=Path, help="write every program's outcome here")
    parser.add_argument("--list", action="store_true", help="list the programs and their expectations")
    args = parser.parse_args(argv)

    from corpus.program import all_programs

    programs = {p.name: p for p in all_programs() if args.filter in p.name}
    if args.list:
        for p in programs.values():
            print(f"{p.name}  expect={p.expect}  transforms={','.join(p.transforms)}")
        return 0
    start = time.perf_counter()
    mismatches: list[str] = []

    def report(name: str, outcome: str, detail: str, seconds: float) -> None:
        expect = programs[name].expect
        unexpected = not matches(outcome, expect)
        if unexpected:
            mismatches.append(name)
        if outcome != "agree" or unexpected:
            note = f" (expected {expect})" if unexpected else ""
            print(f"{name}: {outcome}{note} {detail}"[:2000], flush=True)

    results = run(list(programs), args.workers, args.timeout, args.recycle, report)
    elapsed = time.perf_counter() - start
    tally = collections.Counter(outcome for outcome, _, _ in results.values())
    refused = {k: v for k, v in tally.items() if k.startswith("refused:")}
    kinds = collections.Counter(outcome.split(":")[0] for outcome in tally.elements())
    print(f"\n{len(results)} programs tried in {elapsed:.0f} s ({args.workers} workers)")
    print(f"  agree      {kinds['agree']}")
    print(f"  refused    {kinds['refused']}")
    for reason, count in sorted(refused.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {count:4d}  {reason.split(':', 1)[1]}")
    for kind in ("wrong", "mutated", "crash", "timeout", "invalid-program", "error"):
        print(f"  {kind:10s} {kinds[kind]}")
    for outcome in sorted(k for k in tally if k.startswith("error:")):
        print(f"    {tally[outcome]:4d}  {outcome.split(':', 1)[1]}")
    print(f"  outcome differs from expect: {len(mismatches)}")
    if args.json:
        args.json.write_text(json.dumps(
            [{"name": name, "family": programs[name].family, "expect": programs[name].expect,
              "outcome": outcome, "detail": detail, "seconds": round(seconds, 2)}
             for name, (outcome, detail, seconds) in sorted(results.items())], indent=1))
    failed = any(kinds[kind] for kind in FAILURES) or mismatches
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
