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


def test_hmc_logistic_matches_quadrature_and_the_analytic_gradient_chain(capsys):
    module = runpy.run_path(str(EXAMPLES / "hmc_logistic.py"))
    measured = module["main"]()
    # The gradient oracle: pyjlad's gradient inside the @njit sampler against the hand-derived one at every draw.
    # Both sum 200 terms of size ~1, so they differ by rounding, ~200 ulp at most (4e-14).
    assert measured["gradient_error"] < 1e-12
    # Same sampler, same seed, hand-derived gradient: every accept decision must be the same (one differing
    # decision moves a draw by ~0.1 and changes the acceptance count), and the draws agree to rounding
    # (measured ~1e-15; 12 leapfrog steps on a log-concave posterior do not amplify it to 1e-10).
    assert measured["acceptance_difference"] == 0.0
    assert measured["chain_difference"] < 1e-10
    # The reference is deterministic quadrature: its own error (change from a coarser grid, ~1e-8) is far below
    # the Monte Carlo error of the chain (~5e-3), so it does not blur the comparisons below.
    assert measured["quadrature_change"] < 1e-6
    # Posterior mean and variance within Monte Carlo error: |HMC - quadrature| / (batch-means s.e., 50 batches).
    # For a correct sampler this is ~|t_49|, above 4 with probability ~2e-4 per coordinate (the seed is fixed,
    # so the test is deterministic; a biased gradient or a wrong accept step gives z of tens).
    assert measured["mean_z"] < 4.0
    assert measured["var_z"] < 4.0
    # Guard against an s.e. inflated by a stuck chain: the mean is also within 0.1 posterior sd (measured ~0.02).
    assert measured["mean_error_in_sd"] < 0.1
    assert 0.6 < measured["acceptance"] < 1.0
    assert measured["inputs_unchanged"] == 1.0
    assert "quadrature" in capsys.readouterr().out
