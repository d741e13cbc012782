"""Each pass of the portable pipeline on small hand-written IR, the pipeline object, and ``PYJLAD_DUMP_IR``.

The expected texts are written from the passes' contracts (their docstrings), not taken from their output.
"""

from __future__ import annotations

import subprocess

import numba
import numpy as np
import pytest

import pyjlad
from pyjlad.errors import PortabilityError, SettingError
from pyjlad.ir import parse
from pyjlad.ir.pipeline import DUMP_VARIABLE, Pass, Pipeline, dump
from pyjlad.portable import RUNTIME_CALL_DTOR
from pyjlad.portable_pipeline import (
    PORTABLE,
    PortableContext,
    declare_libm_calls,
    dedupe_declarations,
    down_level,
    extract,
    freeze_selects,
    integer_min_max,
    inverse_pairs,
    kind_specific_blas,
    opaque_address_comparisons,
    refuse_target_intrinsics,
    split_excinfo_slots,
    stable_names,
    translate_attribute_groups,
    unique_names,
)

HEADER = 'target datalayout = "e-m:e-i64:64-n8:16:32:64-S128"\ntarget triple = "x86_64-unknown-linux-gnu"\n'


def _context(entry: str = "entry", **fields) -> PortableContext:
    context = PortableContext(entry=entry, name="pyjlad_f")
    for key, value in fields.items():
        setattr(context, key, value)
    return context


def _apply(function, text: str, context: PortableContext) -> str:
    """``text`` after the pass of :data:`PORTABLE` that runs ``function`` (parsed and rendered as its form needs)."""
    step = next(p for p in PORTABLE.passes if p.run is function)
    return Pipeline("test", (step,)).run(text, context, label="test")


def _llvm_as_15(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=text.encode(), capture_output=True)


# ------------------------------------------------------------------ kind-specific-blas
BLAS_IR = HEADER + """
define i32 @entry(ptr %a, ptr %b) {
  %r = call i32 @numba_xxdot(i8 100, i8 0, i64 3, ptr %a, ptr %b, ptr %a)
  %s = call i32 @numba_xxgetrf(i8 115, i64 2, i64 2, ptr %a, i64 2, ptr %b)
  ret i32 %r
}
declare i32 @numba_xxdot(i8, i8, i64, ptr, ptr, ptr)
declare i32 @numba_xxgetrf(i8, i64, i64, ptr, i64, ptr)
"""


def test_kind_specific_blas_names_calls_by_kind_and_declares_lapack_helpers() -> None:
    context = _context()
    text = _apply(kind_specific_blas, BLAS_IR, context)
    assert "call i32 @numba_xxdot.d(i8 100, i8 0," in text  # 100 = 'd': double
    assert "call i32 @numba_xxgetrf.s(i8 115, i64 2," in text  # 115 = 's': float
    assert context.links == [("numba_xxgetrf", "s")]
    assert text.endswith("declare i32 @numba_xxgetrf.s(i8, i64, i64, ptr, i64, ptr)\n")
    assert _llvm_as_15(text.replace("@numba_xxdot(", "@numba_xxdot.d(")).returncode == 0


def test_kind_specific_blas_renames_only_calls_with_a_constant_kind() -> None:
    text = BLAS_IR.replace("@numba_xxdot(i8 100,", "@numba_xxdot(i8 %k,").replace("(ptr %a, ptr %b)", "(ptr %a, ptr %b, i8 %k)")
    context = _context()
    renamed = _apply(kind_specific_blas, text, context)
    assert "call i32 @numba_xxdot(i8 %k, i8 0," in renamed and "@numba_xxdot." not in renamed
    assert context.links == [("numba_xxgetrf", "s")]


def test_kind_specific_blas_leaves_a_module_without_blas_alone() -> None:
    text = HEADER + "define i32 @entry() {\n  ret i32 0\n}\n"
    assert _apply(kind_specific_blas, text, _context()) == text


# ------------------------------------------------------------------ inverse-pairs
INVERSE_IR = HEADER + """
define i32 @entry(ptr %a, ptr %p, ptr %c, ptr %q, i64 %n) {
  %r = call i32 @numba_xxgetrf.d(i8 100, i64 %n, i64 %n, ptr %a, i64 %n, ptr %p)
  %bad = icmp ne i32 %r, 0
  br i1 %bad, label %raise, label %invert
raise:
  ret i32 1
invert:
  %s = call i32 @numba_ez_xxgetri.d(i8 100, i64 %n, ptr %a, i64 %n, ptr %p)
  %det = call i32 @numba_xxgetrf.d(i8 100, i64 %n, i64 %n, ptr %c, i64 %n, ptr %q)
  ret i32 %s
}
declare i32 @numba_xxgetrf.d(i8, i64, i64, ptr, i64, ptr)
declare i32 @numba_ez_xxgetri.d(i8, i64, ptr, i64, ptr)
"""


