"""The derivative's final optimization targets this machine's CPU (``pyjlad.engines.differentiate.HOST_TARGET``).

Without it ``opt`` optimizes Enzyme's output for a baseline x86-64 (SSE2): loops vectorized two doubles
wide, marked vectorized, never widened by Numba's JIT. The figures: ``benchmarks/host_target.py``.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.engines.differentiate import HOST_TARGET, _optimized_for_host, host_target_key
from pyjlad.toolchain import locate

llvm.initialize_native_target()
_FEATURES = llvm.get_host_cpu_features()
needs_avx = pytest.mark.skipif(not _FEATURES.get("avx", False) or not llvm.get_process_triple().startswith("x86_64"),
                               reason="not an x86-64 CPU with AVX: its vectors are as wide as the baseline's")

#: y[i] = 2 x[i]: a loop any vectorizer makes as wide as the target's registers.
_DOUBLE_LOOP = """target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

define void @twice(ptr noalias %x, ptr noalias %y, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %exit
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %px = getelementptr inbounds double, ptr %x, i64 %i
  %v = load double, ptr %px, align 8
  %w = fmul double %v, 2.0
  %py = getelementptr inbounds double, ptr %y, i64 %i
  store double %w, ptr %py, align 8
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %exit
exit:
  ret void
}
"""


def _text(bitcode: bytes) -> str:
    return str(llvm.parse_bitcode(bitcode))


@needs_avx
def test_the_final_optimization_vectorizes_for_this_cpu():
    toolchain = locate()
    baseline = _text(toolchain.run(_DOUBLE_LOOP, "function(instcombine),default<O2>"))
    host = _text(_optimized_for_host(toolchain, _DOUBLE_LOOP, "function(instcombine),default<O2>", "twice", ()))
    assert "<2 x double>" in baseline and "<4 x double>" not in baseline
    assert "<4 x double>" in host or "<8 x double>" in host


def test_a_pipeline_without_the_final_optimization_runs_as_given():
    toolchain = locate()
    text = _text(_optimized_for_host(toolchain, _DOUBLE_LOOP, "function(instcombine)", "twice", ()))
    assert "x double>" not in text  # no vectorizer ran


def test_the_cache_key_names_this_cpu():
    key = host_target_key()
    assert key.startswith(f"optimized-for:{' '.join(HOST_TARGET)}:{llvm.get_host_cpu_name()}:")
    assert "-unroll-runtime=false" in HOST_TARGET and "-mcpu=native" in HOST_TARGET


@needs_avx
def test_a_gradient_is_built_for_this_cpu_and_right(tmp_path, monkeypatch):
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")

    @njit
    def weighted_squares(x, c):
        s = 0.0
        for i in range(x.shape[0]):
            s += c[i] * x[i] * x[i]
        return s

    x = np.linspace(-1.0, 2.0, 203)
    c = np.cos(np.arange(203.0))
    x0, c0 = x.copy(), c.copy()
    g = pyjlad.grad(weighted_squares)(x, c)
    np.testing.assert_allclose(g, 2.0 * c0 * x0, rtol=1e-15, atol=0)  # d/dx_i sum c x^2 = 2 c_i x_i
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(c, c0)
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert outputs, "no Enzyme output was dumped"
    assert any("<4 x double>" in p.read_text() or "<8 x double>" in p.read_text() for p in outputs)
