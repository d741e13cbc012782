"""pyjlad.taped_slot_frees: which taped stack slots the reverse pass is made to free, and which are left alone.

Only a ``malloc`` marked ``!enzyme_fromstack``, in its function's entry block, never freed, whose address that
block stores into a field of a tape no instruction of the module may read, is freed, before each ``ret`` of the
one function reading that tape's type by ``extractvalue`` and freeing a block from it with Enzyme's mark (a
wrapper may pass the tape on to it). Every other shape is left as Enzyme wrote it: a second ``free`` of a block
Enzyme frees, or one of garbage, would crash the process. The leak this closes, measured end to end, is in
``tests/test_repeated_calls_memory.py``.
"""

from __future__ import annotations

import pytest

from pyjlad.taped_slot_frees import taped_slots_freed

TAPE = "{ ptr, i64, ptr }"
#: A slot of the augmented pass: its address taped in field 2, and stored into an argument pack.
SLOT = ["  %m = tail call noalias nonnull ptr @malloc(i64 32), !enzyme_cache_alloc !1, !enzyme_fromstack !2",
        f"  %s = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 2", "  store ptr %m, ptr %s, align 8",
        "  store ptr %m, ptr %pack, align 8"]
FREED = [f"  %pyjlad.taped.slot.0 = extractvalue {TAPE} %tapeArg, 2", "  call void @free(ptr %pyjlad.taped.slot.0)"]


#: The reverse pass freeing a sibling slot of the tape (field 0), as Enzyme's does.
SIBLING = [f"  %sibling = extractvalue {TAPE} %tapeArg, 0", "  call void @free(ptr %sibling), !enzyme_cache_free !4"]


def _module(augmented: list[str], reverse: list[str], *, wrapper: list[str] | None = None,
            sibling: list[str] = SIBLING) -> str:
    lines = [f"define internal {TAPE} @augmented_f(ptr %t, ptr %pack) {{", "entry:", *augmented,
             f"  ret {TAPE} zeroinitializer", "}",
             f"define internal void @diffef({TAPE} %tapeArg) {{", "entry:", *sibling, *reverse, "  br label %done",
             "done:", "  ret void", "}"]
    if wrapper is not None:
        lines += [f"define internal void @diffewrapper({TAPE} %tapeArg2) {{", "entry:", *wrapper, "  ret void", "}"]
    return "\n".join([*lines, "declare void @free(ptr)", ""])


def test_an_unread_taped_slot_is_freed_before_the_reverse_pass_returns() -> None:
    text = _module(SLOT, [f"  %x = extractvalue {TAPE} %tapeArg, 0"])
    out = taped_slots_freed(text).splitlines()
    at = out.index("  ret void", out.index(f"define internal void @diffef({TAPE} %tapeArg) {{"))
    assert out[at - 2:at] == FREED
    assert [line for line in out if line not in FREED] == text.splitlines()  # nothing else changed


def test_a_wrapper_that_passes_the_tape_on_leaves_the_free_to_the_reverse_pass_it_calls() -> None:
    text = _module(SLOT, [], wrapper=[f"  call void @diffef({TAPE} %tapeArg2)"])
    out = taped_slots_freed(text).splitlines()
    assert out.count(FREED[1]) == 1
    assert out.index(FREED[1]) < out.index("define internal void @diffewrapper({ ptr, i64, ptr } %tapeArg2) {")


@pytest.mark.parametrize("reverse, wrapper", [
    ([f"  %x = extractvalue {TAPE} %tapeArg, 2", "  call void @free(ptr %x)"], None),  # Enzyme frees it
    ([f"  %x = extractvalue {{ {TAPE}, i32 }} %whole, 0, 2"], None),  # read through a type holding the tape
    (["  call void @keep(ptr %tapeArg)"], None),  # the tape given away whole
    ([], [f"  %x = extractvalue {TAPE} %tapeArg2, 1"]),  # a second function reads the tape: which one frees?
    ([], [f"  call void @diffef({TAPE} %tapeArg2)", f"  call void @diffef({TAPE} %tapeArg2)"]),  # reversed twice
], ids=["freed-by-enzyme", "nested-read", "given-away", "two-readers", "passed-on-twice"])
def test_a_slot_the_reverse_pass_may_read_or_free_is_left_alone(reverse, wrapper) -> None:
    text = _module(SLOT, reverse, wrapper=wrapper)
    assert taped_slots_freed(text) == text


@pytest.mark.parametrize("augmented", [
    [*SLOT, "  call void @free(ptr %m)"],  # freed by its own function
    [SLOT[0].replace(", !enzyme_cache_alloc !1, !enzyme_fromstack !2", ""), *SLOT[1:]],  # not a stack slot
    ["  br label %next", "next:", *SLOT],  # not in the entry block: may not be allocated on every path
    [SLOT[0], "  br label %next", "next:", *SLOT[1:]],  # taped outside the entry block
    [*SLOT, "  %v = load ptr, ptr %s, align 8"],  # the field read back through its own pointer
    [SLOT[0], "  %s = getelementptr inbounds ptr, ptr %t, i64 2", *SLOT[2:]],  # not a struct's field
], ids=["freed", "unmarked", "not-entry", "taped-later", "field-pointer-read", "not-a-field"])
def test_other_allocations_are_left_alone(augmented) -> None:
    text = _module(augmented, [])
    assert taped_slots_freed(text) == text


def test_a_reverse_pass_that_frees_nothing_from_the_tape_is_left_alone() -> None:
    # not Enzyme's reverse pass of that tape as seen (it frees the slots it does free): no free added there
    text = _module(SLOT, [], sibling=[f"  %sibling = extractvalue {TAPE} %tapeArg, 0"])
    assert taped_slots_freed(text) == text


def test_a_module_without_free_declared_is_left_alone() -> None:
    text = _module(SLOT, []).replace("declare void @free(ptr)\n", "")
    assert taped_slots_freed(text) == text


def test_a_slot_taped_in_two_fields_is_left_alone() -> None:
    # freed from both fields, it would be freed twice
    second = [f"  %s2 = getelementptr inbounds {TAPE}, ptr %t, i32 0, i32 1", "  store ptr %m, ptr %s2, align 8"]
    text = _module([*SLOT, *second], [])
    assert taped_slots_freed(text) == text


def test_a_field_two_functions_tape_alike_is_freed_once() -> None:
    # two augmented passes with one tape type (Enzyme's types are structural) and one reverse pass reading it
    other = [line.replace("@augmented_f(", "@augmented_g(") for line in _module(SLOT, []).splitlines()[:8]]
    text = _module(SLOT, []).replace("declare void @free(ptr)", "\n".join([*other, "declare void @free(ptr)"]))
    assert taped_slots_freed(text).count("call void @free(ptr %pyjlad.taped.slot.") == 1
