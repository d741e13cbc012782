"""The scripts under ``examples/`` run and reach their documented accuracy (issue 16, part 4)."""

from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_backward_euler_matches_radau_and_the_analytic_jacobian(capsys):
    module = runpy.run_path(str(EXAMPLES / "backward_euler.py"))
    measured = module["main"]()
    # Backward Euler is first order, steps up to 1e-3: its error at t = 40 is ~1e-5 relative.
    assert measured["relative_error"] < 1e-4
    # pyjlad's Jacobian inside the @njit Newton loop against the hand-derived one, every iteration.
    assert measured["jacobian_error"] <= 1e-9
    assert measured["mass_error"] < 1e-12
    assert "Radau" in capsys.readouterr().out
