"""Derivatives are compiled to machine code in a child process: an LLVM crash there is an EnzymeError.

What is checked, with the real LLVM (llvmlite's, the one Numba compiles with) and no mocks:

* the child's machine code is byte for byte the code Numba compiles in-process from the same module
  (the child replays Numba's pipeline with Numba's settings; a Numba that changes them fails here);
* modules that really crash LLVM, sent through the real loading path (``embedded._load_library``, the
  step a gradient's module takes after Enzyme), become an ``EnzymeError`` naming the signal, with
  LLVM's message in ``diagnostics``, and this process goes on computing gradients: the GVN assertion
  Enzyme's output reached in the optimizer (``indexing/setitem_slice/1d``, reduced with llvm-reduce)
  and a fatal error of the code generator;
* :func:`native.drop_invariant_groups`, the fix of the first, makes the same module compile;
* a failure that is not a crash and a compile slower than ``PYJLAD_OPT_TIMEOUT`` are EnzymeErrors too.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest
from numba import njit
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

import pyjlad
from pyjlad import cache
from pyjlad.engines import embedded, native, objects

#: A vectorizable loop calling an internal helper: the function, cheap and full pipelines and the
#: code generator all change it, so a setting the child replays differently shows in the machine code.
LOOP_IR = """
define internal double @square(double %v) {
  %s = fmul double %v, %v
  ret double %s
}

define double @driver(ptr %x, i64 %n) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %acc = phi double [ 0.0, %entry ], [ %sum, %loop ]
  %p = getelementptr double, ptr %x, i64 %i
  %v = load double, ptr %p, align 8
  %s = call double @square(double %v)
  %sum = fadd fast double %acc, %s
  %next = add nuw nsw i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  %r = phi double [ 0.0, %entry ], [ %sum, %loop ]
  ret double %r
}
"""

#: The reverse sweep of ``indexing/setitem_slice/1d`` reduced by llvm-reduce-22 (then by hand) to what
#: still aborts LLVM 22 in Numba's pipeline. Enzyme's cache pointer is ``undef`` on the path where the
#: forward sweep did not allocate the cache (SROA of the null-initialized cache slot); the reverse loop
#: loads the cache ``!invariant.group``. Once GVN has found the allocating path dead (the two frozen
#: trip counts are equal), the load's address folds to a constant, and GVN's memory dependence query
#: walks that constant's use list: Value.h: Assertion `hasUseList()' failed. opt-22 (no assertions)
#: and the verifier accept the module.
GVN_CRASH_IR = """
declare ptr @malloc(i64)

define void @driver(i64 %n, ptr %out) {
entry:
  %n2 = add nsw i64 %n, 2
  %a.n = sub nsw i64 %n2, 1
  %b.n = add nsw i64 %n, 1
  %a.fr = freeze i64 %a.n
  %b.fr = freeze i64 %b.n
  %a = icmp sgt i64 %a.fr, 1
  %b = icmp sgt i64 %b.fr, 1
  br i1 %a, label %check, label %exit

check:
  br i1 %b, label %join, label %alloc

alloc:
  %cache = tail call noalias nonnull ptr @malloc(i64 0)
  br label %join

exit:
  ret void

join:
  %c = phi ptr [ %cache, %alloc ], [ undef, %check ]
  br label %reverse

reverse:
  %iv.in = phi i64 [ %iv, %reverse ], [ 0, %join ]
  %iv = add nsw i64 %iv.in, 1
  %adj.p = getelementptr double, ptr %out, i64 %iv
  %c.p = getelementptr inbounds double, ptr %c, i64 %iv
  %v = load double, ptr %c.p, align 8, !invariant.group !0
  store double %v, ptr %adj.p, align 8
  br label %reverse
}

!0 = distinct !{}
"""

#: An intrinsic of another target: the x86 instruction selector has no pattern for it
#: ("LLVM ERROR: Cannot select", then abort).
CODEGEN_CRASH_IR = """
declare i64 @llvm.aarch64.get.fpcr()

define i64 @driver() {
  %v = call i64 @llvm.aarch64.get.fpcr()
  ret i64 %v
}
"""


def _bitcode(text: str) -> bytes:
    return llvm.parse_assembly(text, context=llvm.create_context()).as_bitcode()


def _in_process(bitcode: bytes, name: str) -> tuple[bytes, str]:
    """The object and linking module Numba's own code library makes of ``bitcode`` in this process."""
    with global_compiler_lock:
        library = cpu_target.target_context.codegen().create_library(name)
        library.enable_object_caching()
        library.add_llvm_module(llvm.parse_bitcode(bitcode))
        library.finalize()
        _, _, (obj, shared) = library.serialize_using_object_code()
    return obj, str(llvm.parse_bitcode(shared))


def _load(text: str) -> None:
    """Load ``text`` as a derivative's module through the real path (the disk cache is off)."""
    embedded._load_library(cache.cache_key("test-native", text), lambda: _bitcode(text), "driver", "the test module")


@pytest.fixture(autouse=True)
def _no_disk_cache(monkeypatch):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")


