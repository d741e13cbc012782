"""Fills of a variable length guarded against a length of zero (:mod:`pyjlad.empty_fills`).

Enzyme v0.0.289 aborted (``Assertion `size != 0'``) building the Hessian of Newton iterations with
``np.linalg.solve``, ``A @ v`` and ``np.diag(v**2)``: in the forward derivative of ``A @ v`` its own
simplification left a ``memset`` of zero bytes (NumPy's product zeroes its output when a dimension is 0),
which the reverse sweep over that derivative cannot take. An implicit-Euler loss, a user-style probe
(2026-12-04), so had no Hessian at all. Oracle: ``jax`` in float64 on the same program; inputs copied
before each call.
"""

from __future__ import annotations

import logging
import subprocess

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.empty_fills import guard_empty_fills, guarded_body
from pyjlad.ir.module import parse

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

_MODULE = """define void @f(ptr %p, i64 %n, i32 %m, i1 %c) {
entry:
  br i1 %c, label %one, label %two
one:
  %bytes = shl i64 %n, 3
  call void @llvm.memset.p0.i64(ptr align 8 %p, i8 0, i64 %bytes, i1 false)
  br label %join
two:
  call void @llvm.memset.p0.i32(ptr %p, i8 0, i32 %m, i1 false)
  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 24, i1 false)
  br label %join
join:
  %q = phi ptr [ %p, %one ], [ null, %two ]
  ret void
}

declare void @llvm.memset.p0.i64(ptr nocapture writeonly, i8, i64, i1 immarg)
declare void @llvm.memset.p0.i32(ptr nocapture writeonly, i8, i32, i1 immarg)
"""


def _assembles(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=text.encode(), capture_output=True)


def test_every_variable_length_fill_is_guarded_and_the_module_stays_valid():
    text = guard_empty_fills(parse(_MODULE)).render()
    assert "icmp eq i64 %bytes, 0" in text
    assert "icmp eq i32 %m, 0" in text
    assert "i64 24, i1 false)\n  br label %join" in text  # a constant length is left alone
    # The phi's edge now comes from the block the split block's terminator is in.
    assert "%q = phi ptr [ %p, %pyjlad.fill.0.done ], [ null, %pyjlad.fill.1.done ]" in text
    proc = _assembles(text)
    assert proc.returncode == 0, proc.stderr.decode()


def test_fills_in_an_unnamed_entry_block_or_a_quoted_one_stay_as_they_are():
    body = ["  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)", "  br label %\"a b\"",
            "\"a b\":", "  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)", "  ret void"]
    assert guarded_body(body) == (body, 0)


@njit
def _newton_loss(x, A):
    v = x.copy()
    for _ in range(2):
        v = v - np.linalg.solve(A + np.diag(v**2), A @ v - x)
    return np.sum(v * v)


def _newton_loss_jax(x, A):
    v = x
    for _ in range(2):
        v = v - jnp.linalg.solve(A + jnp.diag(v**2), A @ v - x)
    return jnp.sum(v * v)


def _problem():
    rng = np.random.default_rng(20261204)
    m = rng.normal(size=(3, 3))
    return rng.normal(size=3), m @ m.T / 3 + np.eye(3)


def test_hessian_of_newton_steps_with_solve_and_matmul_matches_jax(caplog, monkeypatch):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")  # so that Enzyme runs, and its attempts are logged
    x, A = _problem()
    x0, A0 = x.copy(), A.copy()
    expected = np.asarray(jax.hessian(_newton_loss_jax)(jnp.asarray(x0), jnp.asarray(A0)))
    with caplog.at_level(logging.DEBUG, logger="pyjlad"):
        H = pyjlad.hessian(_newton_loss, x, A)
    np.testing.assert_allclose(H, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(A, A0)
    # Built on the first attempt: the product's zeroed output is allocated zeroed (pyjlad.zeroed_allocations),
    # so Enzyme has no fill to type and needs no loose types.
    assert [r for r in caplog.records if "Enzyme on _newton_loss" in r.getMessage()]
    assert not [r for r in caplog.records if "loose types" in r.getMessage()]


def test_hvp_of_newton_steps_matches_jax():
    x, A = _problem()
    v = np.linspace(-1.0, 1.0, 3)
    x0, A0, v0 = x.copy(), A.copy(), v.copy()
    grad_x = jax.grad(lambda y: _newton_loss_jax(y, jnp.asarray(A0)))
    expected = np.asarray(jax.jvp(grad_x, (jnp.asarray(x0),), (jnp.asarray(v0),))[1])
    np.testing.assert_allclose(pyjlad.hvp(_newton_loss, (x, A), v), expected, rtol=1e-9, atol=1e-12)
    for array, copy in ((x, x0), (A, A0), (v, v0)):
        np.testing.assert_array_equal(array, copy)
