"""A time loop whose step allocates many temporaries: derivatives built within a memory cap, and the pass itself.

Each allocation Numba tests for null is a way out of the loop, and Enzyme v0.0.289 searched every path from
each such exit back to the loop's header (:mod:`pyjlad.allocation_exits`): with eight temporaries per step it
ran out of 2 GiB. The derivatives here are checked against ``jax`` in float64 (from copies taken before the
call, the caller's array unchanged), built with the disk cache off and ``PYJLAD_OPT_MEMORY`` at 2 GiB; a request
no machine can meet inside such a loop is a ``MemoryError`` (Numba's runtime as pyjlad links it refuses it before
asking ``malloc``: ``pyjlad/runtime/nrt.ll``); and the rewrite on small modules.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.allocation_exits import failed_allocations_exit, phi_without
from pyjlad.ir import parse

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

TEMPORARIES = 8


def _defined(name: str, numpy: str):
    """``name``: a loop whose step makes TEMPORARIES arrays (a zeroed one with one element set, its product with
    ``x``) and sums the products, written with ``numpy`` (``np`` or ``jnp``)."""
    lines = [f"def {name}(x, steps):", "    s = 0.0", "    n = x.shape[0]", "    for t in range(steps):"]
    for k in range(TEMPORARIES):
        if numpy == "np":
            lines += [f"        z{k} = np.zeros(n)", f"        z{k}[t % n] = x[t % n] * {k + 1.0}"]
        else:
            lines += [f"        z{k} = jnp.zeros(n).at[t % n].set(x[t % n] * {k + 1.0})"]
        lines += [f"        s += {numpy}.sum(z{k} * x)"]
    namespace: dict = {"np": np, "jnp": jnp}
    exec("\n".join([*lines, "    return s"]), namespace)  # noqa: S102 - a step of TEMPORARIES statements, written out once
    return namespace[name]


many_temporaries = njit(_defined("many_temporaries", "np"))
many_temporaries_jax = _defined("many_temporaries_jax", "jnp")


@pytest.fixture
def two_gib(monkeypatch):
    monkeypatch.setenv("PYJLAD_OPT_MEMORY", str(2 << 30))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")


def test_gradient_and_jvp_of_a_step_with_many_temporaries(two_gib) -> None:
    rng = np.random.default_rng(20261205)
    x = rng.normal(size=7)
    x0, t = x.copy(), rng.normal(size=7)
    expected = jax.grad(many_temporaries_jax)(jnp.asarray(x0), 3)
    np.testing.assert_allclose(pyjlad.grad(many_temporaries, wrt=0)(x, 3), np.asarray(expected), rtol=1e-12,
                               atol=1e-13)
    _, tangent = jax.jvp(lambda a: many_temporaries_jax(a, 3), (jnp.asarray(x0),), (jnp.asarray(t),))
    _, got = pyjlad.jvp(many_temporaries, (x, 3), (t, None))
    np.testing.assert_allclose(got, float(tangent), rtol=1e-12)
    np.testing.assert_array_equal(x, x0)


@njit
def huge_temporary_per_step(x, n, steps):
    s = 0.0
    for k in range(steps):
        z = np.zeros(n)  # 2^48 bytes for n = 2^45: no machine has them
        s += z[0] + x[k] * x[k]
    return s


@pytest.mark.parametrize("steps", [2, 0], ids=["in a loop", "loop not run"])
def test_a_request_no_machine_meets_is_a_memory_error_and_the_process_goes_on(two_gib, steps) -> None:
    """Inside the loop, the test's failure branch now leads to the driver's out-of-memory exit; before either
    change, Enzyme's shadow of the request (null) was written to: the process died."""
    x = np.array([1.5, -2.0])
    with pytest.raises(MemoryError):
        huge_temporary_per_step(x, 2 ** 45, 2)  # what Numba itself raises
    df = pyjlad.grad(huge_temporary_per_step, wrt=0)
    if steps:
        with pytest.raises(MemoryError):
            df(x, 2 ** 45, steps)
    else:
        np.testing.assert_array_equal(df(x, 2 ** 45, steps), [0.0, 0.0])
    np.testing.assert_allclose(df(x, 3, 2), 2 * x)  # hand-derived: d/dx_k of x_k^2
    np.testing.assert_array_equal(x, [1.5, -2.0])  # the caller's array untouched


