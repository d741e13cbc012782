"""``pyjlad.branch_selects``: a pointer ``select`` on its block's branch condition, read as its operand on each
side of the branch, and only where the branch has decided it.

Each rewritten module is checked by LLVM 15's verifier (``opt -passes=verify``), so a replacement that broke
dominance (a read no longer dominated by its value) fails here. The derivatives this rewrite makes possible
(Numba's debug information) are checked against closed forms in ``tests/test_debug_info.py``.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pyjlad.branch_selects import resolve_branch_selects

OPT = shutil.which("opt-15")


def _verified(define: str) -> str:
    """``define`` as rewritten, after LLVM's verifier accepted it (declarations of the callees added)."""
    out = resolve_branch_selects(define)
    if OPT is None:
        pytest.fail("opt-15 is not installed (bash scripts/setup.sh)")
    module = "declare void @use(ptr)\n\n" + out
    result = subprocess.run([OPT, "-opaque-pointers", "-passes=verify", "-disable-output"], input=module,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return out


def _function(*body: str, params: str = "i1 %ok, ptr %a, ptr %b") -> str:
    return "\n".join([f"define void @f({params}) {{", *body, "}"])


def test_both_sides_read_their_operand_and_the_select_goes():
    out = _verified(_function(
        "entry:", "  %a.1 = load ptr, ptr %a, align 8", "  %b.1 = load ptr, ptr %b, align 8",
        "  %s = select i1 %ok, ptr %a.1, ptr %b.1, !prof !0", "  br i1 %ok, label %yes, label %no, !prof !0",
        "yes:", "  call void @use(ptr %s)", "  br label %after", "after:", "  call void @use(ptr %s)", "  ret void",
        "no:", "  call void @use(ptr %s)", "  ret void").replace("!prof !0", "").replace(", \n", "\n"))
    assert "select" not in out
    assert out.count("call void @use(ptr %a.1)") == 2 and out.count("call void @use(ptr %b.1)") == 1


def test_a_read_both_sides_reach_keeps_the_select():
    """``join`` has two predecessors: neither edge dominates it."""
    source = _function(
        "entry:", "  %s = select i1 %ok, ptr %a, ptr %b", "  br i1 %ok, label %yes, label %no",
        "yes:", "  call void @use(ptr %s)", "  br label %join", "no:", "  br label %join",
        "join:", "  call void @use(ptr %s)", "  ret void")
    out = _verified(source)
    assert "%s = select" in out
    assert "call void @use(ptr %a)" in out and out.count("call void @use(ptr %s)") == 1


def test_phi_values_along_a_decided_edge():
    """A ``phi``'s value from a block of one side, or along the edge itself, is that side's operand; from the
    other side it stays."""
    out = _verified(_function(
        "entry:", "  %s = select i1 %ok, ptr %a, ptr %b", "  br i1 %ok, label %yes, label %no",
        "yes:", "  br label %join", "no:", "  br label %join",
        "join:", "  %p = phi ptr [ %s, %yes ], [ %s, %no ]", "  call void @use(ptr %p)", "  ret void"))
    assert "%p = phi ptr [ %a, %yes ], [ %b, %no ]" in out and "select" not in out


def test_target_with_another_predecessor_is_not_decided():
    """``yes`` is also reached from ``other``, where ``%s`` was never chosen by the branch."""
    source = _function(
        "entry:", "  br i1 %c, label %head, label %other",
        "head:", "  %s = select i1 %ok, ptr %a, ptr %b", "  br i1 %ok, label %yes, label %no",
        "other:", "  br label %no",
        "yes:", "  call void @use(ptr %s)", "  ret void",
        "no:", "  ret void", params="i1 %ok, i1 %c, ptr %a, ptr %b")
    out = _verified(source)
    assert "call void @use(ptr %a)" in out  # ``yes`` has only ``head`` before it
    source = source.replace("other:\n  br label %no", "other:\n  br label %yes").replace(
        "yes:\n  call void @use(ptr %s)", "yes:\n  %q = phi ptr [ %s, %head ], [ null, %other ]\n  call void @use(ptr %q)")
    # ``yes`` now has two predecessors: nothing it dominates is rewritten (the phi's value keeps the select)
    out = _verified(source)
    assert "[ %s, %head ]" in out and "%s = select" in out


def test_in_a_loop_the_read_takes_the_operand_of_the_same_iteration():
    """``%a.1`` is loaded again each iteration, before the ``select``: the read after the branch still takes
    the value this iteration chose from."""
    out = _verified(_function(
        "entry:", "  br label %loop",
        "loop:", "  %a.1 = load ptr, ptr %a, align 8", "  br label %check",
        "check:", "  %s = select i1 %ok, ptr %a.1, ptr %b", "  br i1 %ok, label %yes, label %out",
        "yes:", "  call void @use(ptr %s)", "  br label %loop",
        "out:", "  call void @use(ptr %s)", "  ret void"))
    assert "call void @use(ptr %a.1)" in out and "call void @use(ptr %b)" in out and "select" not in out


def test_float_selects_are_not_rewritten():
    source = "\n".join([
        "define double @f(i1 %ok, double %a, double %b) {", "entry:", "  %s = select i1 %ok, double %a, double %b",
        "  br i1 %ok, label %yes, label %no", "yes:", "  ret double %s", "no:", "  ret double %s", "}"])
    assert resolve_branch_selects(source) == source
