"""Fills of float arrays typed for Enzyme (``pyjlad.ir.edit.type_float_fills``, ``pyjlad/engines/differentiate.py``).

An accumulator zeroed each time step (``acc[:, :] = 0.0``) is a ``memset`` per row once LLVM's loop idiom has
seen Numba's loop nest, at a byte offset Enzyme v0.0.289 cannot type. Untyped, Enzyme filled the shadow in the
forward sweep instead of zeroing the adjoint of what the fill overwrites in the reverse sweep: the adjoint of one
step's accumulator flowed into the step before, and the gradient was silently wrong from the second step on (by
0.10 in 0.73 after two steps; found by a user-style probe, 2026-12-04). A fill of part of a 1-D or 2-D array
(``acc[1:] = 0.0``, ``acc[1:, :] = 0.0``) went to loose types instead, which the loose-types check refused.

Oracles: ``jax.grad`` (and ``jax.hessian``) of the same steps written with ``.at[...].set``, float64, from
copies taken before the calls.
"""

from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.ir.edit import type_float_fills
from pyjlad.ir.module import parse

jax.config.update("jax_enable_x64", True)

#: (the part of ``acc`` zeroed each step, the shape of the state): each a fill LLVM writes as one or more memsets
FILLS = [
    ("acc[:, :]", (4, 3)),  # a memset per row (the case found)
    ("acc[1:, :]", (4, 3)),
    ("acc[:, 1:]", (4, 3)),
    ("acc[::2, :]", (5, 3)),
    ("acc[:]", (4, 3)),  # one memset of the whole array (typed before too)
    ("acc[1:]", (6,)),
    ("acc[2:5]", (7,)),
    ("acc[:, :, :]", (3, 2, 4)),
    ("acc[1:, :, 1:]", (3, 2, 4)),
]


def _functions(zero: str, ndim: int):
    """The Numba function and its JAX twin: ``steps`` steps of ``acc[<zero>] = 0; acc[i, 0..] += w p[i, 0..]^2;
    p += 0.1 acc``, then ``sum(p^2)``."""
    first = ", 0" * (ndim - 1)
    source = textwrap.dedent(f"""
        def f(x, w, steps):
            p = x.copy()
            acc = np.zeros_like(p)
            for s in range(steps):
                {zero} = 0.0
                for i in range(p.shape[0]):
                    acc[i{first}] += w * p[i{first}] ** 2
                p += 0.1 * acc
            return np.sum(p ** 2)

        def f_jax(x, w, steps):
            p = x
            acc = jnp.zeros_like(x)
            for s in range(steps):
                acc = acc.at[{zero[4:-1]}].set(0.0)
                acc = acc.at[:{first}].add(w * p[:{first}] ** 2)
                p = p + 0.1 * acc
            return jnp.sum(p ** 2)
        """)
    namespace = {"np": np, "jnp": jnp}
    exec(source, namespace)  # noqa: S102 - the test's own two functions, one per fill
    return njit(namespace["f"]), namespace["f_jax"]


@pytest.mark.parametrize(("zero", "shape"), FILLS)
def test_an_accumulator_zeroed_each_step_gets_the_gradient(zero: str, shape: tuple[int, ...]) -> None:
    f, f_jax = _functions(zero, len(shape))
    rng = np.random.default_rng(len(zero) + len(shape))
    for steps in (1, 2, 4):
        x, w = rng.uniform(0.1, 0.5, shape), 0.7
        x0 = x.copy()
        want_x, want_w = jax.grad(f_jax, argnums=(0, 1))(jnp.asarray(x0), w, steps)
        got_x, got_w = pyjlad.gradient(f, x, w, steps, wrt=(0, 1))
        np.testing.assert_allclose(got_x, np.asarray(want_x), rtol=1e-12, atol=1e-15)
        assert got_w == pytest.approx(float(want_w), rel=1e-12)
        np.testing.assert_array_equal(x, x0)