def _assert_gradients_still_work() -> None:
    x = np.linspace(-1.0, 1.0, 5)
    before = x.copy()
    np.testing.assert_allclose(pyjlad.gradient(lambda v: np.sum(np.sin(v) * v), x),
                               np.cos(before) * before + np.sin(before), rtol=1e-13)
    assert x.tobytes() == before.tobytes()


def test_the_child_compiles_what_numba_compiles():
    prepared, declared, _ = objects._prepare_module(_bitcode(LOOP_IR), "driver")
    assert declared == []
    with native.start() as compiler:
        obj, shared = compiler.compile(prepared, "driver", "the loop")
    want_obj, want_shared = _in_process(prepared, "driver")
    assert obj == want_obj
    assert str(llvm.parse_bitcode(shared)) == want_shared
    assert "linkonce_odr" in want_shared and "<4 x double>" in want_shared  # external made weak; vectorized


def test_an_llvm_assertion_in_the_optimizer_is_an_enzyme_error():
    with pytest.raises(pyjlad.EnzymeError) as caught:
        _load(GVN_CRASH_IR)
    first = str(caught.value).splitlines()[0]
    assert first.startswith("LLVM crashed (SIGABRT) while compiling the test module to machine code")
    assert "Assertion `hasUseList()' failed" in caught.value.diagnostics
    assert "hasUseList" in str(caught.value)  # the tail of LLVM's output is in the message too
    _assert_gradients_still_work()


def test_a_fatal_error_of_the_code_generator_is_an_enzyme_error():
    with pytest.raises(pyjlad.EnzymeError) as caught:
        _load(CODEGEN_CRASH_IR)
    assert str(caught.value).startswith("LLVM crashed (SIGABRT) while compiling the test module")
    assert "LLVM ERROR: Cannot select" in caught.value.diagnostics
    _assert_gradients_still_work()


def test_without_invariant_groups_the_crashing_module_compiles():
    fixed = native.drop_invariant_groups(_bitcode(GVN_CRASH_IR))
    text = str(llvm.parse_bitcode(fixed, context=llvm.create_context()))
    assert "!invariant.group" not in text
    assert "load double, ptr %c.p, align 8\n" in text and "store double" in text  # nothing else removed
    with native.start() as compiler:
        obj, _ = compiler.compile(objects._prepare_module(fixed, "driver")[0], "driver", "the fixed module")
    assert obj.startswith(b"\x7fELF")
    unchanged = _bitcode(LOOP_IR)
    assert native.drop_invariant_groups(unchanged) is unchanged
    truncated = unchanged[: len(unchanged) // 2 & ~3]  # left for the cache's check of opt's output to report
    assert native.drop_invariant_groups(truncated) is truncated


def test_a_module_llvm_cannot_read_is_an_enzyme_error_not_a_crash():
    with native.start() as compiler, pytest.raises(pyjlad.EnzymeError) as caught:
        compiler.compile(b"BC\xc0\xde" + b"\x00" * 12, "driver", "the damaged module")
    assert str(caught.value).startswith("LLVM failed (exit status 1) while compiling the damaged module")
    assert "Traceback" in caught.value.diagnostics


def test_a_compile_past_the_timeout_is_an_enzyme_error(monkeypatch):
    monkeypatch.setenv("PYJLAD_OPT_TIMEOUT", "0.001")
    with native.start() as compiler, pytest.raises(pyjlad.EnzymeError, match="within 0 s"):
        compiler.compile(_bitcode(LOOP_IR), "driver", "the loop")


def test_an_unused_child_ends_quietly():
    compiler = native.start()
    compiler.close()
    assert compiler._proc.returncode == 3


def test_the_host_cpu_attributes_opt_writes_are_dropped_before_numba_compiles_the_derivative(capfd):
    # opt-15 -mcpu=native names this CPU's features as LLVM 15 knows them; Numba's LLVM warned on stderr about
    # the ones it no longer knows ('-avx512pf' is not a recognized feature) wherever it compiled a derivative
    # into a caller. They go; Numba's target machine (the same host CPU) decides.
    text = ('define double @f(double %x) #0 {\n  %y = fmul double %x, %x\n  ret double %y\n}\n\n'
            'attributes #0 = { nounwind "target-cpu"="znver3" "target-features"="+avx2,-avx512pf" }\n')
    fixed = native.drop_invariant_groups(_bitcode(text))
    out = str(llvm.parse_bitcode(fixed, context=llvm.create_context()))
    assert '"target-cpu"' in text and '"target-cpu"' not in out and '"target-features"' not in out
    assert "nounwind" in out.split("attributes #0 = ", 1)[1]

    @njit
    def f(x, a):
        return np.sum(np.sin(x) * a)

    capfd.readouterr()
    xs = np.linspace(0.0, 1.0, 6).reshape(2, 3)
    got = pyjlad.vmap(pyjlad.grad(f), in_axes=(0, None))(xs, 2.0)
    np.testing.assert_allclose(got, 2.0 * np.cos(xs), rtol=1e-14)
    assert "is not a recognized feature" not in capfd.readouterr().err
