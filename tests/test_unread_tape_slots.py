"""pyjlad.unread_tape_slots: which of Enzyme's from-stack allocations go back on the stack, and which stay.

Only a ``malloc`` marked ``!enzyme_fromstack``, in its function's entry block, stored once into a field of a
tape, never freed, whose field no instruction of the module may read, becomes an ``alloca``; every other shape
is left as Enzyme wrote it (a slot read by the reverse pass on the stack of a returned function would be a
dangling read).
"""

from __future__ import annotations

import pytest

from pyjlad.unread_tape_slots import unread_slots_on_the_stack

TAPE = "{ ptr, i64, ptr }"


def _module(augmented_body: list[str], reverse_body: list[str]) -> str:
    return "\n".join(["define internal void @augmented_g(ptr %p) {", "entry:", "  ret void", "}",
        f"define internal {TAPE} @augmented_f(ptr %t) {{", "entry:", *augmented_body,
        f"  ret {TAPE} zeroinitializer", "}",
        f"define internal void @diffef({TAPE} %tapeArg, ptr %tp) {{", "entry:", *reverse_body, "  ret void", "}", ""])


SLOT = ["  %m = tail call noalias nonnull ptr @malloc(i64 72), !enzyme_cache_alloc !1, !enzyme_fromstack !2",
        f"  %s = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 2", "  store ptr %m, ptr %s, align 8",
        "  store i64 1, ptr %m, align 8"]


def test_an_unread_slot_goes_back_on_the_stack() -> None:
    text = _module(SLOT, [f"  %x = extractvalue {TAPE} %tapeArg, 0", f"  %y = extractvalue {TAPE} %tapeArg, 1"])
    out = unread_slots_on_the_stack(text)
    assert "  %m = alloca i8, i64 72, align 16" in out.splitlines()
    assert out.replace("  %m = alloca i8, i64 72, align 16", SLOT[0]) == text  # nothing else changed


@pytest.mark.parametrize("reverse", [
    [f"  %x = extractvalue {TAPE} %tapeArg, 2"],  # the reverse pass takes the slot from the tape
    [f"  %s = getelementptr inbounds {TAPE}, ptr %tp, i32 0, i32 2", "  %x = load ptr, ptr %s, align 8"],  # same name
    [f"  %x = extractvalue {{ {TAPE}, i32 }} %whole, 0, 2"],  # through a type holding the tape, two indices
    [f"  %s = getelementptr inbounds {TAPE}, ptr %tp, i64 %i"],  # not a constant field
], ids=["extracted", "gep-of-the-same-name", "nested", "variable-index"])
def test_a_slot_that_may_be_read_stays_on_the_heap(reverse) -> None:
    text = _module(SLOT, reverse)
    assert unread_slots_on_the_stack(text) == text


@pytest.mark.parametrize("augmented", [
    [*SLOT, "  call void @free(ptr %m)"],  # freed by its own function
    [SLOT[0].replace(", !enzyme_fromstack !2", ""), *SLOT[1:]],  # not from a stack slot
    ["  br label %next", "next:", *SLOT],  # not in the entry block
    [*SLOT, f"  %s2 = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 0", "  store ptr %m, ptr %s2, align 8"],
    [*SLOT, "  %d = getelementptr i8, ptr %m, i64 8", f"  %s2 = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 0",
     "  store ptr %d, ptr %s2, align 8"],  # a pointer into it taped in another field
    [*SLOT, "  call void @augmented_g(ptr %m)"],  # given to a function of the module, which may tape it
    [*SLOT, f"  %agg = insertvalue {TAPE} undef, ptr %m, 0"],  # put into an aggregate
    [*SLOT, "  br label %loop", "loop:", "  %p = phi ptr [ null, %entry ], [ %d, %loop ]",
     "  %d = getelementptr i8, ptr %m, i64 8", f"  %s2 = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 0",
     "  store ptr %p, ptr %s2, align 8", "  br label %loop"],  # through a phi of a value defined below it
], ids=["freed", "not-from-stack", "not-entry", "two-stores", "derived-taped", "to-a-defined-function",
        "insertvalue", "phi-of-a-later-value"])
def test_other_allocations_stay_as_they_are(augmented) -> None:
    text = _module(augmented, [f"  %x = extractvalue {TAPE} %tapeArg, 0"])
    assert unread_slots_on_the_stack(text) == text
