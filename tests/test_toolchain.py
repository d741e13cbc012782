"""The Enzyme toolchain verifies itself, and Enzyme failures never kill Python."""

from __future__ import annotations

import pytest

from pyjlad.errors import EnzymeError
from pyjlad.refusals import out_of_resources
from pyjlad.toolchain import Toolchain, locate

# Enzyme cannot differentiate through a function it cannot see and that has
# no derivative rule: it reports an error instead of guessing.
OPAQUE_CALL_IR = """
declare double @mystery(double)
define double @f(double %x) {
  %y = call double @mystery(double %x)
  ret double %y
}
declare double @__enzyme_autodiff(...)
define double @df(double %x) {
  %r = call double (...) @__enzyme_autodiff(ptr @f, double %x)
  ret double %r
}
"""


def test_self_test_differentiates_x_squared() -> None:
    locate().self_test()


def test_enzyme_error_becomes_a_python_exception() -> None:
    with pytest.raises(EnzymeError, match="mystery") as info:
        locate().run(OPAQUE_CALL_IR, "enzyme,default<O2>", what="an opaque call")
    assert "mystery" in info.value.diagnostics


def test_invalid_ir_becomes_a_python_exception() -> None:
    with pytest.raises(EnzymeError, match="failed"):
        locate().run("this is not LLVM IR", "enzyme", what="garbage")


# LLVM 22's one-argument lifetime marker is malformed for LLVM 15; opt-15 with
# Enzyme segfaults on it (the reason pyjlad's portability layer drops them).
SEGFAULT_IR = """
declare void @llvm.lifetime.start.p0(ptr)
define double @f(double %x) {
  %p = alloca double
  call void @llvm.lifetime.start.p0(ptr %p)
  store double %x, ptr %p
  %y = load double, ptr %p
  %z = fmul double %y, %y
  ret double %z
}
declare double @__enzyme_autodiff(...)
define double @df(double %x) {
  %r = call double (...) @__enzyme_autodiff(ptr @f, double %x)
  ret double %r
}
"""


def test_segfault_inside_enzyme_is_an_exception() -> None:
    with pytest.raises(EnzymeError, match="crashed with signal 11"):
        locate().run(SEGFAULT_IR, "enzyme", what="a module that crashes opt")
    locate().self_test()  # still fine afterwards


def test_an_opt_killed_by_the_system_is_reported_as_out_of_memory(tmp_path) -> None:
    # The kernel's out-of-memory killer ends opt with SIGKILL when the machine's memory runs out before opt reaches
    # PYJLAD_OPT_MEMORY (a 10-step Kalman recursion did so beside a test run): an opt that gets SIGKILL stands in
    # for it. The build then stops as out of memory (not "no construct identified", not retried).
    killed = tmp_path / "opt"
    killed.write_text("#!/bin/sh\ncat > /dev/null\nkill -9 $$\n")
    killed.chmod(0o755)
    with pytest.raises(EnzymeError) as raised:
        Toolchain(opt=killed, plugin=locate().plugin).run(SEGFAULT_IR, "enzyme", what="kalman")
    first = str(raised.value).splitlines()[0]
    assert first.startswith("Enzyme ran out of memory differentiating kalman: the system killed it (signal 9)")
    assert "PYJLAD_OPT_MEMORY" in first and "smaller pieces" in first
    assert out_of_resources(raised.value) == first


_TWO_MODULES = ["define double @g(double %x) {\n  ret double %x\n}\n",
                "declare double @g(double)\ndefine double @f(double %x) {\n  %y = call double @g(double %x)\n  ret double %y\n}\n"]


def test_link_returns_bitcode_unless_text_is_asked_for() -> None:
    toolchain = locate()
    assert toolchain.link(_TWO_MODULES).startswith(b"BC\xc0\xde")     # LLVM's bitcode magic
    text = toolchain.link(_TWO_MODULES, text=True).decode()
    assert "define double @g(double %x)" in text and "define double @f(double %x)" in text
