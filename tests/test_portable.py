"""The exported IR is portable: LLVM 15, 16, 19 and 22 all accept it."""

from __future__ import annotations

import shutil
import subprocess

import numba
import pytest
from cases import CASES, Case

from pyjlad.errors import PortabilityError
from pyjlad.export import export, numba_argtypes
from pyjlad.portable_pipeline import make_portable

LLVM_VERSIONS = (15, 16, 19, 22)


def _llvm_as(version: int, text: str) -> subprocess.CompletedProcess:
    tool = shutil.which(f"llvm-as-{version}")
    if tool is None:
        pytest.skip(f"llvm-as-{version} is not installed (apt-get install llvm-{version})")
    return subprocess.run([tool, "-o", "/dev/null", "-"], input=text, capture_output=True, text=True)


@pytest.mark.parametrize("version", LLVM_VERSIONS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_test_function_exports_portable_ir(case: Case, version: int) -> None:
    exported = export(case.func, numba_argtypes(case.args))
    result = _llvm_as(version, exported.module.text)
    assert result.returncode == 0, result.stderr


# A module in LLVM 22's syntax with one of each construct LLVM 15 cannot read.
MODERN_IR = r"""
; ModuleID = 'm'
source_filename = "<string>"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

@_ZN08NumbaEnv4mangled = common local_unnamed_addr global ptr null

; Function Attrs: nofree norecurse nosync nounwind memory(argmem: readwrite)
define noundef range(i32 -1, 1) i32 @mangled_entry(ptr noalias writeonly captures(none) initializes((0, 8)) %retptr, ptr noalias readnone captures(none) %excinfo, ptr captures(address_is_null) %mi, ptr readonly captures(none) %data, i64 %n, double %y) local_unnamed_addr #0 {
entry:
  tail call void @NRT_incref(ptr %mi)
  %p = getelementptr inbounds nuw i8, ptr %data, i64 8
  %v = load double, ptr %p, align 8, !tbaa !1, !noalias !2
  %t = tail call double @llvm.tan.f64(double %v)
  %a = tail call double @llvm.atan2.f64(double %t, double %y)
  %i = trunc nuw nsw i64 %n to i32
  %z = zext nneg i32 %i to i64
  %c = icmp samesign ult i64 %z, 4
  %o = or disjoint i64 %z, 1
  %w = fmul <2 x double> splat (double 2.0), <double 1.0, double 2.0>
  %e = extractelement <2 x double> %w, i64 1
  %vt = tail call fast <2 x double> @llvm.tanh.v2f64(<2 x double> %w)
  %va = tail call <2 x double> @llvm.atan2.v2f64(<2 x double> %vt, <2 x double> <double 1.0, double 2.0>) #1
  %vc = icmp eq <4 x i32> <i32 1, i32 2, i32 3, i32 4>, splat (i32 4)
  %ml = tail call <4 x i32> @llvm.masked.load.v4i32.p0(ptr align 4 %data, <4 x i1> %vc, <4 x i32> poison)
  tail call void @llvm.masked.store.v4i32.p0(<4 x i32> %ml, ptr nonnull align 4 %data, <4 x i1> %vc)
  %r = fadd double %a, %e
  tail call void @llvm.lifetime.start.p0(ptr %p)
  tail call void @NRT_decref(ptr %mi)
  store double %r, ptr %retptr, align 8
  ret i32 0
}

define ptr @_ZN7cpython_wrapper(ptr %a) {
entry:
  ret ptr %a
}

define double @cfunc.mangled_entry(double %x) {
entry:
  ret double %x
}

define linkonce_odr void @NRT_incref(ptr %.1) {
.3:
  ret void
}

define linkonce_odr void @NRT_decref(ptr %.1) {
.3:
  %0 = tail call i8 @llvm.x86.atomic.sub.cc.i64(ptr %.1, i64 1, i32 4)
  ret void
}

declare double @llvm.tan.f64(double) #1
declare <2 x double> @llvm.tanh.v2f64(<2 x double>) #1
declare <2 x double> @llvm.atan2.v2f64(<2 x double>, <2 x double>) #1
declare double @llvm.atan2.f64(double, double) #1
declare void @llvm.lifetime.start.p0(ptr captures(none)) #2
declare i8 @llvm.x86.atomic.sub.cc.i64(ptr, i64, i32 immarg)
declare <4 x i32> @llvm.masked.load.v4i32.p0(ptr captures(none), <4 x i1>, <4 x i32>) #1
declare void @llvm.masked.store.v4i32.p0(<4 x i32>, ptr captures(none), <4 x i1>) #2

attributes #0 = { nofree norecurse nosync nounwind memory(argmem: readwrite) "target-cpu"="znver4" }
attributes #1 = { mustprogress nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none) }
attributes #2 = { nocallback nofree nosync nounwind willreturn memory(argmem: readwrite) }

!1 = !{!"double"}
!2 = !{!2}
"""


@pytest.fixture(scope="module")
def portable_text() -> str:
    return make_portable(MODERN_IR, "mangled_entry", name="pyjlad_entry").text


@pytest.mark.parametrize("version", LLVM_VERSIONS)
def test_modern_constructs_are_down_levelled(portable_text: str, version: int) -> None:
    result = _llvm_as(version, portable_text)
    assert result.returncode == 0, result.stderr + portable_text


@pytest.mark.parametrize(
    "gone",
    ["captures(", "range(", "initializes(", "inbounds nuw", "nneg", "samesign", "disjoint",
     "trunc nuw", "splat", "!tbaa", "llvm.tan", "llvm.atan2", "llvm.tanh", "llvm.lifetime", "llvm.x86",
     "memory(", "target-cpu", "NumbaEnv", "cpython", "cfunc.", "mangled_entry"],
)
def test_construct_is_gone(portable_text: str, gone: str) -> None:
    assert gone not in portable_text


def test_rewrites_keep_meaning(portable_text: str) -> None:
    assert "define noundef i32 @pyjlad_entry(ptr noalias writeonly nocapture %retptr" in portable_text
    assert "call double @tan(double %v)" in portable_text
    assert "call double @atan2(double %t, double %y)" in portable_text
    assert "<2 x double> <double 2.0, double 2.0>" in portable_text
    assert "icmp eq <4 x i32> <i32 1, i32 2, i32 3, i32 4>, <i32 4, i32 4, i32 4, i32 4>" in portable_text
    assert "getelementptr inbounds i8, ptr %data" in portable_text
    assert "argmemonly" in portable_text  # memory(argmem: readwrite)
    assert "atomicrmw sub" in portable_text  # portable NRT_decref
    assert "%pj.vt.r.l1 = call double @tanh(double %pj.vt.a0.l1)" in portable_text
    assert "%va = insertelement <2 x double> %pj.va.v.l0, double %pj.va.r.l1, i64 1" in portable_text
    assert "declare double @tanh(double)" in portable_text
    assert "@llvm.masked.load.v4i32.p0(ptr %data, i32 4, <4 x i1> %vc, <4 x i32> poison)" in portable_text
    assert "@llvm.masked.store.v4i32.p0(<4 x i32> %ml, ptr nonnull %data, i32 4, <4 x i1> %vc)" in portable_text


def test_x86_intrinsic_in_user_code_is_refused() -> None:
    ir = MODERN_IR.replace("%r = fadd double %a, %e", "%q = call i64 @llvm.x86.rdtsc()\n  %r = fadd double %a, %e")
    with pytest.raises(PortabilityError, match="llvm.x86.rdtsc"):
        make_portable(ir + "\ndeclare i64 @llvm.x86.rdtsc()\n", "mangled_entry", name="pyjlad_entry")


def test_x86_atomic_flag_in_user_code_is_written_back() -> None:
    """LLVM's x86 code generator makes one of a reference count's release (refused until 2026-12-07)."""
    ir = MODERN_IR.replace("%r = fadd double %a, %e", "%q = call i8 @llvm.x86.atomic.sub.cc.i64(ptr %p, i64 1, i32 4)\n  %r = fadd double %a, %e")
    text = make_portable(ir, "mangled_entry", name="pyjlad_entry").text
    assert "@llvm.x86" not in text
    assert "%q.pj.old = atomicrmw sub ptr %p, i64 1 seq_cst" in text and "%q = zext i1 %q.pj.flag to i8" in text


def test_missing_entry_is_refused() -> None:
    with pytest.raises(PortabilityError, match="not defined"):
        make_portable(MODERN_IR, "no_such_function", name="pyjlad_entry")


def test_numba_module_keeps_only_the_entry_and_its_dependencies() -> None:
    @numba.njit
    def helper(a):
        return a * 2.0

    @numba.njit
    def top(a):
        return helper(a) + 1.0

    text = export(top, (numba.float64,)).module.text
    defines = [line for line in text.splitlines() if line.startswith("define")]
    assert defines[0].startswith("define") and "@pyjlad_top(" in defines[0]
    assert "cpython" not in text and "cfunc." not in text and "NumbaEnv" not in text


def test_symbols_inside_string_constants_are_not_references() -> None:
    ir = MODERN_IR.replace(
        "@_ZN08NumbaEnv4mangled = common local_unnamed_addr global ptr null",
        '@_ZN08NumbaEnv4mangled = common local_unnamed_addr global ptr null\n'
        '@.const.msg = internal constant [8 x i8] c"a @7$N$\\00"',
    ).replace("store double %r, ptr %retptr, align 8", "store double %r, ptr %retptr, align 8\n  %m = load i8, ptr @.const.msg, align 1")
    text = make_portable(ir, "mangled_entry", name="pyjlad_entry").text
    assert '@.const.msg = internal constant [8 x i8] c"a @7$N$\\00"' in text


SHARED_SLOT_IR = r"""
define i32 @callee(ptr noalias %retptr, ptr noalias %excinfo, i64 %n) {
entry:
  store ptr null, ptr %excinfo, align 8
  ret i32 0
}

define i32 @entry(ptr noalias %retptr, ptr noalias %excinfo, i64 %n) {
entry:
  %slot = alloca [1 x i64], align 8
  store ptr null, ptr %slot, align 8
  %s = call i32 @callee(ptr %retptr, ptr nonnull %slot, i64 %n)
  %e = load ptr, ptr %slot, align 8
  store ptr %e, ptr %excinfo, align 8
  store i64 %n, ptr %slot, align 8
  %v = load i64, ptr %slot, align 8
  store i64 %v, ptr %retptr, align 8
  ret i32 %s
}
"""


def test_excinfo_slot_shared_with_an_integer_gets_its_own_alloca() -> None:
    """LLVM may reuse a call's excinfo slot for an integer; Enzyme needs one type per slot."""
    text = make_portable(SHARED_SLOT_IR, "entry", name="f").text
    body = text[text.index("define i32 @f("):]
    assert "%slot.pyjlad.excinfo = alloca ptr" in body
    assert "store ptr null, ptr %slot.pyjlad.excinfo" in body
    assert "ptr nonnull %slot.pyjlad.excinfo, i64 %n)" in body
    assert "%e = load ptr, ptr %slot.pyjlad.excinfo" in body
    assert "store i64 %n, ptr %slot," in body and "%v = load i64, ptr %slot," in body
    assert _llvm_as(15, text).returncode == 0


def test_masked_intrinsics_with_constant_vector_operands_are_down_levelled():
    # np.eye's vectorized fill: the stored value is a constant vector with commas inside.
    from pyjlad.ir.downlevel import _rewrite_masked

    scatter = ("  tail call void @llvm.masked.scatter.v2f64.v2p0(<2 x double> <double 1.0, double 1.0>, "
               "<2 x ptr> align 8 %p, <2 x i1> <i1 true, i1 true>)")
    gather = "  %g = call <2 x double> @llvm.masked.gather.v2f64.v2p0(<2 x ptr> align 8 %p, <2 x i1> %m, <2 x double> poison)"
    down = _rewrite_masked(scatter)
    assert down.endswith("<2 x ptr> %p, i32 8, <2 x i1> <i1 true, i1 true>)")
    assert "(<2 x ptr> %p, i32 8, <2 x i1> %m, <2 x double> poison)" in _rewrite_masked(gather)
    assert _rewrite_masked(down) == down  # idempotent
    module = ("define void @f(<2 x ptr> %p, <2 x i1> %m) {\n" + _rewrite_masked(scatter) + "\n"
              + _rewrite_masked(gather) + "\n  ret void\n}\n"
              "declare void @llvm.masked.scatter.v2f64.v2p0(<2 x double>, <2 x ptr>, i32 immarg, <2 x i1>)\n"
              "declare <2 x double> @llvm.masked.gather.v2f64.v2p0(<2 x ptr>, i32 immarg, <2 x i1>, <2 x double>)\n")
    subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=module.encode(), check=True)


def test_the_suite_wide_portability_check_flags_a_module_llvm_rejects():
    # conftest.py runs this check on every module the suite exported when the session ends.
    from conftest import portability_failures

    good = "define double @f(double %x) {\n  ret double %x\n}\n"
    assert portability_failures({}) == []
    assert portability_failures({"good": good}) == []
    failures = portability_failures({"good": good, "bad": good.replace("ret double", "return double")})
    assert len(failures) == 4 and all("bad" in line for line in failures)
