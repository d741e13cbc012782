"""The ``pyjlad`` logger: build steps with their timings and Enzyme's retries at DEBUG, silent by default."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from numba import njit

import pyjlad


@pytest.fixture
def no_disk_cache(monkeypatch):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")


def test_a_build_logs_its_steps_with_timings(caplog, no_disk_cache) -> None:
    @njit
    def logged_loss(x):
        return np.sum(np.sin(x) * x)

    with caplog.at_level(logging.DEBUG, logger="pyjlad"):
        g = pyjlad.gradient(logged_loss, np.array([0.5, 1.0]))
    np.testing.assert_allclose(g, np.cos([0.5, 1.0]) * [0.5, 1.0] + np.sin([0.5, 1.0]), rtol=1e-14)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("pyjlad")]
    assert any(m.startswith("exported logged_loss for") and m.endswith(" s") for m in messages), messages
    assert any(m.startswith("Enzyme on ") and "logged_loss" in m for m in messages), messages
    assert any(m.startswith("compiled the reverse-mode derivative of") and "logged_loss to machine code in" in m
               for m in messages), messages


def test_enzyme_retries_are_logged(caplog, no_disk_cache) -> None:
    @njit
    def one_norm(a):
        return np.linalg.norm(a, 1)  # Numba's norm has an SVD branch Enzyme has no derivative for

    a = np.array([[1.0, -2.0], [3.0, 0.5]])
    with caplog.at_level(logging.DEBUG, logger="pyjlad"):
        g = pyjlad.gradient(one_norm, a)
    np.testing.assert_allclose(g, [[1.0, 0.0], [1.0, 0.0]])  # the largest column sum of |a| is column 0's
    assert any("retrying with options" in r.getMessage() for r in caplog.records), caplog.text


def test_nothing_is_logged_without_configuration() -> None:
    assert logging.getLogger("pyjlad").getEffectiveLevel() >= logging.WARNING or not logging.getLogger().handlers
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("pyjlad").handlers)
