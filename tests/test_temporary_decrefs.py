"""A temporary read after its last write and then freed: derivatives against JAX, and what Enzyme keeps.

``out = np.zeros(n)``, a loop that fills it, then a loop that reads it (``s += out[i] * out[i]``): Enzyme
kept a copy of ``out`` in its tape, because the ``NRT_decref`` after the reads looked to LLVM like a write to
every array. :mod:`pyjlad.temporary_decrefs` writes a temporary's decrement out as what it does (a
reference count decremented, a ``free``). These tests check the programs of that shape (serial and
``prange``, the temporary freed at the end, inside a branch, per iteration, or kept alive by the result)
against ``jax`` in float64 for ``grad``, ``jvp`` and Hessian-vector products, the caller's arrays unchanged;
that the gradient no longer keeps the copy; and the pass itself on small modules.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit
from test_parallel_derivatives import stencil as fill_then_sum_prange  # out = np.zeros(n); fill (prange); sum

import pyjlad
from pyjlad.engines import pool
from pyjlad.ir import parse
from pyjlad.memory_scopes import scope_temporaries
from pyjlad.temporary_decrefs import inline_temporary_decrefs

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261202)


fill_then_sum = njit(fill_then_sum_prange.py_func)  # its loops serial


def fill_then_sum_jax(u, k):
    inner = u[1:-1] + k * (u[:-2] - 2.0 * u[1:-1] + u[2:])
    return jnp.sum(inner ** 2)


@njit
def temporary_in_a_branch(x, scale):
    s = 0.0
    if scale > 0.0:
        z = np.exp(scale * x)  # allocated, read and freed on one path only
        for i in range(z.shape[0]):
            s += z[i] * x[i]
    return s


def temporary_in_a_branch_jax(x, scale):
    return jnp.sum(jnp.exp(scale * x) * x)


@njit
def temporary_per_step(u, steps):
    v = u.copy()
    total = 0.0
    for _ in range(steps):
        w = np.empty_like(v)
        for j in range(v.shape[0]):
            w[j] = math.sin(v[j]) + 0.5 * v[(j + 1) % v.shape[0]]
        for j in range(w.shape[0]):
            total += w[j] * w[j]  # read after its last write; freed when v is replaced
        v = w
    return total


def temporary_per_step_jax(u, steps):
    v, total = u, 0.0
    for _ in range(steps):
        v = jnp.sin(v) + 0.5 * jnp.roll(v, -1)
        total = total + jnp.sum(v * v)
    return total


@njit
def temporary_kept_by_result(x):
    z = np.cos(x)
    s = 0.0
    for i in range(z.shape[0]):
        s += z[i] * z[i]
    out = z * s  # z itself freed after this read; out returned
    return out


def temporary_kept_by_result_jax(x):
    z = jnp.cos(x)
    return z * jnp.sum(z * z)


@njit
def kalman_filter(ys, q, r, dt):
    """A constant-velocity Kalman filter's negative log-likelihood: 2x2 products, a gain, an inverse per step.

    Two dozen temporaries per step, each freed in the step, in a loop that leaves through every product's and
    the inverse's checks: Enzyme ran out of memory on it (17 GiB, the default limit on a 23 GiB machine, after
    two minutes) while each decrement was written with branches (see :mod:`pyjlad.temporary_decrefs`)."""
    F = np.array([[1.0, dt], [0.0, 1.0]])
    Q = q * np.array([[dt ** 3 / 3, dt ** 2 / 2], [dt ** 2 / 2, dt]])
    x = np.zeros(2)
    P = np.eye(2)
    nll = 0.0
    for t in range(ys.shape[0]):
        x = F @ x
        P = F @ P @ F.T + Q
        S = P[0, 0] + r
        K = P[:, 0] / S
        v = ys[t] - x[0]
        nll += 0.5 * (np.log(S) + v * v / S)
        x = x + K * v
        IKH = np.eye(2)
        IKH[0, 0] -= K[0]
        IKH[1, 0] -= K[1]
        P = IKH @ P
        Pi = np.linalg.inv(P + 0.1 * np.eye(2))
        nll += 1e-3 * (Pi[0, 0] + Pi[1, 1])
    return nll


def kalman_filter_jax(ys, q, r, dt):
    F = jnp.array([[1.0, dt], [0.0, 1.0]])
    Q = q * jnp.array([[dt ** 3 / 3, dt ** 2 / 2], [dt ** 2 / 2, dt]])
    x, P, nll = jnp.zeros(2), jnp.eye(2), 0.0
    for t in range(ys.shape[0]):
        x = F @ x
        P = F @ P @ F.T + Q
        S = P[0, 0] + r
        K = P[:, 0] / S
        v = ys[t] - x[0]
        nll = nll + 0.5 * (jnp.log(S) + v * v / S)
        x = x + K * v
        P = jnp.eye(2).at[:, 0].add(-K) @ P
        Pi = jnp.linalg.inv(P + 0.1 * jnp.eye(2))
        nll = nll + 1e-3 * (Pi[0, 0] + Pi[1, 1])
    return nll


def test_a_kalman_filter_step_with_many_temporaries() -> None:
    """Gradient in every argument and a jvp against ``jax``; the observations unchanged."""
    ys = np.cumsum(RNG.standard_normal(10)) * 0.3
    args = (ys, 0.2, 0.5, 0.1)
    copies = (ys.copy(), *args[1:])
    expected = jax.grad(kalman_filter_jax, argnums=(0, 1, 2, 3))(jnp.asarray(copies[0]), *copies[1:])
    got = pyjlad.grad(kalman_filter, wrt=(0, 1, 2, 3))(*args)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-10, atol=1e-13)
    t = RNG.normal(size=ys.shape)
    _, tangent = jax.jvp(lambda a, q: kalman_filter_jax(a, q, 0.5, 0.1), (jnp.asarray(copies[0]), 0.2),
                         (jnp.asarray(t), 0.3))
    _, got_tangent = pyjlad.jvp(kalman_filter, args, (t, 0.3, None, None))
    np.testing.assert_allclose(got_tangent, float(tangent), rtol=1e-10)
    np.testing.assert_array_equal(ys, copies[0])


CASES = {
    "fill then sum": (fill_then_sum, fill_then_sum_jax, lambda: (RNG.normal(size=50), 0.2)),
    "fill (prange) then sum": (fill_then_sum_prange, fill_then_sum_jax, lambda: (RNG.normal(size=50), 0.2)),
    "temporary in a branch": (temporary_in_a_branch, temporary_in_a_branch_jax, lambda: (RNG.normal(size=9), 0.7)),
    "temporary per step": (temporary_per_step, temporary_per_step_jax, lambda: (RNG.normal(size=11), 4)),
}


def _jax_args(args):
    return [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]


@pytest.mark.parametrize("name", list(CASES))
def test_grad_jvp_and_hvp_match_jax(name) -> None:
    f, f_jax, make = CASES[name]
    args = make()
    copies = [np.copy(a) for a in args]
    expected = np.asarray(jax.grad(f_jax)(*_jax_args(copies)))
    np.testing.assert_allclose(pyjlad.grad(f, wrt=0)(*args), expected, rtol=1e-12, atol=1e-13)

    t = RNG.normal(size=args[0].shape)

    def along(a):
        return f_jax(a, *_jax_args(copies[1:]))

    _, tangent = jax.jvp(along, (jnp.asarray(copies[0]),), (jnp.asarray(t),))
    _, got = pyjlad.jvp(f, args, (t, None))
    np.testing.assert_allclose(got, float(tangent), rtol=1e-12, atol=1e-13)

    _, hvp = jax.jvp(jax.grad(along), (jnp.asarray(copies[0]),), (jnp.asarray(t),))
    np.testing.assert_allclose(pyjlad.hvp(f, args, t, wrt=0), np.asarray(hvp), rtol=1e-11, atol=1e-12)
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)  # the caller's arrays untouched


def test_vjp_of_a_result_the_temporary_feeds_matches_jax() -> None:
    x = RNG.normal(size=8)
    x0, cotangent = x.copy(), RNG.normal(size=8)
    _, pullback = jax.vjp(temporary_kept_by_result_jax, jnp.asarray(x0))
    _, got = pyjlad.vjp(temporary_kept_by_result, (x,), cotangent)
    np.testing.assert_allclose(got[0], np.asarray(pullback(jnp.asarray(cotangent))[0]), rtol=1e-12)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("f", [fill_then_sum, fill_then_sum_prange], ids=["serial", "prange"])
def test_gradient_keeps_no_copy_of_the_temporary(f) -> None:
    """Before: the gradient allocated ``out`` (8 MiB here), its shadow, and a copy of ``out`` in the tape: 24 MiB
    in blocks the pool counts (measured before the change, both kernels). Now the copy is gone."""
    u = RNG.normal(size=(1 << 20) - 64)  # out and its header within an 8 MiB block
    if pool.capacity() < 1 << 26:
        pytest.skip("PYJLAD_POOL_BYTES keeps fewer blocks than this gradient allocates")
    df = pyjlad.grad(f, wrt=0)
    kept = pool.kept_by(lambda: df(u, 0.2))
    assert kept <= 2 * (1 << 23) + (1 << 20), kept  # out and its shadow (8 MiB blocks), small blocks besides


# The pass on small modules.

_RUNTIME = """define ptr @NRT_MemInfo_alloc_aligned(i64 %size, i32 %align) {
  ret ptr null
}
define void @NRT_decref(ptr %mi) {
  ret void
}
"""


def _scoped(text: str) -> list[str]:
    return [line.strip() for line in parse(scope_temporaries(text + _RUNTIME, "f")).function("f").body]


def test_two_decrefs_in_one_block_and_the_phi_after_them() -> None:
    text = """define void @f(ptr %x, i1 %c) {
entry:
  %a = call ptr @NRT_MemInfo_alloc_aligned(i64 8, i32 32)
  %b = call ptr @NRT_MemInfo_alloc_aligned(i64 8, i32 32)
  call void @NRT_decref(ptr %a)
  call void @NRT_decref(ptr %x)
  call void @NRT_decref(ptr %b)
  br i1 %c, label %next, label %entry.tail
entry.tail:
  br label %next
next:
  %p = phi i32 [ 0, %entry ], [ 1, %entry.tail ]
  ret void
}
"""
    body = _scoped(text)
    assert [line for line in body if "@NRT_decref" in line] == [
        next(line for line in body if line.startswith("call void @NRT_decref(ptr %x), !alias.scope !"))]
    assert [line for line in body if line.startswith("call void @free(")] == [
        "call void @free(ptr %pyjlad.decref.0.freed)", "call void @free(ptr %pyjlad.decref.1.freed)"]
    assert "%pyjlad.decref.0.freed = select i1 %pyjlad.decref.0.last, ptr %a, ptr null" in body
    assert "%pyjlad.decref.1.count = select i1 %pyjlad.decref.1.null, ptr %pyjlad.decref.sink, ptr %b" in body
    assert body[:3] == ["entry:", "%pyjlad.decref.sink = alloca i64, align 8",
                        "store i64 0, ptr %pyjlad.decref.sink, align 8"]
    assert [line for line in body if line.endswith(":")] == ["entry:", "entry.tail:", "next:"]  # no new blocks
    assert "%p = phi i32 [ 0, %entry ], [ 1, %entry.tail ]" in body
    decrements = [line for line in body if "atomicrmw sub" in line]
    assert len(decrements) == 2 and all(" monotonic, align 8, !alias.scope !" in line for line in decrements)
    assert "declare void @free(ptr)" in scope_temporaries(text + _RUNTIME, "f")


def test_the_decrement_is_a_reference_count_the_temporary_data_is_not() -> None:
    text = """define void @f(ptr %x) {
entry:
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 8, i32 32)
  %field = getelementptr i8, ptr %mi, i64 24
  %data = load ptr, ptr %field, align 8
  store double 1.0, ptr %data, align 8
  call void @NRT_decref(ptr %mi)
  ret void
}
"""
    body = _scoped(text)
    store = next(line for line in body if line.startswith("store double 1.0"))
    decrement = next(line for line in body if "atomicrmw sub" in line)
    counts = decrement.rsplit("!alias.scope ", 1)[1]
    assert store.endswith(f"!noalias {counts}")  # data accesses: no alias with any reference count
    assert "%data = load ptr, ptr %field, align 8, !alias.scope !3" in body  # the header: as before


def test_a_decref_in_an_unnamed_entry_block_is_written_out_too() -> None:
    body = ["  %mi = call ptr @alloc()", "  call void @NRT_decref(ptr %mi)", "  ret void"]
    out = inline_temporary_decrefs(body, lambda value: True, "!4")
    assert out[:3] == ["  %pyjlad.decref.sink = alloca i64, align 8", "  store i64 0, ptr %pyjlad.decref.sink, align 8",
                       "  %mi = call ptr @alloc()"]
    assert out[-2:] == ["  call void @free(ptr %pyjlad.decref.0.freed)", "  ret void"]
    assert not any("@NRT_decref" in line for line in out)


def test_an_invoke_and_a_comment_naming_the_decref_stay_as_they_are() -> None:
    body = ["entry:", "  %mi = call ptr @alloc()", "  ; call void @NRT_decref(ptr %mi)",
            "  invoke void @NRT_decref(ptr %mi) to label %ok unwind label %bad", "ok:", "  ret void"]
    assert inline_temporary_decrefs(body, lambda value: True, "!4") is body
