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
    return "\n".join(["define internal ptr @augmented_g(ptr %p) {", "entry:", "  ret ptr %p", "}",
        "define internal void @augmented_h(ptr %p) {", "entry:", "  call void @augmented_w(ptr %p)", "  ret void", "}",
        "define internal void @augmented_w(ptr %p) {", "entry:", "  store i64 0, ptr %p, align 8",
        "  call void @augmented_h(ptr %p)", "  ret void", "}",
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
    [SLOT[0].replace(", !enzyme_cache_alloc !1, !enzyme_fromstack !2", ""), *SLOT[1:]],  # not one of Enzyme's
    ["  br label %next", "next:", *SLOT, "  %c = icmp eq i64 0, 0", "  br i1 %c, label %next, label %out",
     "out:"],  # in a loop: allocated on each turn
    [*SLOT, f"  %s2 = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 0", "  store ptr %m, ptr %s2, align 8"],
    [*SLOT, "  %d = getelementptr i8, ptr %m, i64 8", f"  %s2 = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 0",
     "  store ptr %d, ptr %s2, align 8"],  # a pointer into it taped in another field
    [*SLOT, "  %r = call ptr @augmented_g(ptr %m)"],  # given to a function of the module, which returns it
    [*SLOT, f"  %agg = insertvalue {TAPE} undef, ptr %m, 0"],  # put into an aggregate
    [*SLOT, "  br label %loop", "loop:", "  %p = phi ptr [ null, %entry ], [ %d, %loop ]",
     "  %d = getelementptr i8, ptr %m, i64 8", f"  %s2 = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 0",
     "  store ptr %p, ptr %s2, align 8", "  br label %loop"],  # through a phi of a value defined below it
], ids=["freed", "not-enzymes", "in-a-loop", "two-stores", "derived-taped", "to-a-defined-function",
        "insertvalue", "phi-of-a-later-value"])
def test_other_allocations_stay_as_they_are(augmented) -> None:
    text = _module(augmented, [f"  %x = extractvalue {TAPE} %tapeArg, 0"])
    assert unread_slots_on_the_stack(text) == text


def test_a_slot_given_to_a_function_that_keeps_it_goes_back_on_the_stack() -> None:
    # @augmented_h writes through its parameter and hands it to @augmented_w, which calls @augmented_h again
    text = _module([*SLOT, "  call void @augmented_h(ptr %m)"], [f"  %x = extractvalue {TAPE} %tapeArg, 0"])
    assert "  %m = alloca i8, i64 72, align 16" in unread_slots_on_the_stack(text).splitlines()


RETURNED = f"{{ {TAPE}, i32 }}"


def _by_value(slot: str, read: int, extra: tuple[str, ...] = ()) -> str:
    """An augmented pass returning its tape by value, a zeroed slot inserted into the tape's field 2 (the shape
    of Enzyme's copy of a result slot of Numba's ``_collect_percentiles_inner``), and a caller reading ``read``."""
    return "\n".join([
        "define internal void @augmented_inner(ptr captures(none) %retptr) {", "entry:",
        "  store i64 1, ptr %retptr, align 8", "  ret void", "}",
        "declare void @keeps(ptr)", "declare void @reads(ptr nocapture)",
        f"define internal {RETURNED} @augmented_f() {{", "entry:", slot, *extra,
        "  call void @augmented_inner(ptr %c)", "  %v = load i64, ptr %c, align 8",
        f"  %t = insertvalue {RETURNED} undef, ptr %c, 0, 2", f"  ret {RETURNED} %t", "}",
        "define void @caller() {", "entry:", f"  %r = call {RETURNED} @augmented_f()",
        f"  %f = freeze {RETURNED} %r", f"  %tape = extractvalue {RETURNED} %f, 0",
        f"  %x = extractvalue {TAPE} %tape, {read}", "  ret void", "}", ""])


ZEROED = "  %c = tail call dereferenceable_or_null(56) ptr @calloc(i64 1, i64 56)"


@pytest.mark.parametrize("extra", [(), ("  call void @reads(ptr %c)",), ("  call void @llvm.memset.p0.i64(ptr %c, i8 0, "
                                                                    "i64 56, i1 false)",)],
                         ids=["kept", "given-to-a-declared-nocapture", "given-to-an-intrinsic"])
def test_an_unread_zeroed_slot_of_a_tape_returned_by_value_goes_back_on_the_stack(extra) -> None:
    out = unread_slots_on_the_stack(_by_value(ZEROED, read=0, extra=extra)).splitlines()
    at = out.index("  %c = alloca i8, i64 56, align 16")
    assert out[at + 1] == "  store [56 x i8] zeroinitializer, ptr %c, align 16"  # calloc's zeros kept


@pytest.mark.parametrize("slot, read", [
    (ZEROED, 2),  # the reverse pass reads the field
    (ZEROED.replace("i64 56)", "i64 %n)"), 0),  # not a constant size
    (ZEROED.replace("i64 1, i64 56", "i64 2, i64 56"), 0),  # several blocks
    (ZEROED.replace("56", "8192"), 0),  # too large for the stack
], ids=["read", "variable-size", "array", "large"])
def test_other_slots_of_a_tape_returned_by_value_stay(slot, read) -> None:
    text = _by_value(slot, read)
    assert unread_slots_on_the_stack(text) == text


def test_a_zeroed_slot_given_to_a_declared_function_that_may_keep_it_stays() -> None:
    text = _by_value(ZEROED, 0, extra=("  call void @keeps(ptr %c)",))
    assert unread_slots_on_the_stack(text) == text


def test_an_unfreed_cache_allocated_once_per_call_goes_to_the_entry_block() -> None:
    # Enzyme's one-element cache of a flag in a block outside every loop, which the forward derivative of a reverse
    # sweep loads but never frees (the vector-mode Hessian of np.vstack lost 16 bytes per cache per sweep).
    cache = "  %m = tail call noalias nonnull ptr @malloc(i64 1), !enzyme_cache_alloc !7"
    augmented = ["  br label %next", "next:", cache, "  store i1 true, ptr %m, align 1", "  br label %out", "out:",
                 "  %p = phi ptr [ %m, %next ]", "  %f = load i1, ptr %p, align 1"]
    out = unread_slots_on_the_stack(_module(augmented, [])).splitlines()
    entry = out.index(f"define internal {TAPE} @augmented_f(ptr %t) {{") + 2
    assert out[entry] == "  %m = alloca i8, i64 1, align 16"
    assert cache not in out and "  store i1 true, ptr %m, align 1" in out
    freed = _module([*augmented, "  call void @free(ptr %p)"], [])  # freed through the phi
    assert unread_slots_on_the_stack(freed) == freed