def test_inverse_pairs_makes_an_inverse_one_call_and_leaves_a_lone_factorization() -> None:
    context = _context(links=[("numba_ez_xxgetri", "d"), ("numba_xxgetrf", "d")])
    text = _apply(inverse_pairs, INVERSE_IR, context)
    assert "%r = call i32 @pyjlad_inverse.status.d(ptr %a, ptr %pyjlad.inverse.end0)" in text
    assert "call void @pyjlad_inverse.d(ptr %a, ptr %pyjlad.inverse.end0)" in text
    assert "%s = add i32 0, 0" in text and "call i32 @numba_ez_xxgetri" not in text
    assert "%det = call i32 @numba_xxgetrf.d(i8 100, i64 %n, i64 %n, ptr %c," in text  # np.linalg.det's, alone
    # the inverse's module first: llvm-link drops the helpers' linkonce adapters nothing linked before calls
    assert context.links == [("pyjlad_inverse", "d"), ("numba_ez_xxgetri", "d"), ("numba_xxgetrf", "d")]
    assert _llvm_as_15(text).returncode == 0


def test_inverse_pairs_needs_the_same_buffer_and_pivots() -> None:
    text = INVERSE_IR.replace("@numba_ez_xxgetri.d(i8 100, i64 %n, ptr %a,", "@numba_ez_xxgetri.d(i8 100, i64 %n, ptr %c,")
    context = _context(links=[])
    assert _apply(inverse_pairs, text, context) == text
    assert context.links == []


# ------------------------------------------------------------------ stable-names
NAMES_IR = HEADER + """
@.bytes.-4446739099191175225 = internal constant [3 x i8] c"ab\\00"
define i32 @_ZN4main1fB3v29Ed(ptr %retptr, ptr %excinfo, double %x) {
  %m = load i8, ptr @.bytes.-4446739099191175225
  %r = call i32 @_ZN4main1gB3v30Ed(ptr %retptr, ptr %excinfo, double %x)
  ret i32 %r
}
define i32 @_ZN4main1gB3v30Ed(ptr %retptr, ptr %excinfo, double %x) {
  ret i32 0
}
attributes #0 = { nounwind }
"""


def test_stable_names_renames_per_process_names_by_content_and_order() -> None:
    context = _context("_ZN4main1fB3v29Ed")
    text = _apply(stable_names, NAMES_IR, context)
    assert "@.bytes.-" not in text and text.count("@.bytes.content.") == 2  # the global and its use
    # uids 29 and 30 become 1 and 2, in order of appearance: B3v29 -> B2u1, B3v30 -> B2u2
    assert "@_ZN4main1fB2u1Ed(" in text and "@_ZN4main1gB2u2Ed(" in text
    assert context.entry_symbol == "@_ZN4main1fB2u1Ed"
    assert "attributes #0 = { nounwind }" in text
    # by content: the same constant in another process (another hash) gets the same name
    other = _apply(stable_names, NAMES_IR.replace("-4446739099191175225", "771"), _context("_ZN4main1fB3v29Ed"))
    assert other == text


def test_stable_names_refuses_a_missing_entry() -> None:
    with pytest.raises(PortabilityError, match="not defined"):
        _apply(stable_names, NAMES_IR, _context("no_such_function"))


# ------------------------------------------------------------------ extract
EXTRACT_IR = HEADER + """
%T = type { double }
@unused = internal global i64 0
@_ZN08NumbaEnv1f = common local_unnamed_addr global ptr null
define i32 @entry(ptr %retptr, ptr %excinfo, double %x) {
  %e = load ptr, ptr @_ZN08NumbaEnv1f
  %m = call ptr @NRT_MemInfo_alloc_aligned(i64 8, i32 32)
  %y = call double @erfc(double %x) #1
  %s = call ptr @PyUnicode_FromString(ptr null)
  ret i32 0
}
define i32 @cpython.wrapper(ptr %a) {
  %r = call i32 @entry(ptr %a, ptr %a, double 0.0)
  ret i32 %r
}
declare ptr @NRT_MemInfo_alloc_aligned(i64, i32)
declare double @erfc(double) #1
declare ptr @PyUnicode_FromString(ptr)
attributes #0 = { nounwind }
attributes #1 = { nounwind memory(read) }
"""


