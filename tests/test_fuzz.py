"""Random programs: pyjlad's gradient agrees with central finite differences.

The full run (1,000 programs) is ``tools/fuzz.py``. The suite runs the first 20 programs,
which between them contain every construct of the generator's extension and container blocks
(about 4 s each: the blocks make programs about twice as long to differentiate as the base alone),
and the later programs in ``FOUND_DEFECTS``.
"""

from __future__ import annotations

import pytest
from program_generator import CONSTRUCTS, check, generate

SEEDS = range(20)
#: Later programs that disagreed before a fix, run by the suite too: a search leaving two nested loops at once
#: (``nested-search``; until 2026-12-06).
FOUND_DEFECTS = (29, 93)


def test_seeds_cover_every_construct() -> None:
    seen = {kind for seed in SEEDS for kind in generate(seed).constructs}
    assert seen == set(CONSTRUCTS), f"constructs never drawn: {sorted(set(CONSTRUCTS) - seen)}"


@pytest.mark.parametrize("seed", [*SEEDS, *FOUND_DEFECTS])
def test_random_program(seed: int) -> None:
    outcome, detail = check(seed)
    assert outcome == "agree", f"program {seed}: {outcome} {detail}"
