"""A few dozen random programs: pyjlad's gradient agrees with central finite differences.

The full run (1,000 programs) is ``tools/fuzz.py``.
"""

from __future__ import annotations

import pytest
from program_generator import check

SEEDS = range(40)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_program(seed: int) -> None:
    outcome, detail = check(seed)
    assert outcome == "agree", f"program {seed}: {outcome} {detail}"
