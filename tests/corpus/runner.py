"""Run corpus programs in spawned worker processes: one program's crash or hang is its own.

Used by ``tools/corpus.py`` (the full run) and ``tests/test_corpus.py`` (the subset in the
suite). Each worker checks one program at a time with :func:`corpus.check.check`; a worker
that dies gives its program the outcome ``crash``, a program still running after ``timeout``
seconds gets ``timeout`` (its worker is killed), and workers are replaced every ``recycle``
programs because JIT-compiled code is never freed within a process.
"""

from __future__ import annotations

import collections
import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

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
        try:
            name = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
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
        report: Callable[[str, str, str, float], None] | None = None) -> dict[str, tuple[str, str, float]]:
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