def test_the_hessian_of_an_accumulator_zeroed_each_step() -> None:
    # Reverse over forward (each column a Hessian-vector product) and Enzyme's vector mode: the fill's adjoint in
    # the reverse sweep of each.
    f, f_jax = _functions("acc[:, :]", 2)
    x = np.random.default_rng(5).uniform(0.1, 0.5, (3, 2))
    x0 = x.copy()
    want = np.asarray(jax.hessian(f_jax)(jnp.asarray(x0), 0.7, 3))
    np.testing.assert_allclose(pyjlad.hessian(f, x, 0.7, 3), want, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(pyjlad.hessian(f, x, 0.7, 3, chunk=1), want, rtol=1e-11, atol=1e-14)
    v = np.random.default_rng(6).normal(size=x.shape)
    np.testing.assert_allclose(pyjlad.hvp(f, (x, 0.7, 3), v.copy()), (want.reshape(6, 6) @ v.ravel()).reshape(3, 2),
                               rtol=1e-11, atol=1e-14)
    np.testing.assert_array_equal(x, x0)


EPS2 = 0.01


@njit
def _accelerations(pos, mass, acc):
    """Zeroes its output argument (a ``memset`` per row, at a pointer a strength-reduced loop ``phi`` steps),
    then adds each pair's attraction into it."""
    acc[:, :] = 0.0
    for i in range(pos.shape[0]):
        for j in range(i + 1, pos.shape[0]):
            dx, dy = pos[j, 0] - pos[i, 0], pos[j, 1] - pos[i, 1]
            inv3 = (dx * dx + dy * dy + EPS2) ** -1.5
            acc[i, 0] += mass[j] * dx * inv3
            acc[i, 1] += mass[j] * dy * inv3
            acc[j, 0] -= mass[i] * dx * inv3
            acc[j, 1] -= mass[i] * dy * inv3


@njit
def _leapfrog(pos0, vel0, mass, dt, steps):
    pos, vel = pos0.copy(), vel0.copy()
    acc = np.zeros_like(pos)
    _accelerations(pos, mass, acc)
    for _ in range(steps):
        vel += 0.5 * dt * acc
        pos += dt * vel
        _accelerations(pos, mass, acc)
        vel += 0.5 * dt * acc
    return np.sum(vel * vel) + np.sum(pos[:, 0] ** 2)


def _leapfrog_jax(pos, vel, mass, dt, steps):
    def accelerations(pos):
        d = pos[None, :, :] - pos[:, None, :]  # d[i, j] = pos[j] - pos[i]
        inv3 = (1.0 - jnp.eye(pos.shape[0])) * (jnp.sum(d * d, -1) + EPS2) ** -1.5
        return jnp.sum(mass[None, :, None] * d * inv3[:, :, None], 1)

    acc = accelerations(pos)
    for _ in range(steps):
        vel = vel + 0.5 * dt * acc
        pos = pos + dt * vel
        acc = accelerations(pos)
        vel = vel + 0.5 * dt * acc
    return jnp.sum(vel * vel) + jnp.sum(pos[:, 0] ** 2)


def test_a_helper_zeroing_its_output_argument_each_step() -> None:
    # An n-body leapfrog whose acceleration helper zeroes its output (a user-style probe's program, 2026-12-04):
    # the gradient was refused by the loose-types check, the Hessian and Hessian-vector products silently wrong.
    rng = np.random.default_rng(1)
    pos, vel, mass = rng.standard_normal((4, 2)), 0.3 * rng.standard_normal((4, 2)), rng.uniform(0.5, 1.5, 4)
    before = (pos.copy(), vel.copy(), mass.copy())
    args = (jnp.asarray(pos), jnp.asarray(vel), jnp.asarray(mass), 0.01, 5)
    want = jax.grad(_leapfrog_jax, argnums=(0, 1, 2))(*args)
    got = pyjlad.gradient(_leapfrog, pos, vel, mass, 0.01, 5, wrt=(0, 1, 2))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-10, atol=1e-13)
    hess = np.asarray(jax.hessian(_leapfrog_jax, argnums=1)(*args))
    np.testing.assert_allclose(pyjlad.hessian(_leapfrog, pos, vel, mass, 0.01, 5, wrt=1), hess, rtol=1e-9, atol=1e-12)
    v = rng.standard_normal(pos.shape)
    np.testing.assert_allclose(pyjlad.hvp(_leapfrog, (pos, vel, mass, 0.01, 5), v.copy(), wrt=1),
                               np.tensordot(hess, v, 2), rtol=1e-9, atol=1e-12)
    for a, b in zip((pos, vel, mass), before):
        np.testing.assert_array_equal(a, b)


def test_only_fills_of_float_arrays_are_typed() -> None:
    body = textwrap.dedent("""\
        define void @f(ptr %d, ptr %i, ptr %s, i64 %k, i64 %n) {
          %x = getelementptr double, ptr %d, i64 %k
          %y = getelementptr i64, ptr %i, i64 %k
          %rowd = getelementptr inbounds i8, ptr %d, i64 %k
          %rowd2 = getelementptr i8, ptr %rowd, i64 8
          %rowi = getelementptr i8, ptr %i, i64 %k
          br label %loop
        loop:
          %row = phi ptr [ %rowd, %0 ], [ %next, %loop ]
          tail call void @llvm.memset.p0.i64(ptr align 8 %row, i8 0, i64 %n, i1 false)
          %next = getelementptr i8, ptr %row, i64 %n
          br i1 true, label %loop, label %done
        done:
          tail call void @llvm.memset.p0.i64(ptr align 8 %rowd2, i8 0, i64 %n, i1 false)
          tail call void @llvm.memset.p0.i64(ptr align 8 %rowi, i8 0, i64 %n, i1 false)
          tail call void @llvm.memset.p0.i64(ptr align 8 %s, i8 0, i64 16, i1 false)
          ret void
        }
        """)
    typed = type_float_fills(parse(body)).render()
    assert typed.count("call void @pyjlad.zero.double(ptr %rowd2, i64 %n)") == 1
    assert typed.count("call void @pyjlad.zero.double(ptr %row, i64 %n)") == 1  # a row pointer stepped by a phi
    assert "memset.p0.i64(ptr align 8 %rowi" in typed and "memset.p0.i64(ptr align 8 %s," in typed
    assert typed.count("@llvm.memset") == 2  # the two other fills, as they were
    assert "__enzyme_" not in typed and "pyjlad.zero.float" not in typed
    assert "define internal void @pyjlad.zero.double(ptr %p, i64 %bytes)" in typed


