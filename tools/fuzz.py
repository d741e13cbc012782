"""Differential fuzzing: random Numba programs, pyjlad's gradient vs central finite differences.

Usage: ``.venv/bin/python tools/fuzz.py --programs 1000 [--start 0] [--construct NAME ...]``

``--construct`` (repeatable) keeps only the programs whose extension blocks include one of the named
constructs (``tests/program_generator.py``'s ``CONSTRUCTS``): ``--programs`` then counts those, taken in seed order
from ``--start``.

Prints one line per program that does not agree, then the tally by outcome.
The generator lives in ``tests/program_generator.py`` (the test suite runs the
first 20 programs); a program that does not agree is printed with the constructs
of its extension blocks. Programs run in worker processes that are replaced every 50
programs, because JIT-compiled code is never freed within a process.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from program_generator import CONSTRUCTS, check, generate  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--construct", action="append", choices=CONSTRUCTS, default=[],
                        help="only programs with this construct (repeatable: any of them)")
    args = parser.parse_args()
    tally: collections.Counter[str] = collections.Counter()
    start = time.perf_counter()
    seeds = _seeds(args.start, args.programs, frozenset(args.construct))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.workers, maxtasksperchild=50) as pool:
        outcomes = pool.imap(check, seeds)
        for seed, (outcome, detail) in zip(seeds, outcomes):
            _record(tally, seed, outcome, detail)
    elapsed = time.perf_counter() - start
    print(f"{args.programs} programs in {elapsed:.0f} s: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    return 0 if set(tally) <= {"agree", "invalid-program"} else 1


def _seeds(start: int, count: int, constructs: frozenset[str]) -> list[int]:
    """``count`` seeds from ``start`` on; with ``constructs``, only those whose program has one of them."""
    if not constructs:
        return list(range(start, start + count))
    found: list[int] = []
    seed = start
    while len(found) < count:
        if constructs & set(generate(seed).constructs):
            found.append(seed)
        seed += 1
    return found


def _record(tally, seed, outcome, detail) -> None:
    tally[outcome] += 1
    if outcome == "invalid-program":
        print(f"program {seed}: {outcome} ({detail})", flush=True)
    elif outcome != "agree":
        program = generate(seed)
        kinds = ", ".join(program.constructs) or "base only"
        print(f"program {seed} ({kinds}): {outcome} {detail}\n{program.source}\n", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
