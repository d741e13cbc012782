"""The differential corpus in the suite: a fixed subset, each outcome equal to its expectation.

Every corpus program declares what :func:`corpus.check.check` gives today (``expect``):
``agree``, ``refused`` for a construct pyjlad is known to refuse, or ``wrong``/``crash`` for an
open defect declared as such (so that the day it is fixed, its test fails and the declaration is
updated). A program expected to
agree that is refused, wrong, mutates an input or crashes fails here; so does a refused
program that starts agreeing (its expectation must then be updated). The subset is one
variant of a deterministic sample of the constructs of every family, of which the default run takes every
other one (``tests/sampled_tests.py``; ``--full`` runs the whole subset); the full run of every program is
``tools/corpus.py``.
"""

from __future__ import annotations

import zlib

import pytest
from corpus.program import Program, all_programs
from corpus.runner import matches, run

#: One construct in SAMPLE is in the subset (plus the first construct of every family).
SAMPLE = 12


def _construct(p: Program) -> str:
    """``family/construct`` of ``family/construct/variant`` (a two-part name is its own construct)."""
    return "/".join(p.name.split("/")[:2])


def subset(programs: list[Program]) -> list[Program]:
    """One variant (dtype, layout, rank) of every sampled construct, both chosen by a hash of the
    construct's name, so the choice is stable as families grow; plus every family's first construct."""
    variants: dict[str, list[Program]] = {}
    for p in programs:  # name order
        variants.setdefault(_construct(p), []).append(p)
    chosen, families = [], set()
    for construct, group in variants.items():
        digest = zlib.crc32(construct.encode())
        if group[0].family not in families or digest % SAMPLE == 0:
            chosen.append(group[(digest // SAMPLE) % len(group)])
        families.add(group[0].family)
    return chosen


PROGRAMS = all_programs()
SUBSET = subset(PROGRAMS)


def test_corpus_size() -> None:
    """The corpus holds at least 300 programs, under unique names, each with an expectation."""
    assert len(PROGRAMS) >= 300, f"the corpus has {len(PROGRAMS)} programs"
    assert len({p.name for p in PROGRAMS}) == len(PROGRAMS)
    for p in PROGRAMS:
        assert p.expect != "refused" or p.notes, f"{p.name} is expected to be refused without saying why"


@pytest.fixture(scope="module")
def outcomes(request: pytest.FixtureRequest) -> dict[str, tuple[str, str, float]]:
    """The outcome of each program of the subset this session runs (the default run samples it:
    tests/sampled_tests.py)."""
    chosen = {item.callspec.params["prog"].name for item in request.session.items
              if item.nodeid.split("[", 1)[0].endswith("test_corpus.py::test_program")}
    return run([p.name for p in SUBSET if p.name in chosen], workers=2, timeout=300.0, recycle=40)


def _param(p: Program) -> object:
    """A known wrong gradient (``expect="wrong"``, a defect being fixed) is a strict xfail: it is
    reported as such, never counted as a pass, and the suite fails once it starts agreeing."""
    marks = [pytest.mark.xfail(strict=True, reason=f"known wrong gradient: {p.notes}")] if p.expect == "wrong" else []
    return pytest.param(p, marks=marks, id=p.name)


@pytest.mark.parametrize("prog", [_param(p) for p in SUBSET])
def test_program(prog: Program, outcomes: dict[str, tuple[str, str, float]]) -> None:
    outcome, detail, _ = outcomes[prog.name]
    if prog.expect == "wrong":  # the xfail: wrong today, as declared
        assert outcome == "agree", f"{prog.name}: {outcome}: {detail}"
        return
    assert matches(outcome, prog.expect), (
        f"{prog.name}: expected {prog.expect}, got {outcome}: {detail}"
        + (f" (notes: {prog.notes})" if prog.notes else "")
    )