def test_extract_keeps_what_the_entry_reaches_and_replaces_the_runtime() -> None:
    context = _context(entry_symbol="@entry")
    text = _apply(extract, EXTRACT_IR, context)
    assert "@cpython.wrapper" not in text and "@unused" not in text  # not reached from the entry
    assert "%T = type { double }" in text  # every named type is kept (unused ones are harmless)
    assert "@_ZN08NumbaEnv1f = internal global ptr null" in text  # common -> internal
    # Numba's allocator is pyjlad's definition now (Enzyme follows it); its declaration is gone
    assert "define" in text and "@NRT_MemInfo_alloc_aligned(" in text
    assert "declare ptr @NRT_MemInfo_alloc_aligned" not in text
    # an error-path C-API call is a stub returning null
    assert "define linkonce_odr ptr @PyUnicode_FromString(ptr %a0) {\nentry:\n  ret ptr null\n}" in text
    # libm keeps its attributes inline, without readonly (Enzyme adds readnone)
    assert "declare double @erfc(double) nounwind\n" in text + "\n"
    assert context.rewritten == {"@entry"} and context.numba_functions == {"@entry"}
    assert sorted(context.externals) == ["erfc", "malloc"]  # malloc: the allocator's definition calls it
    assert text.startswith(HEADER + "\n")


# ------------------------------------------------------------------ function-body passes
SLOT_IR = HEADER + """
define i32 @callee(ptr noalias %retptr, ptr noalias %excinfo, i64 %n) {
entry:
  ret i32 0
}
define i32 @entry(ptr noalias %retptr, ptr noalias %excinfo, i64 %n) {
entry:
  %slot = alloca [1 x i64], align 8
  %s = call i32 @callee(ptr %retptr, ptr nonnull %slot, i64 %n)
  %e = load ptr, ptr %slot, align 8
  store i64 %n, ptr %slot, align 8
  ret i32 %s
}
"""


def test_split_excinfo_slots_rewrites_only_the_functions_extract_kept_as_numbas() -> None:
    context = _context(numba_functions={"@callee", "@entry"}, rewritten={"@entry"})
    text = _apply(split_excinfo_slots, SLOT_IR, context)
    assert "%slot.pyjlad.excinfo = alloca ptr, align 8" in text
    assert "call i32 @callee(ptr %retptr, ptr nonnull %slot.pyjlad.excinfo, i64 %n)" in text
    assert "%e = load ptr, ptr %slot.pyjlad.excinfo" in text and "store i64 %n, ptr %slot," in text
    assert _apply(split_excinfo_slots, SLOT_IR, _context(numba_functions={"@callee"}, rewritten=set())) == SLOT_IR


ADDRESS_IR = HEADER + """
define i1 @entry(ptr %a, ptr %b) {
  %x = ptrtoint ptr %a to i64
  %y = ptrtoint ptr %b to i64
  %d = sub i64 %x, %y
  %c = icmp ult i64 %d, 32
  ret i1 %c
}
define i1 @second(ptr %a) {
  %x = ptrtoint ptr %a to i64
  %c = icmp eq i64 %x, 0
  ret i1 %c
}
define i64 @escapes(ptr %a) {
  %x = ptrtoint ptr %a to i64
  ret i64 %x
}
"""


def test_opaque_address_comparisons_adds_the_helper_once_after_its_first_user() -> None:
    context = _context(rewritten={"@entry", "@second", "@escapes"})
    text = _apply(opaque_address_comparisons, ADDRESS_IR, context)
    assert "%x = call i64 @pyjlad_address(ptr %a)" in text and "%y = call i64 @pyjlad_address(ptr %b)" in text
    assert text.count("define internal i64 @pyjlad_address(ptr %p)") == 1
    assert text.index("@pyjlad_address(ptr %p)") < text.index("define i1 @second")
    assert "%x = ptrtoint ptr %a to i64\n  ret i64 %x" in text  # used as a value, not only compared: kept
    assert _llvm_as_15(text).returncode == 0


def test_freeze_carried_selects_freezes_a_running_max() -> None:
    loop = HEADER + """
define double @entry(ptr %x, i64 %n) {
entry:
  %x0 = load double, ptr %x
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %m = phi double [ %x0, %entry ], [ %s, %loop ]
  %p = getelementptr double, ptr %x, i64 %i
  %v = load double, ptr %p
  %c = fcmp ogt double %v, %m
  %s = select i1 %c, double %v, double %m
  %i.next = add i64 %i, 1
  %done = icmp eq i64 %i.next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret double %s
}
"""
    text = _apply(freeze_selects, loop, _context(rewritten={"@entry"}))
    assert "freeze double" in text and text != loop
    assert _apply(freeze_selects, loop, _context(rewritten=set())) == loop
    assert _llvm_as_15(text).returncode == 0