# The pass on small modules.

_ALLOCATOR = """define ptr @NRT_MemInfo_alloc_aligned(i64 %size, i32 %align) {
entry:
  %mi = call ptr @malloc(i64 %size)
  ret ptr %mi
}
"""

_LOOP = """define i32 @f(i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %j, %next ]
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)
  %t = icmp {predicate} ptr %mi, null
  br i1 %t, label %{first}, label %{second}
next:
  %j = add i64 %i, 1
  %c = icmp ult i64 %j, 10
  br i1 %c, label %loop, label %done
done:
  ret i32 0
{failure}
}}
"""


def _body(text: str) -> list[str]:
    module = failed_allocations_exit(parse(text + _ALLOCATOR), armed=True)
    return [line.strip() for line in module.function("f").body]


def test_a_failure_block_shared_with_another_exit_loses_only_that_edge() -> None:
    text = _LOOP.format(predicate="ne", first="next", second="raise", failure="""raise:
  %s = phi i32 [ 1, %loop ], [ 2, %entry.never ]
  ret i32 %s
entry.never:
  br label %raise""")
    body = _body(text)
    assert "br i1 %t, label %next, label %pyjlad.oom.0" in body  # ne: the false side is the failure
    assert "%s = phi i32 [ 2, %entry.never ]" in body
    assert body[-2:] == ["pyjlad.oom.0:", "unreachable"]


def test_a_failure_block_nothing_else_reaches_is_deleted_with_what_only_it_reaches() -> None:
    text = _LOOP.format(predicate="eq", first="raise", second="next", failure="""raise:
  %s = add i32 1, 0
  br label %report
report:
  %r = phi i32 [ %s, %raise ]
  ret i32 %r""")
    body = _body(text)
    assert "raise:" not in body and "report:" not in body
    assert not any("%s" in line for line in body)
    module = failed_allocations_exit(parse(text + _ALLOCATOR), armed=True)
    assert module.function("NRT_MemInfo_alloc_aligned").body[1].strip() == "call void @pyjlad_oom_check(i64 %size)"
    assert ('declare void @pyjlad_oom_check(i64) inaccessiblememonly nofree nounwind "enzyme_inactive"'
            in module.render())


def test_nothing_changes_where_the_exit_is_not_armed_or_the_allocator_not_defined() -> None:
    text = _LOOP.format(predicate="eq", first="raise", second="next", failure="raise:\n  ret i32 1")
    assert failed_allocations_exit(parse(text + _ALLOCATOR)).render() == parse(text + _ALLOCATOR).render()
    assert failed_allocations_exit(parse(text), armed=True).render() == parse(text).render()


def test_a_test_outside_any_loop_is_left_alone() -> None:
    text = """define i32 @f(i64 %n) {
entry:
  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32)
  %t = icmp eq ptr %mi, null
  br i1 %t, label %raise, label %ok
ok:
  ret i32 0
raise:
  ret i32 1
}
"""
    assert _body(text) == [line.strip() for line in parse(text).function("f").body]


def test_phi_without_keeps_brackets_inside_values() -> None:
    line = "  %p = phi ptr [ getelementptr ([2 x i8], ptr @s, i64 0, i64 1), %a ], [ null, %b ]"
    assert phi_without(line, "b") == "  %p = phi ptr [ getelementptr ([2 x i8], ptr @s, i64 0, i64 1), %a ]"
    assert phi_without("  %v = add i64 %a, 1", "a") == "  %v = add i64 %a, 1"
