"""The reliability probe (issue 14): its table covers every category and every row of docs/errors.md, and a
fixed fast subset runs through the same runner as ``tools/reliability.py`` with each probe's declared outcome.

Each probe runs in a process of its own (a forked child of a warmed worker, or a fresh interpreter), so a
process death is a failed probe here, never a dead test runner.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from reliability.probes import CATEGORIES, PROBES, doc_rows, uncovered_rows

ROOT = Path(__file__).resolve().parent.parent


def _runner():
    spec = importlib.util.spec_from_file_location("reliability_runner", ROOT / "tools" / "reliability.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_category_has_probes_and_the_figures_reach_their_floors():
    counts = {c: sum(p.category == c for p in PROBES) for c in CATEGORIES}
    assert all(counts.values()), counts
    assert counts["bad-input"] + counts["odd-input"] >= 90, counts
    assert counts["integrity"] >= 70, counts
    assert any(p.script for p in PROBES if p.category == "memory-safety")  # process-death cases: own interpreter


def test_every_row_of_docs_errors_has_a_probe():
    rows = doc_rows()
    assert rows == list(range(1, len(rows) + 1)) and len(rows) >= 60  # the table was parsed
    assert uncovered_rows() == []
    known = set(rows)
    assert {r for p in PROBES for r in p.rows} <= known  # no probe names a row that does not exist


def test_the_runner_classifies_outcomes_it_did_not_expect():
    """The judge is not a rubber stamp: a wrong value, a wrong message and a silent acceptance all fail."""
    from reliability.probes import Probe

    judge = _runner().judge
    wrong = Probe("wrong", "integrity", "correct", call=lambda: 2.0, oracle=lambda: 3.0)
    unclear = Probe("unclear", "bad-input", "clear-error", call=lambda: {}["k"], error=TypeError, words="x")
    accepted = Probe("accepted", "bad-input", "clear-error", call=lambda: 1.0, error=TypeError, words="x")
    silent = Probe("silent", "cache-fault", "degrades", call=lambda: {"value": 1.0, "warnings": []},
                   oracle=lambda: 1.0, words="w")
    assert [judge(p)[0] for p in (wrong, unclear, accepted, silent)] == [
        "wrong-answer", "unclear-error", "wrong-answer", "unclear-error"]


QUICK = [p for p in PROBES if p.quick]


@pytest.fixture(scope="module")
def quick_results():
    return {r["name"]: r for r in _runner().run_probes(QUICK, workers=2)}


@pytest.mark.parametrize("name", [p.name for p in QUICK])
def test_quick_probe_gives_its_declared_outcome(quick_results, name):
    result = quick_results[name]
    assert result["passed"], f"{result['outcome']}: {result['detail']}"