def test_integer_min_max_becomes_compare_and_select() -> None:
    clamp = HEADER + """
define i64 @entry(i64 %k, i64 %n, <2 x i64> %v) {
entry:
  %".lo" = tail call i64 @llvm.smax.i64(i64 %k, i64 1)
  %top = add i64 %n, -1
  %hi = call noundef i64 @llvm.smin.i64(i64 noundef %".lo", i64 %top) #0
  %u = call i32 @llvm.umax.i32(i32 7, i32 3)
  %w = zext i32 %u to i64
  %vm = call <2 x i64> @llvm.smin.v2i64(<2 x i64> %v, <2 x i64> %v)
  %0 = call i64 @llvm.smin.i64(i64 %hi, i64 %w)
  %r = add i64 %hi, %0
  ret i64 %r
}
declare i64 @llvm.smax.i64(i64, i64)
declare i64 @llvm.smin.i64(i64, i64)
declare i32 @llvm.umax.i32(i32, i32)
declare <2 x i64> @llvm.smin.v2i64(<2 x i64>, <2 x i64>)
attributes #0 = { nounwind }
"""
    text = _apply(integer_min_max, clamp, _context(rewritten={"@entry"}))
    assert '%.lo.pj.cmp = icmp sgt i64 %k, 1' in text
    assert '%hi = select i1 %hi.pj.cmp, i64 %".lo", i64 %top' in text
    assert "%u.pj.cmp = icmp ugt i32 7, 3" in text
    assert '%0 = select i1 %"0.pj.cmp", i64 %hi, i64 %w' in text  # a numbered value's compare gets a quoted name
    assert "call <2 x i64> @llvm.smin.v2i64" in text  # vectors are left alone (Enzyme's copy has none)
    assert "call i64 @llvm.s" not in text and "call noundef i64 @llvm.s" not in text
    assert _apply(integer_min_max, clamp, _context(rewritten=set())) == clamp
    assert _llvm_as_15(text).returncode == 0


# ------------------------------------------------------------------ down-level and after
def test_down_level_rewrites_syntax_and_keeps_used_groups_translated() -> None:
    modern = HEADER + """
define i32 @entry(ptr captures(none) %p, i64 %n) #1 {
  %c = icmp samesign ult i64 %n, 4
  %q = getelementptr inbounds nuw i8, ptr %p, i64 %n
  ret i32 0
}
attributes #0 = { cold }
attributes #1 = { nounwind memory(argmem: read) "target-cpu"="znver3" }
"""
    steps = [p for p in PORTABLE.passes if p.name in ("down-level", "translate-attribute-groups")]
    assert steps[0].run is down_level and steps[0].form == "text" and steps[1].run is translate_attribute_groups
    text = Pipeline("test", steps).run(modern, _context(), label="test")
    assert "captures(none)" not in text and "samesign" not in text and " nuw " not in text
    assert "attributes #0" not in text  # not used any more
    assert "attributes #1 = { nounwind " in text and "target-cpu" not in text and "memory(" not in text
    assert _llvm_as_15(text).returncode == 0


def test_unique_names_names_the_entry_and_salts_renumbered_uids() -> None:
    text = HEADER + "define i32 @_ZN4main1fB2u1Ed() {\n  ret i32 0\n}\n"
    renamed = _apply(unique_names, text, _context(entry_symbol="@_ZN4main1fB2u1Ed"))
    assert "define i32 @pyjlad_f() {" in renamed
    callee = HEADER + "define i32 @e() {\n  %r = call i32 @_ZN4main1gB2u2Ed()\n  ret i32 %r\n}\n" \
        "define i32 @_ZN4main1gB2u2Ed() {\n  ret i32 0\n}\n"
    salted = _apply(unique_names, callee, _context(entry_symbol="@e"))
    assert "@_ZN4main1gB2u2Ed" not in salted and salted.count("@_ZN4main1gB15u2h") == 2  # "u2h" + 12 hex digits: 15 characters


def test_dedupe_declarations_and_declare_libm_calls() -> None:
    text = "declare double @sin(double)\ndeclare double @sin(double)\ndefine double @f(double %x) {\n" \
           "  %a = call double @sin(double %x)\n  %b = call double @tanh(double %x)\n  ret double %b\n}\n"
    deduped = _apply(dedupe_declarations, text, _context())
    assert deduped.count("declare double @sin(double)") == 1
    context = _context()
    declared = _apply(declare_libm_calls, deduped, context)
    # tanh: what down-level makes of the vector intrinsic @llvm.tanh.v4f64, called lane by lane
    assert declared.endswith("declare double @tanh(double)\n") and context.externals == ["tanh"]
    floats = "define float @f(float %x, float %y) {\n  %a = call float @atan2f(float %x, float %y)\n" \
             "  %b = call float @sinhf(float %a)\n  ret float %b\n}\n"
    context = _context()
    declared = _apply(declare_libm_calls, floats, context)
    assert declared.endswith("declare float @atan2f(float, float)\ndeclare float @sinhf(float)\n")
    assert context.externals == ["atan2f", "sinhf"]
    assert _llvm_as_15(declared).returncode == 0


