"""``pyjlad.excinfo_slots.split_result_slots``: a stack slot that several out-of-line Numba calls return through
gets one ``alloca`` per web of accesses (a value written and every access it reaches), and only where no value
crosses from one web to another.

Each rewritten function is checked by LLVM 15's verifier. The derivatives this makes possible (Numba's debug
information: ``jvp`` of a masked assignment) are checked against closed forms in ``tests/test_debug_info.py``.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from pyjlad.excinfo_slots import split_result_slots

NUMBA_CALLS = {"@alloc_f64", "@alloc_bool"}
DECLARATIONS = "declare i32 @alloc_f64(ptr, ptr)\ndeclare i32 @alloc_bool(ptr, ptr)\ndeclare void @use(ptr)\n" \
               "declare void @llvm.lifetime.start.p0(i64, ptr)\n\n"


def _verified(define: str) -> str:
    out = split_result_slots(define, NUMBA_CALLS)
    opt = shutil.which("opt-15")
    if opt is None:
        pytest.fail("opt-15 is not installed (bash scripts/setup.sh)")
    result = subprocess.run([opt, "-opaque-pointers", "-passes=verify", "-disable-output"],
                            input=DECLARATIONS + out, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return out


def _two_calls(second_block: list[str], first_block: list[str] | None = None) -> str:
    first = first_block or ["  store ptr null, ptr %r, align 8", "  %s = call i32 @alloc_f64(ptr nonnull %r, ptr null)",
                            "  %a = load ptr, ptr %r, align 8", "  call void @use(ptr %a)"]
    return "\n".join(["define void @f() {", "entry:", "  %r = alloca ptr, align 8", *first, "  br label %next",
                      "next:", *second_block, "  ret void", "}"])


SECOND = ["  call void @llvm.lifetime.start.p0(i64 8, ptr %r)", "  store ptr null, ptr %r, align 8",
          "  %t = call i32 @alloc_bool(ptr nonnull %r, ptr null)", "  %b = load ptr, ptr %r, align 8",
          "  call void @use(ptr %b)"]


def test_each_blocks_calls_get_their_own_slot():
    out = _verified(_two_calls(SECOND))
    assert "%r.pyjlad.slot1 = alloca ptr, align 8" in out
    assert "call i32 @alloc_bool(ptr nonnull %r.pyjlad.slot1, ptr null)" in out
    assert "%b = load ptr, ptr %r.pyjlad.slot1" in out
    assert "lifetime.start.p0(i64 8, ptr %r)" in out  # markers keep the slot (down-level drops them all)
    assert "call i32 @alloc_f64(ptr nonnull %r, ptr null)" in out and "%a = load ptr, ptr %r," in out


@pytest.mark.parametrize("second, why", [
    (SECOND[2:], "the block reads (passes) the slot before storing into it: its value may come from the first"),
    ([SECOND[1], "  %q = getelementptr i8, ptr %r, i64 8", *SECOND[2:]], "an address derived from the slot"),
    ([SECOND[1], "  store ptr %r, ptr %r, align 8", *SECOND[2:]], "the slot's address stored"),
    ([SECOND[1], "  %t = call i32 @alloc_bool(ptr nonnull %r, ptr %r)", *SECOND[3:]], "passed twice to one call"),
    ([SECOND[1], "  call void @use(ptr %r)", *SECOND[2:]], "passed to a function that is not Numba's"),
    (["  store i32 0, ptr %r, align 8", *SECOND[2:]], "a store that overwrites part of the slot"),
])
def test_shapes_that_keep_one_slot(second, why):
    source = _two_calls(second)
    assert split_result_slots(source, NUMBA_CALLS) == source, why


def test_segments_within_one_block():
    """A broadcast shape (an integer) and then an array returned through one slot in one block: two segments,
    each opening with its store."""
    first = ["  store i64 0, ptr %r, align 8", "  %s = call i32 @alloc_f64(ptr nonnull %r, ptr null)",
             "  %n = load i64, ptr %r, align 8", "  store ptr null, ptr %r, align 8",
             "  %s2 = call i32 @alloc_bool(ptr nonnull %r, ptr null)", "  %a = load ptr, ptr %r, align 8",
             "  call void @use(ptr %a)"]
    out = _verified(_two_calls(SECOND, first))
    assert "%n = load i64, ptr %r," in out and "%a = load ptr, ptr %r.pyjlad.slot1," in out
    assert "%b = load ptr, ptr %r.pyjlad.slot2," in out


def test_a_value_reaching_another_block_keeps_its_web():
    """The call's result is loaded in the next block, and a third block stores and calls again: the first two
    blocks' accesses are one web (one slot), the third's another."""
    source = "\n".join([
        "define void @f(i1 %c) {", "entry:", "  %r = alloca ptr, align 8", "  store ptr null, ptr %r, align 8",
        "  %s = call i32 @alloc_f64(ptr nonnull %r, ptr null)", "  br i1 %c, label %read, label %again",
        "read:", "  %a = load ptr, ptr %r, align 8", "  call void @use(ptr %a)", "  br label %again",
        "again:", *SECOND[1:], "  ret void", "}"])
    out = _verified(source)
    assert "%a = load ptr, ptr %r," in out and "%b = load ptr, ptr %r.pyjlad.slot1," in out


def test_values_meeting_at_a_join_share_a_web():
    """Two stores on the two sides of a branch both reach one load: one web, nothing to split there."""
    source = "\n".join([
        "define void @f(i1 %c) {", "entry:", "  %r = alloca ptr, align 8", "  br i1 %c, label %one, label %two",
        "one:", "  store ptr null, ptr %r, align 8", "  %s = call i32 @alloc_f64(ptr nonnull %r, ptr null)",
        "  br label %join", "two:", "  store ptr null, ptr %r, align 8",
        "  %t = call i32 @alloc_bool(ptr nonnull %r, ptr null)", "  br label %join",
        "join:", "  %a = load ptr, ptr %r, align 8", "  call void @use(ptr %a)", "  ret void", "}"])
    assert split_result_slots(source, NUMBA_CALLS) == source


def test_a_single_call_keeps_its_slot():
    source = _two_calls(["  call void @use(ptr null)"])
    assert split_result_slots(source, NUMBA_CALLS) == source
