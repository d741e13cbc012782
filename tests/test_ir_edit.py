"""The module edits of :mod:`pyjlad.ir.edit` on small hand-written IR: what they change, and that nothing
else changes (the expected texts are written from the helpers' contracts)."""

from __future__ import annotations

import subprocess

import pytest

from pyjlad.errors import IRError
from pyjlad.ir import parse
from pyjlad.ir.edit import declare, drop_repeated_declarations, rename_callees

MODULE = """; ModuleID = '@sin(double)'
@msg = internal constant [10 x i8] c"@sin(x) \\22\\00"
@fp = internal global ptr @sin
define double @f(double %x) {
entry:
  %a = call double @sin(double %x) ; call @sin(
  %b = tail call fast double @"cos"(double %a)
  %c = call double @g(ptr @sin, double %b)
  ret double %c
}
define double @g(ptr %p, double %y) {
  ret double %y
}
declare double @sin(double)
declare double @"cos"(double)
!0 = !{ptr @sin}
"""


def _llvm_as_15(text: str) -> subprocess.CompletedProcess:
    return subprocess.run(["llvm-as-15", "-o", "/dev/null", "-"], input=text.encode(), capture_output=True)


def test_rename_callees_renames_calls_and_headers_only() -> None:
    assert _llvm_as_15(MODULE).returncode == 0
    renamed = rename_callees(parse(MODULE), {"sin": "my sin", "cos": "__nv_cos"}.get).render()
    # calls and the declarations' names; never c"..." data, comments, or a function used as a value
    assert renamed == (MODULE.replace("call double @sin(double %x)", 'call double @"my sin"(double %x)')
                       .replace("declare double @sin(", 'declare double @"my sin"(')
                       .replace('@"cos"(', "@__nv_cos("))
    assert "ptr @sin" in renamed and 'c"@sin(x) ' in renamed and "; call @sin(" in renamed


def test_rename_callees_renames_definitions_and_leaves_unknown_names() -> None:
    renamed = rename_callees(parse(MODULE), lambda name: "h" if name == "g" else None).render()
    assert renamed == MODULE.replace("@g(", "@h(")
    assert rename_callees(parse(MODULE), lambda name: None).render() == MODULE


def test_drop_repeated_declarations_keeps_the_first_of_each() -> None:
    text = ("declare double @a(double)\ndefine double @a.user() {\n  ret double 0.0\n}\n"
            "declare double @b(double) #0\ndeclare double @a(double) #0\ndeclare double @b(double)\n")
    assert drop_repeated_declarations(parse(text)).render() == (
        "declare double @a(double)\ndefine double @a.user() {\n  ret double 0.0\n}\ndeclare double @b(double) #0\n")


def test_declare_appends_only_missing_functions() -> None:
    module = parse("define void @abort() {\n  unreachable\n}\ndeclare void @free(ptr nocapture)")
    assert not module.trailing_newline
    assert declare(module, "declare void @abort()") is False      # defined
    assert declare(module, "declare void @free(ptr)") is False     # declared, other attributes
    assert declare(module, "declare ptr @malloc(i64)") is True
    assert module.render() == ("define void @abort() {\n  unreachable\n}\ndeclare void @free(ptr nocapture)\n"
                               "declare ptr @malloc(i64)\n")
    for bad in ("define void @x() {\n}", "@g = global i8 0", "declare void @a()\ndeclare void @b()"):
        with pytest.raises(IRError, match="not a declaration"):
            declare(module, bad)