def test_refuse_target_intrinsics() -> None:
    with pytest.raises(PortabilityError, match=r"llvm\.x86\.sse2\.pause"):
        _apply(refuse_target_intrinsics, "define void @f() {\n  call void @llvm.x86.sse2.pause()\n  ret void\n}\n"
               "declare void @llvm.x86.sse2.pause()\n", _context())
    assert _apply(refuse_target_intrinsics, "declare void @f()\n", _context()) == "declare void @f()\n"


# ------------------------------------------------------------------ the pipeline and its dumps
def test_the_portable_pipeline_names_every_pass_in_order() -> None:
    names = [p.name for p in PORTABLE.passes]
    assert names == ["nested-drivers", "kind-specific-blas", "inverse-pairs", "typed-list-growth", "atomic-flag-intrinsics",
                     "stable-names", "extract", "constant-dynamic-globals",
                     "split-excinfo-slots", "split-result-slots", "branch-selects",
                     "opaque-address-comparisons", "freeze-carried-selects", "guarded-selects", "smooth-special-points", "integer-min-max", "down-level",
                     "translate-attribute-groups", "unique-names",
                     "dedupe-declarations", "declare-libm-calls", "refuse-target-intrinsics"]
    assert all(p.summary for p in PORTABLE.passes)  # each documents why it exists
    # one parse for the passes before down-level (the one text pass) and one after it
    assert [p.name for p in PORTABLE.passes if p.form == "text"] == ["down-level"]
    described = PORTABLE.describe()
    assert all(name in described for name in names)


def test_readme_shows_the_pipeline() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for step in PORTABLE.passes:
        assert f"`{step.name}`" in readme, step.name


