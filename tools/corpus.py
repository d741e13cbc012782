"""The differential corpus: every program's derivatives by pyjlad against JAX's, in float64.

Usage: ``.venv/bin/python tools/corpus.py [--filter SUBSTR ...] [--workers 2] [--json out.json]``

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
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT / "tests", ROOT):  # this checkout's pyjlad and corpus, ahead of any installed copy
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from corpus.runner import FAILURES, matches, run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--filter", action="append", default=[],
                        help="only programs whose name contains this (may be given several times: any of them)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per program")
    parser.add_argument("--recycle", type=int, default=40, help="programs per worker process")
    parser.add_argument("--json", type=Path, help="write every program's outcome here")
    parser.add_argument("--list", action="store_true", help="list the programs and their expectations")
    args = parser.parse_args(argv)

    from corpus.program import all_programs

    programs = {p.name: p for p in all_programs() if not args.filter or any(f in p.name for f in args.filter)}
    # A terminated run stops its workers (the runner's cleanup runs on SystemExit).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.list:
        for p in programs.values():
            print(f"{p.name}  expect={p.expect}  transforms={','.join(p.transforms)}")
        return 0
    start = time.perf_counter()
    mismatches: list[str] = []
    done: dict[str, tuple[str, str, float]] = {}

    def write_json() -> None:
        if args.json:
            args.json.write_text(json.dumps(
                [{"name": name, "family": programs[name].family, "expect": programs[name].expect,
                  "outcome": outcome, "detail": detail, "seconds": round(seconds, 2)}
                 for name, (outcome, detail, seconds) in sorted(done.items())], indent=1))

    def report(name: str, outcome: str, detail: str, seconds: float) -> None:
        done[name] = (outcome, detail, seconds)
        write_json()  # after every program: a run that is stopped keeps what it found
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
    failed = any(kinds[kind] for kind in FAILURES) or mismatches
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