def test_a_float32_accumulator_zeroed_each_step() -> None:
    f, f_jax = _functions("acc[:, :]", 2)
    x = np.random.default_rng(9).uniform(0.1, 0.5, (4, 3)).astype(np.float32)
    x0 = x.copy()
    want = np.asarray(jax.grad(f_jax)(jnp.asarray(x0, dtype=jnp.float64), 0.7, 3))
    got = pyjlad.gradient(f, x, np.float32(0.7), 3)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5)
    np.testing.assert_array_equal(x, x0)


@njit
def _rows_accel(x, m, a):
    a[:, :] = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            d = x[j] - x[i]
            r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01
            inv = 1.0 / (r2 * np.sqrt(r2))
            a[i] += m[j] * inv * d  # whole rows of the output argument
            a[j] -= m[i] * inv * d


@njit
def _elements_accel(x, m, a):
    a[:, :] = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            d = x[j] - x[i]
            r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + 0.01
            inv = 1.0 / (r2 * np.sqrt(r2))
            for k in range(3):  # the rewrite the refusal suggests
                a[i, k] += m[j] * inv * d[k]
                a[j, k] -= m[i] * inv * d[k]


def _nbody_leapfrog(accel):
    @njit
    def leapfrog(x0, v0, m):
        x, v = x0.copy(), v0.copy()
        a = np.empty_like(x)
        accel(x, m, a)
        for _ in range(3):
            v += 0.005 * a
            x += 0.01 * v
            accel(x, m, a)
            v += 0.005 * a
        return 0.5 * np.sum(m * np.sum(v * v, axis=1)) + np.sum(x[:, 0] * m)

    return leapfrog


def _jax_leapfrog(x, v, m):
    def accel(x):
        d = x[None, :, :] - x[:, None, :]
        r2 = jnp.sum(d * d, -1) + 0.01
        inv = (1.0 / (r2 * jnp.sqrt(r2))) * (1 - jnp.eye(x.shape[0]))
        return jnp.sum((m[None, :] * inv)[:, :, None] * d, axis=1)

    a = accel(x)
    for _ in range(3):
        v = v + 0.005 * a
        x = x + 0.01 * v
        a = accel(x)
        v = v + 0.005 * a
    return 0.5 * jnp.sum(m * jnp.sum(v * v, 1)) + jnp.sum(x[:, 0] * m)


@pytest.mark.parametrize("helper", ["element_loop", "whole_rows"])
def test_a_refused_n_body_hessian_names_the_rewrite_that_works(helper: str) -> None:
    """An n-body leapfrog whose force helper updates whole rows of its output argument: the Hessian in the masses
    needs loose types and fails its check (found by a user-style probe, 2026-12-06); the refusal names the rewrite
    (``whole_rows``: agreeing with JAX or refused in those words, the variant the default run keeps:
    tests/sampled_tests.py), and the rewritten helper's Hessian agrees with JAX (``element_loop``, run by ``--full``)."""
    rng = np.random.default_rng(3)
    x0, v0, m = rng.standard_normal((3, 3)), 0.3 * rng.standard_normal((3, 3)), rng.uniform(0.5, 1.5, 3)
    before = (x0.copy(), v0.copy(), m.copy())
    expected = np.asarray(jax.hessian(_jax_leapfrog, argnums=2)(*(b.copy() for b in before)))
    leapfrog = _nbody_leapfrog(_elements_accel if helper == "element_loop" else _rows_accel)
    try:
        np.testing.assert_allclose(pyjlad.hessian(leapfrog, x0, v0, m, wrt=2), expected, rtol=1e-9)
    except pyjlad.EnzymeError as exc:
        assert helper == "whole_rows" and "loop over its elements" in str(exc)
    for array, copy in zip((x0, v0, m), before):
        np.testing.assert_array_equal(array, copy)
