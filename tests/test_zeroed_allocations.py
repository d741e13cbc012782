"""Arrays zeroed right after their allocation allocated zeroed (:mod:`pyjlad.zeroed_allocations`).

The Hessian of Newton steps with ``A @ v`` failed its first Enzyme run ("Cannot deduce type of memset": the
zeroed output of NumPy's product, stored into a structure, out of Enzyme's sight) and was built only with
loose types, twice the time; with the output allocated zeroed there is no fill to type
(``tests/test_empty_fills.py`` checks that Hessian, and that it is built without loose types). Oracle:
``jax`` in float64; inputs copied before each call.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad import runtime
from pyjlad.ir.module import parse
from pyjlad.zeroed_allocations import ZEROED_ALLOCATOR, zeroed_allocations

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


def _function(between: str = "", size: str = "%n", fill_block: str = "ok", extra_edge: bool = False) -> str:
    """A function allocating ``%n`` bytes and zeroing them in block ``ok`` (``between``: lines before the fill)."""
    other = "  br i1 %c, label %ok, label %fail\n" if extra_edge else "  ret void\n"
    return (f"define void @f(i64 %n, i1 %c) {{\n"
            f"entry:\n"
            f"  %mi = call ptr @NRT_MemInfo_alloc_aligned(i64 %n, i32 32), !alias.scope !3\n"
            f"  %null = icmp eq ptr %mi, null\n"
            f"  br i1 %null, label %fail, label %{fill_block}\n"
            f"fail:\n"
            f"{other}"
            f"ok:\n"
            f"  %field = getelementptr i8, ptr %mi, i64 24\n"
            f"  %data = load ptr, ptr %field, align 8\n"
            f"{between}"
            f"  call void @llvm.memset.p0.i64(ptr align 1 %data, i8 0, i64 {size}, i1 false)\n"
            f"  store double 1.0, ptr %data, align 8\n"
            f"  ret void\n"
            f"}}\n"
            f"{runtime.definitions('nrt.ll')['@NRT_MemInfo_alloc_aligned']}\n"
            f"declare noalias ptr @malloc(i64)\n"
            f"declare void @llvm.memset.p0.i64(ptr nocapture writeonly, i8, i64, i1 immarg)\n"
            f"!3 = !{{!4}}\n!4 = distinct !{{!4, !5}}\n!5 = distinct !{{!5}}\n")


def _assembles(text: str) -> None:
    proc = subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=text.encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()


def test_an_allocation_zeroed_at_once_becomes_one_zeroed_allocation():
    text = zeroed_allocations(parse(_function())).render()
    assert f"call ptr {ZEROED_ALLOCATOR}(i64 %n, i32 32), !alias.scope !3" in text
    assert "call void @llvm.memset" not in text
    assert text.count(f"define linkonce_odr ptr {ZEROED_ALLOCATOR}(") == 1
    assert "call ptr @calloc(i64 1, i64 %total)" in text
    _assembles(text)


@pytest.mark.parametrize("shape", [
    {"between": "  store double 2.0, ptr %data, align 8\n"},  # the data written before the fill
    {"size": "%m"},                                          # a fill of another length
    {"extra_edge": True},                                    # the fill's block reached another way too
])
def test_an_allocation_is_left_alone_where_the_fill_may_not_be_the_first_write(shape):
    source = _function(**shape).replace("i64 %n, i1 %c)", "i64 %n, i1 %c, i64 %m)")
    text = zeroed_allocations(parse(source)).render()
    assert ZEROED_ALLOCATOR not in text
    assert "call void @llvm.memset" in text


def test_the_zeroed_allocator_allocates_a_zeroed_block_with_the_header_numba_reads():
    definition = runtime.definitions("nrt.ll")[ZEROED_ALLOCATOR]
    assert "@calloc(" in definition and "@malloc(" not in definition
    _assembles(definition + "\ndeclare noalias ptr @calloc(i64, i64)\n")


@njit
def _zeros_then_dot(x, A):
    out = np.zeros(A.shape[0])
    out += A @ x
    for i in range(x.shape[0]):
        out[i] += x[i] ** 2
    return np.sum(out * out)


def _zeros_then_dot_jax(x, A):
    out = A @ x + x**2
    return jnp.sum(out * out)


def test_gradient_and_hessian_with_np_zeros_match_jax():
    rng = np.random.default_rng(8)
    x, A = rng.normal(size=4), rng.normal(size=(4, 4))
    x0, A0 = x.copy(), A.copy()
    np.testing.assert_allclose(pyjlad.grad(_zeros_then_dot)(x, A),
                               np.asarray(jax.grad(_zeros_then_dot_jax)(jnp.asarray(x0), jnp.asarray(A0))),
                               rtol=1e-12)
    np.testing.assert_allclose(pyjlad.hessian(_zeros_then_dot, x, A),
                               np.asarray(jax.hessian(_zeros_then_dot_jax)(jnp.asarray(x0), jnp.asarray(A0))),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(A, A0)