def test_dump_writes_nothing_when_unset(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(DUMP_VARIABLE, raising=False)
    assert dump("f", "stage", "x") is None
    assert Pipeline("p", (Pass("a", lambda t, c: t + "a", "text", form="text"),)).run("", None, label="f") == "a"


def test_an_unwritable_dump_directory_is_a_setting_error(monkeypatch, tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(DUMP_VARIABLE, str(blocker / "dumps"))
    with pytest.raises(SettingError, match="PYJLAD_DUMP_IR=.*cannot write the IR dumps"):
        dump("f", "stage", "x")


def test_pipeline_dumps_every_pass_in_order(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(DUMP_VARIABLE, str(tmp_path))
    pipeline = Pipeline("p", (Pass("a", lambda t, c: t + "a", "text", form="text"), Pass("b", lambda t, c: t + "b", "text", form="text")))
    assert pipeline.run("x", None, label="f/../g") == "xab"
    files = sorted((tmp_path / "f_.._g").iterdir())
    assert [f.name[3:] for f in files] == ["p.input.ll", "p.a.ll", "p.b.ll"]
    assert [f.read_text() for f in files] == ["x", "xa", "xab"]


def test_pipeline_hands_each_pass_its_form_and_parses_only_where_the_form_changes(monkeypatch, tmp_path) -> None:
    from pyjlad.ir import Module
    from pyjlad.ir import pipeline as pipeline_module

    parses = []
    real_parse = pipeline_module.parse
    monkeypatch.setattr(pipeline_module, "parse", lambda text: parses.append(text) or real_parse(text))
    seen = []

    def rename(module, context):
        seen.append(type(module))
        (function,) = module.declarations
        function.symbol = "@" + function.name + "x"
        return module

    def comment(text, context):
        seen.append(type(text))
        return text + "; done\n"

    monkeypatch.setenv(DUMP_VARIABLE, str(tmp_path))
    pipeline = Pipeline("p", (Pass("r1", rename, "names"), Pass("r2", rename, "names"),
                              Pass("c", comment, "comments", form="text"), Pass("r3", rename, "names")))
    out = pipeline.run("declare void @f()\n", None, label="g")
    assert seen == [Module, Module, str, Module]
    assert len(parses) == 2                     # once for r1-r2, once for r3
    assert out == "declare void @fxxx()\n; done\n"
    dumps = [f.read_text() for f in sorted((tmp_path / "g").iterdir())]
    assert dumps == ["declare void @f()\n", "declare void @fx()\n", "declare void @fxx()\n",
                     "declare void @fxx()\n; done\n", "declare void @fxxx()\n; done\n"]


def test_a_pass_form_must_be_module_or_text() -> None:
    with pytest.raises(ValueError, match="form must be"):
        Pass("a", lambda t, c: t, "x", form="bitcode")


def test_gradient_dumps_every_step_from_numbas_module_to_the_derivative(monkeypatch, tmp_path) -> None:
    @numba.njit
    def dumped_fn(x):
        s = 0.0
        for i in range(x.size):
            s += np.sin(x[i]) * x[i]
        return s

    monkeypatch.setenv(DUMP_VARIABLE, str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    x = np.linspace(0.1, 1.0, 5)
    expected = np.cos(x) * x + np.sin(x)
    np.testing.assert_allclose(pyjlad.gradient(dumped_fn, x), expected, rtol=1e-13)
    files = sorted((tmp_path / "pyjlad_dumped_fn").iterdir())
    stages = [f.name.split("-", 1)[1] for f in files]
    portable = [f"portable.{p.name}.ll" for p in PORTABLE.passes]
    copy = [f"enzyme-copy.{p.name}.ll" for p in PORTABLE.passes]
    assert stages == ["portable.input.ll", *portable, "enzyme-copy.input.ll", *copy,
                      "driver.ll", "enzyme.input.ll", "enzyme.output.ll"]
    final = files[len(portable)].read_text()
    assert _llvm_as_15(final).returncode == 0
    assert final == pyjlad.export.export(dumped_fn, (numba.typeof(x),)).module.text
    derivative = files[-1].read_text()
    assert "define" in derivative and "diffe" in derivative  # Enzyme's generated function


def test_dumps_of_a_gradient_that_links_modules_leave_the_gradient_right(monkeypatch, tmp_path) -> None:
    """Enzyme's input is linked IR text when the function calls LAPACK (``np.linalg.inv``): dumped as text.

    Before the fix the dump read that text as bitcode and the gradient failed ("Invalid bitcode signature").
    """
    @numba.njit
    def dumped_inverse_trace(a):
        return np.trace(np.linalg.inv(a))

    monkeypatch.setenv(DUMP_VARIABLE, str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    a = np.array([[4.0, 1.0, 0.5], [0.2, 3.0, 0.1], [0.3, 0.4, 5.0]])
    inverse = np.linalg.inv(a)
    expected = -(inverse @ inverse).T          # d tr(A^-1) / dA = -(A^-2)^T
    np.testing.assert_allclose(pyjlad.gradient(dumped_inverse_trace, a.copy()), expected, rtol=1e-12)
    enzyme_input = next((tmp_path / "pyjlad_dumped_inverse_trace").glob("*-enzyme.input.ll")).read_text()
    assert "define" in enzyme_input and "numba_ez_xxgetri" in enzyme_input


# ------------------------------------------------------------------ target pipelines: NVPTX and Julia's llvmcall
DEVICE_IR = HEADER + """
define double @f(double %x, i32 %n) {
  %a = call double @llvm.sin.f64(double %x)
  %b = call float @erff(float 1.0)
  %c = call double @tanh(double %a)
  %d = call double @llvm.powi.f64.i32(double %c, i32 %n)
  %e = call float @llvm.exp.f32(float %b) ; @tanh( in a comment stays
  %g = call double @llvm.fabs.f64(double %d)
  ret double %g
}
@table = internal constant [1 x ptr] [ptr @tanh]
declare double @llvm.sin.f64(double)
declare double @tanh(double)
declare float @erff(float)
declare double @llvm.powi.f64.i32(double, i32)
declare float @llvm.exp.f32(float)
declare double @llvm.fabs.f64(double)
"""


def test_nvptx_refuses_host_only_calls() -> None:
    from pyjlad.targets.nvptx import DeviceContext, refuse_host_only_calls

    module = parse(DEVICE_IR)
    context = DeviceContext(("llvm.sin.f64", "tanh", "erff", "llvm.powi.f64.i32"), "f")
    assert refuse_host_only_calls(module, context).render() == DEVICE_IR
    with pytest.raises(pyjlad.errors.UnsupportedFunctionError, match="f calls NRT_MemInfo_alloc_aligned.*GPU"):
        refuse_host_only_calls(module, DeviceContext(("tanh", "NRT_MemInfo_alloc_aligned"), "f"))


def test_nvptx_target_and_libdevice_calls() -> None:
    from pyjlad.targets.nvptx import NVPTX_DATALAYOUT, DeviceContext, libdevice_calls, nvptx_target

    context = DeviceContext((), "f")
    targeted = nvptx_target(parse(DEVICE_IR), context).render()
    assert targeted == (f'target datalayout = "{NVPTX_DATALAYOUT}"\ntarget triple = "nvptx64-nvidia-cuda"\n'
                        + DEVICE_IR[len(HEADER):])
    device = libdevice_calls(parse(targeted), context).render()
    body = device[device.index("define"):]
    # every libm call and the intrinsics NVPTX cannot lower call libdevice; llvm.fabs is lowered natively
    assert body == """define double @f(double %x, i32 %n) {
  %a = call double @__nv_sin(double %x)
  %b = call float @__nv_erff(float 1.0)
  %c = call double @__nv_tanh(double %a)
  %d = call double @__nv_powi(double %c, i32 %n)
  %e = call float @__nv_expf(float %b) ; @tanh( in a comment stays
  %g = call double @llvm.fabs.f64(double %d)
  ret double %g
}
@table = internal constant [1 x ptr] [ptr @tanh]
declare double @__nv_sin(double)
declare double @__nv_tanh(double)
declare float @__nv_erff(float)
declare double @__nv_powi(double, i32)
declare float @__nv_expf(float)
declare double @llvm.fabs.f64(double)
"""


def test_nvptx_dedupes_declarations_and_runs_in_order() -> None:
    from pyjlad.targets.nvptx import NVPTX, DeviceContext, dedupe_device_declarations

    # @llvm.sin.f64 and its libm twin both became @__nv_sin: both declared now
    twice = "declare double @__nv_sin(double)\ndeclare double @__nv_cos(double)\ndeclare double @__nv_sin(double)\n"
    out = dedupe_device_declarations(parse(twice), DeviceContext()).render()
    assert out == "declare double @__nv_sin(double)\ndeclare double @__nv_cos(double)\n"
    assert [p.name for p in NVPTX.passes] == ["refuse-host-only-calls", "nvptx-target", "libdevice-calls",
                                              "dedupe-declarations"]
    assert all(p.form == "module" for p in NVPTX.passes)
    both = DEVICE_IR.replace("@llvm.fabs.f64", "@sin")   # sin and llvm.sin.f64 both become __nv_sin
    device = NVPTX.run(both, DeviceContext(("llvm.sin.f64", "sin")), label="x")
    assert device.count("declare double @__nv_sin(double)") == 1 and "@sin" not in device


LLVMCALL_IR = HEADER + f"""define i32 @entry() {{
  call void @{RUNTIME_CALL_DTOR}(ptr null)
  %f = call i32 @numba_fatal_error()
  %h = call i32 @helper()
  ret i32 0
}}
define linkonce_odr i32 @helper() {{
  ret i32 1
}}
define i32 @other() {{
  ret i32 2
}}
declare void @{RUNTIME_CALL_DTOR}(ptr) nofree "enzyme_inactive"
declare i32 @numba_fatal_error()
"""


def test_llvmcall_drop_target_lines() -> None:
    from pyjlad.targets.llvmcall import drop_target_lines

    assert drop_target_lines(parse(LLVMCALL_IR), "entry").render() == LLVMCALL_IR[len(HEADER):]


def test_llvmcall_define_runtime_hooks() -> None:
    from pyjlad.targets.llvmcall import define_runtime_hooks

    hooked = define_runtime_hooks(parse(LLVMCALL_IR), "entry").render()
    assert hooked == LLVMCALL_IR.replace(
        f'declare void @{RUNTIME_CALL_DTOR}(ptr) nofree "enzyme_inactive"\n',
        f"define internal void @{RUNTIME_CALL_DTOR}(ptr %mi) {{\n  call void @free(ptr %mi)\n  ret void\n}}\n",
    ).replace("declare i32 @numba_fatal_error()\n",
              "define internal i32 @numba_fatal_error() {\n  call void @abort()\n  unreachable\n}\n"
              ) + "declare void @free(ptr)\ndeclare void @abort()\n"
    assert _llvm_as_15(hooked).returncode == 0


def test_llvmcall_runtime_hooks_declare_free_and_abort_once() -> None:
    """A module that already declares ``free`` (with attributes, as LLVM prints libc's) or ``abort`` gets no
    second declaration (LLVM rejects a function declared twice); a hook with parameter attributes is defined."""
    from pyjlad.targets.llvmcall import define_runtime_hooks

    module = (f"define void @entry(ptr %p) {{\n  call void @{RUNTIME_CALL_DTOR}(ptr %p)\n  call void @free(ptr %p)\n"
              "  %s = call i32 @numba_fatal_error()\n  ret void\n}\n"
              f"declare void @{RUNTIME_CALL_DTOR}(ptr noundef) #0\n"
              "declare void @free(ptr allocptr nocapture noundef) #1\ndeclare i32 @numba_fatal_error()\n"
              "declare void @abort() #2\n"
              "attributes #0 = { nounwind }\nattributes #1 = { nounwind }\nattributes #2 = { noreturn }\n")
    hooked = define_runtime_hooks(parse(module), "entry").render()
    assert hooked.count("@free(ptr") == 3 and hooked.count("declare void @abort()") == 1
    assert f"define internal void @{RUNTIME_CALL_DTOR}(ptr %mi) {{" in hooked
    assert "define internal i32 @numba_fatal_error() {" in hooked
    assert _llvm_as_15(hooked).returncode == 0
    other = "declare i32 @numba_fatal_error(i32)\n"   # not the runtime's signature: left to unresolvable_symbols
    assert define_runtime_hooks(parse(other), "entry").render() == other


def test_llvmcall_internalize() -> None:
    from pyjlad.targets.llvmcall import internalize

    module = ('@g = global i64 1\n@h = hidden unnamed_addr constant i8 2\n@k = linkonce_odr global i8 0\n'
              '@e = external global i8\n@a = alias i64, ptr @g\n'
              "define i32 @entry() {\n  ret i32 0\n}\n"
              "define dso_local hidden double @helper(double %x) #0 {\n  ret double %x\n}\n"
              "define linkonce_odr i32 @shared() {\n  ret i32 1\n}\n"
              "declare double @sin(double)\nattributes #0 = { nounwind }\n")
    assert internalize(parse(module), "entry").render().splitlines() == [
        "@g = internal global i64 1", "@h = internal unnamed_addr constant i8 2", "@k = linkonce_odr global i8 0",
        "@e = external global i8", "@a = internal alias i64, ptr @g",
        "define i32 @entry() {", "  ret i32 0", "}",
        "define internal dso_local double @helper(double %x) #0 {", "  ret double %x", "}",
        "define linkonce_odr i32 @shared() {", "  ret i32 1", "}",
        "declare double @sin(double)", "attributes #0 = { nounwind }",
    ]


def test_llvmcall_pipeline() -> None:
    from pyjlad.targets.llvmcall import LLVMCALL, llvmcall_module

    assert [p.name for p in LLVMCALL.passes] == ["drop-target-lines", "define-runtime-hooks", "internalize",
                                                 "own-trip-counts"]
    assert [p.form for p in LLVMCALL.passes] == ["module", "module", "module", "text"]
    internal = LLVMCALL.run(LLVMCALL_IR, "entry", label="x")
    assert internal.startswith("define i32 @entry()") and "define internal i32 @other()" in internal
    assert "define linkonce_odr i32 @helper()" in internal  # a linkage of its own is kept
    assert internal == llvmcall_module(LLVMCALL_IR).replace("define i32 @other", "define internal i32 @other")
    assert _llvm_as_15(internal).returncode == 0


def test_llvmcall_loops_get_trip_counts_of_their_own() -> None:
    from pyjlad.targets.llvmcall import LLVMCALL

    text = HEADER + """define void @entry(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i.next, %loop ]
  %i.next = add i64 %i, 1
  %c = icmp eq i64 %i.next, %n
  br i1 %c, label %out, label %loop
out:
  ret void
}
"""
    out = LLVMCALL.run(text, "entry", label="x")
    assert "%pj.trip.0 = freeze i64 %n" in out and "icmp eq i64 %i.next, %pj.trip.0" in out
    assert _llvm_as_15(out).returncode == 0


def test_nested_drivers_keeps_a_declaration_of_each_known_derivative(monkeypatch) -> None:
    from pyjlad import nested

    sweep = nested.NestedSweep(None, "reverse", (), False)    # the registry holds it weakly: keep it
    monkeypatch.setitem(nested._SWEEPS, "pyjlad_g_reverse_1", sweep)
    text = ("define internal i32 @pyjlad_g_reverse_1(ptr noalias %a, double %x) local_unnamed_addr #0 {\n"
            "entry:\n  %r = call double @helper(double %x)\n  ret i32 0\n}\n"
            "define i32 @caller(ptr %a) {\nentry:\n  %s = call i32 @pyjlad_g_reverse_1(ptr %a, double 1.0)\n"
            "  ret i32 %s\n}\n")
    out = _apply(nested.declare_nested_drivers, text, _context())
    assert out.splitlines()[0] == "declare i32 @pyjlad_g_reverse_1(ptr noalias %a, double %x) local_unnamed_addr #0"
    assert "@helper" not in out                                  # its body, and what it reached, are gone
    assert "define i32 @caller(ptr %a) {" in out                 # other definitions untouched
