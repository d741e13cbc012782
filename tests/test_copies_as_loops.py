"""Hessians of functions that copy an argument held constant (:func:`pyjlad.ir.edit.float_copies_as_loops`).

``u = u0.copy()`` with ``u0`` not differentiated: Enzyme v0.0.289's forward derivative fills the copy's tangent
with a ``memset`` of its own, which the reverse sweep of a Hessian-vector product cannot type ("Cannot deduce
type of memset"). The product was built with loose types and was wrong (Newton steps with ``A @ (...)``:
Hessian ``[[0.564, 8.52], [8.52, 99.3]]`` against ``jax``'s ``[[0.694, 10.2], [10.2, 108.25]]``), so the
loose-types check refused it: no Hessian at all. With the float copies made loops before Enzyme, the
product is built without loose types and right. Oracle: ``jax.hessian`` in float64 of a twin written
independently; inputs copied before each call and checked unchanged after it.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.engines import compiled_sweep
from pyjlad.export import numba_argtypes
from pyjlad.ir import parse
from pyjlad.ir.edit import float_copies_as_loops
from pyjlad.sweep import Sweep

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


def _newton_steps(p, u0, nsteps):
    n = u0.shape[0]
    A = np.eye(n) / (2.0 + p[0])
    u = u0.copy()
    for _ in range(nsteps):
        v = u.copy()
        for _ in range(4):
            v = v - A @ (v * p[1] - u)
        u = v
    return np.sum(u ** 2)


def _newton_steps_jax(p, u0, nsteps):
    A = jnp.eye(u0.shape[0]) / (2.0 + p[0])
    u = u0
    for _ in range(nsteps):
        v = u
        for _ in range(4):
            v = v - A @ (v * p[1] - u)
        u = v
    return jnp.sum(u ** 2)


def _relaxation(p, u0, nsteps):
    u = u0.copy()
    for _ in range(nsteps):
        for i in range(u.shape[0]):
            u[i] = u[i] + p[0] * np.sin(u[i]) - p[1] * u[i] ** 3
    return np.sum(u)


def _relaxation_jax(p, u0, nsteps):
    u = u0
    for _ in range(nsteps):
        u = u + p[0] * jnp.sin(u) - p[1] * u ** 3
    return jnp.sum(u)


def _rows(p, u0, nsteps):
    g = np.copy(u0)
    for _ in range(nsteps):
        g[1:, :] = g[1:, :] * p[0] + g[:-1, :] * p[1] * p[1]
    return np.sum(g * g)


def _rows_jax(p, u0, nsteps):
    g = u0
    for _ in range(nsteps):
        g = g.at[1:, :].set(g[1:, :] * p[0] + g[:-1, :] * p[1] * p[1])
    return jnp.sum(g * g)


def _tail(p, u0, nsteps):
    u = u0[2:].copy()
    s = 0.0
    for k in range(nsteps):
        u = u * p[0] + p[1] * p[0] * k
        s += np.sum(u * u)
    return s


def _tail_jax(p, u0, nsteps):
    u = u0[2:]
    s = 0.0
    for k in range(nsteps):
        u = u * p[0] + p[1] * p[0] * k
        s += jnp.sum(u * u)
    return s


CASES = {
    "Newton steps with A @ (...)": (_newton_steps, _newton_steps_jax, np.array([0.1, 0.5, 0.9, 0.3])),
    "pointwise relaxation of a copy": (_relaxation, _relaxation_jax, np.array([0.2, -0.4, 0.7])),
    "np.copy of a 2-D grid, rows updated": (_rows, _rows_jax, np.arange(12.0).reshape(4, 3) / 10.0),
    "copy of a slice": (_tail, _tail_jax, np.array([3.0, 1.0, 0.5, -0.25, 0.75])),
}


def _hvp_built(f, args):
    return compiled_sweep(f, Sweep("hvp", "reverse", (), 0), None)._build_once(numba_argtypes(args))


@pytest.mark.parametrize("case", CASES)
def test_the_hessian_of_a_function_copying_a_constant_argument_is_right(case: str, monkeypatch) -> None:
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    function, twin, u0 = CASES[case]
    f = njit(function)
    p = np.array([1.3, 0.7]) if case.startswith("Newton") else np.array([0.45, 0.35])
    p_before, u0_before = p.copy(), u0.copy()
    expected = np.asarray(jax.hessian(twin)(jnp.asarray(p_before), jnp.asarray(u0_before), 3))
    hessian = pyjlad.hessian(f, p, u0, 3)
    np.testing.assert_allclose(hessian, expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(p, p_before)
    np.testing.assert_array_equal(u0, u0_before)
    assert not _hvp_built(f, (p, u0, 3)).loose_types


def test_the_newton_product_failed_to_type_before_the_copies_were_loops(monkeypatch) -> None:
    """Without the rewrite the product needs loose types (the class this file covers is real), and the rewrite
    is what takes them away."""
    import pyjlad.engines.differentiate as differentiate

    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setattr(differentiate, "_copies_looped", lambda m: m.decode() if isinstance(m, bytes) else m)
    f = njit(_newton_steps)
    assert _hvp_built(f, (np.array([1.3, 0.7]), np.zeros(4), 3)).loose_types


def test_a_float_copy_becomes_a_loop_and_other_copies_stay() -> None:
    m = parse("define void @f(ptr %a, ptr %b, ptr %c, ptr %d, i64 %n) {\n"
              "  %e = getelementptr double, ptr %a, i64 1\n"
              "  %i = getelementptr i64, ptr %c, i64 1\n"
              "  call void @llvm.memcpy.p0.p0.i64(ptr align 8 %b, ptr align 8 %a, i64 %n, i1 false)\n"
              "  call void @llvm.memcpy.p0.p0.i64(ptr align 8 %d, ptr align 8 %c, i64 %n, i1 false)\n"
              "  call void @llvm.memcpy.p0.p0.i64(ptr align 8 %a, ptr align 8 %b, i64 %n, i1 true)\n"
              "  ret void\n}\n"
              "declare void @llvm.memcpy.p0.p0.i64(ptr noalias nocapture writeonly, ptr noalias nocapture readonly, "
              "i64, i1 immarg)\n")
    lines = float_copies_as_loops(m).render().splitlines()
    assert "  call void @pyjlad.copy.double(ptr %b, ptr %a, i64 %n)" in lines
    assert "  call void @llvm.memcpy.p0.p0.i64(ptr align 8 %d, ptr align 8 %c, i64 %n, i1 false)" in lines
    assert "  call void @llvm.memcpy.p0.p0.i64(ptr align 8 %a, ptr align 8 %b, i64 %n, i1 true)" in lines
