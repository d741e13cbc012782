"""A loop whose step can leave it near its top (a ``raise``, Numba's shape checks, a ``break``) and then runs many
array statements: derivatives built within a memory cap, and the rewrite itself.

Enzyme v0.0.289 searches every path from each way out of a loop back to its header
(:mod:`pyjlad.loop_exit_latches`): a relaxation step of twelve array statements under a NaN guard (each statement
an inner loop behind Numba's broadcast check), and an implicit Euler step whose Newton loop raises, ran it out of
2 GiB. The derivatives are checked against ``jax`` in
float64 on the same program (from copies taken before the call; the caller's arrays unchanged), built with the
disk cache off and ``PYJLAD_OPT_MEMORY`` at 2 GiB; the ways out still raise what the function raises. The rewrite
is checked on small modules by running them under ``lli-15`` before and after (the same output on every path)
and by ``opt-15``'s verifier.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.ir import parse
from pyjlad.ir.cfg import ControlFlow
from pyjlad.loop_caches import bounded_caches_fit
from pyjlad.loop_exit_latches import SEARCH_LIMIT, exits_through_latch, search_work

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


#: One relaxation step of twelve array statements (each an inner loop behind Numba's broadcast check), adding the
#: step's contribution to the loss ``s``; written once, made a loop below under a guard at its top.
_STEP = """\
g = w * u
h = np.tanh(g)
r = h - u
q = r * r
u = u + 0.1 * r
v = np.exp(-u * u)
p = v * h
a = np.sin(u) * w
b = a - 0.5 * h
c = np.cos(b) + v
d = c * u - w
e = np.sqrt(1.0 + d * d)
f = np.log(e) * h
y = f * f + u
s += np.sum(q) + np.sum(p) + 0.1 * np.sum(c * c) + np.sum(e) + np.sum(y)"""


def _defined(name: str, parameters: str, guard: list[str], numpy: str = "np"):
    """``name(x, w, steps, *parameters)``: ``u = x``, then ``steps`` times the guard and the step, returning
    ``s + sum(u * u)``; the step written with ``numpy`` (``np`` or ``jnp``)."""
    step = [f"        {line}".replace("np.", f"{numpy}.") for line in _STEP.splitlines()]
    lines = [f"def {name}(x, w, steps{parameters}):", "    u = x.copy()" if numpy == "np" else "    u = x",
             "    s = 0.0", "    for _ in range(steps):", *(f"        {line}" for line in guard), *step,
             f"    return s + {numpy}.sum(u * u)"]
    namespace: dict = {"np": np, "jnp": jnp}
    exec("\n".join(lines), namespace)  # noqa: S102 - one step written once for Numba and for jax
    return namespace[name]


relax = njit(_defined("relax", "", ["if not np.isfinite(s):", "    raise FloatingPointError('the relaxation diverged')"]))
relax_until = njit(_defined("relax_until", ", limit", ["if s > limit:", "    break"]))
relax_jax = _defined("relax_jax", "", [], "jnp")


@pytest.fixture
def two_gib(monkeypatch):
    monkeypatch.setenv("PYJLAD_OPT_MEMORY", str(2 << 30))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")


def _loss_after(x, w, steps: int) -> float:
    """``s`` after ``steps`` steps (NumPy, not the function under test)."""
    u, s = x.copy(), 0.0
    for _ in range(steps):
        u, s = _one_step(u, w, s)
    return s


def _one_step(u, w, s):
    namespace = {"np": np, "u": u, "w": w, "s": s}
    exec(_STEP, namespace)  # noqa: S102 - the step as the functions run it
    return namespace["u"], namespace["s"]


def _inputs(n: int = 6):
    rng = np.random.default_rng(20261205)
    return rng.normal(size=n), rng.normal(size=n)


def test_gradient_and_jvp_of_a_guarded_step_of_twelve_array_statements(two_gib) -> None:
    """Without the rewrite, Enzyme ran out of the 2 GiB (checked by hand, 2026-12-05: ``PYJLAD_OPT_MEMORY`` error
    after 12 s; with it the gradient builds in about 8 s on the 2-core host)."""
    x, w = _inputs()
    x0, w0 = x.copy(), w.copy()
    expected = jax.grad(relax_jax, argnums=(0, 1))(jnp.asarray(x0), jnp.asarray(w0), 4)
    gx, gw = pyjlad.grad(relax, wrt=(0, 1))(x, w, 4)
    np.testing.assert_allclose(gx, np.asarray(expected[0]), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(gw, np.asarray(expected[1]), rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)
    tx = np.random.default_rng(7).normal(size=x.size)
    _, tangent = jax.jvp(lambda a: relax_jax(a, jnp.asarray(w0), 4), (jnp.asarray(x0),), (jnp.asarray(tx),))
    _, got = pyjlad.jvp(relax, (x, w, 4), (tx, None, None))
    np.testing.assert_allclose(got, float(tangent), rtol=1e-11)
    np.testing.assert_array_equal(x, x0)


def test_its_ways_out_raise_what_the_function_raises(two_gib) -> None:
    x, w = _inputs()
    gradient = pyjlad.grad(relax, wrt=(0, 1))
    with pytest.raises(FloatingPointError, match="diverged"):
        relax(x * 1e200, w, 4)
    with pytest.raises(FloatingPointError, match="diverged"):
        gradient(x * 1e200, w, 4)
    short = w[:4].copy()
    with pytest.raises(ValueError) as by_numba:
        relax(x, short, 4)
    with pytest.raises(ValueError) as by_gradient:
        gradient(x, short, 4)
    assert str(by_gradient.value) == str(by_numba.value)


def test_a_break_at_the_top_of_the_step(two_gib) -> None:
    """The loss after a ``break`` reads the state as it was when the loop stopped (values carried out of the loop
    through the new join); ``jax`` runs the same number of steps, counted by NumPy."""
    x, w = _inputs()
    x0, w0 = x.copy(), w.copy()
    limit = 9.0
    taken = next((k for k in range(8) if _loss_after(x0, w0, k) > limit), 8)
    assert 0 < taken < 8, "the example must stop early"
    expected = jax.grad(relax_jax)(jnp.asarray(x0), jnp.asarray(w0), taken)
    np.testing.assert_allclose(relax_until(x, w, 8, limit), float(relax_jax(x0, w0, taken)), rtol=1e-12)
    np.testing.assert_allclose(pyjlad.grad(relax_until, wrt=0)(x, w, 8, limit), np.asarray(expected), rtol=1e-11,
                               atol=1e-12)
    np.testing.assert_array_equal(x, x0)


# The rewrite on small modules -------------------------------------------------------------------------------


def _loop_module(diamonds: int) -> str:
    """``@f(n, bad1, bad2)``: a loop of ``n`` steps, each a chain of ``diamonds`` two-way branches adding to a
    running sum, left at its top when ``i == bad1`` (returning the sum so far, negated) and halfway when ``i ==
    bad2`` after three branches (that sum, plus 10^6), both ways out stored as Numba stores an exception; after
    the loop, the last step's sum is read outside any ``phi``; the latch is reached from a ``switch`` (written
    over lines) and has a ``phi``. ``@main`` prints ``@f`` for a few inputs."""
    half = 3
    lines = ["define i64 @f(i64 %n, i64 %bad1, i64 %bad2) {", "entry:", "  br label %head", "head:",
             "  %i = phi i64 [ 0, %entry ], [ %i.next, %latch ]", "  %s = phi i64 [ 0, %entry ], [ %s.next, %latch ]",
             "  br label %top", "top:", "  %stop1 = icmp eq i64 %i, %bad1", "  br i1 %stop1, label %out1, label %d0"]
    for k in range(diamonds):
        before = "%s" if k == 0 else f"%acc{k}"
        lines += [f"d{k}:", f"  %bit{k} = lshr i64 %i, {k % 5}", f"  %odd{k} = trunc i64 %bit{k} to i1",
                  f"  br i1 %odd{k}, label %l{k}, label %r{k}", f"l{k}:", f"  %a{k} = add i64 {before}, {k + 1}",
                  f"  br label %j{k}", f"r{k}:", f"  %b{k} = mul i64 {before}, 3", f"  br label %j{k}", f"j{k}:",
                  f"  %acc{k + 1} = phi i64 [ %a{k}, %l{k} ], [ %b{k}, %r{k} ]"]
        if k + 1 == half:
            lines += ["  %stop2 = icmp eq i64 %i, %bad2", f"  br i1 %stop2, label %out2, label %d{k + 1}"]
        else:
            lines += [f"  br label %{'d' + str(k + 1) if k + 1 < diamonds else 'last'}"]
    # The latch's way in: a switch over two lines (its default the latch), and a phi in the latch.
    lines += ["last:", "  switch i64 %i, label %latch [", "    i64 3, label %three", "  ]", "three:",
              "  br label %latch", "latch:", "  %extra = phi i64 [ 1, %last ], [ 2, %three ]",
              f"  %sum = add i64 %acc{diamonds}, %extra", "  %s.next = srem i64 %sum, 1000003", "  %i.next = add i64 %i, 1",
              "  %more = icmp slt i64 %i.next, %n", "  br i1 %more, label %head, label %done", "done:",
              "  %after = add i64 %s.next, 7", "  ret i64 %after", "out1:", "  store ptr @.const.picklebuf.a, ptr @raised",
              "  %neg = sub i64 0, %s", "  ret i64 %neg", "out2:", f"  %half = phi i64 [ %acc{half}, %j{half - 1} ]",
              "  store ptr @.const.picklebuf.b, ptr @raised", "  %big = add i64 %half, 1000000",
              "  ret i64 %big", "}", ""]
    calls = [(5, -1, -1), (5, 0, -1), (5, 3, -1), (5, -1, 2), (5, 4, 4), (1, -1, 0), (7, 6, 5), (9, 7, 8)]
    lines += ['@fmt = private constant [6 x i8] c"%lld\\0A\\00"', "@.const.picklebuf.a = private constant i8 1",
              "@.const.picklebuf.b = private constant i8 2", "@raised = global ptr null", "declare i32 @printf(ptr, ...)",
              "define i32 @main() {", "entry:"]
    for k, (n, bad1, bad2) in enumerate(calls):
        lines += [f"  %r{k} = call i64 @f(i64 {n}, i64 {bad1}, i64 {bad2})",
                  f"  %p{k} = call i32 (ptr, ...) @printf(ptr @fmt, i64 %r{k})"]
    return "\n".join([*lines, "  ret i32 0", "}", ""])


def _run(text: str) -> str:
    if shutil.which("lli-15") is None or shutil.which("opt-15") is None:
        pytest.fail("lli-15 and opt-15 are not installed (scripts/setup.sh --tests installs llvm-15)")
    verified = subprocess.run(["opt-15", "-passes=verify", "-disable-output"], input=text.encode(),
                              capture_output=True)
    assert verified.returncode == 0, verified.stderr.decode()
    run = subprocess.run(["lli-15", "-"], input=text.encode(), capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr.decode()
    return run.stdout.decode()


def test_the_rewrite_runs_every_way_as_before() -> None:
    text = _loop_module(24)
    graph = ControlFlow.of(parse(text).definitions[0].body)
    assert search_work(graph, graph.loops()[0], "top") > SEARCH_LIMIT
    rewritten = exits_through_latch(parse(text)).render()
    assert "label %pyjlad.latch.0.out.0" in rewritten and "label %pyjlad.latch.0.out.1" in rewritten
    new_graph = ControlFlow.of(parse(rewritten).definitions[0].body)
    loop = new_graph.loops()[0]
    assert sorted(inside for inside, _ in loop.exits) == ["latch", "pyjlad.latch.0"]
    assert search_work(new_graph, loop, "pyjlad.latch.0") == 4  # the join, the way out, the latch, the header
    before, after = _run(text), _run(rewritten)
    assert after == before
    assert len(set(before.split())) == 8  # every way out taken, each with its own value


def test_enzyme_still_sizes_the_caches_of_a_loop_whose_ways_out_raise() -> None:
    """:mod:`pyjlad.loop_caches` follows the new way out through its ``switch`` to the raises."""
    text = _loop_module(24)
    rewritten = exits_through_latch(parse(text)).render()
    assert "switch i32" in rewritten
    assert bounded_caches_fit(text) and bounded_caches_fit(rewritten)


def test_a_loop_whose_search_is_short_is_left_alone() -> None:
    text = _loop_module(6)
    assert exits_through_latch(parse(text)).render() == parse(text).render()


# A raise inside an inner loop (a Newton solve per step), leaving both loops, then eight array statements.
_IMPLICIT_STEP = """\
a = np.tanh(un) * c
b = a * a + un
d = np.exp(-b) - a
e = np.sqrt(1.0 + d * d)
f = np.log(e) * a
g = f * f + b
h = np.sin(g) - d
k = h * h + e
total += np.sum(e) + np.sum(b * d) + np.sum(k) + np.sum(f)"""


def _implicit(name: str, numpy: str, check: list[str]):
    """``name(x, c, steps)``: implicit Euler steps of ``u' = -c u^3`` by four Newton iterations each (``check``
    after each residual), then the step's statements; ``numpy``: ``np`` or ``jnp``."""
    step = [f"        {line}".replace("np.", f"{numpy}.") for line in _IMPLICIT_STEP.splitlines()]
    lines = [f"def {name}(x, c, steps):", "    u = x.copy()" if numpy == "np" else "    u = x", "    total = 0.0",
             "    for _ in range(steps):", "        un = u.copy()" if numpy == "np" else "        un = u",
             "        for _ in range(4):", "            r = un - u + 0.1 * c * un ** 3",
             *(f"            {line}" for line in check), "            un = un - r / (1.0 + 0.3 * c * un ** 2)", *step,
             "        u = un", f"    return total + {numpy}.sum(u * u)"]
    namespace: dict = {"np": np, "jnp": jnp}
    exec("\n".join(lines), namespace)  # noqa: S102 - one step written once for Numba and for jax
    return namespace[name]


implicit = njit(_implicit("implicit", "np", ["if np.max(np.abs(r)) > 1e8:", "    raise ArithmeticError('Newton diverged')"]))
implicit_jax = _implicit("implicit_jax", "jnp", [])


def test_a_raise_inside_an_inner_loop(two_gib) -> None:
    """The way out leaves the Newton loop and the time loop; without the rewrite, Enzyme ran out of the 2 GiB
    (checked by hand, 2026-12-05)."""
    rng = np.random.default_rng(3)
    x, c = rng.normal(size=6) * 0.3, rng.uniform(0.5, 1.5, size=6)
    x0, c0 = x.copy(), c.copy()
    expected = jax.grad(implicit_jax, argnums=(0, 1))(jnp.asarray(x0), jnp.asarray(c0), 3)
    gradient = pyjlad.grad(implicit, wrt=(0, 1))
    for got, want in zip(gradient(x, c, 3), expected):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(c, c0)
    with pytest.raises(ArithmeticError, match="Newton diverged"):
        gradient(x * 1e5, c, 3)
