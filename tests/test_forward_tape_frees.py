"""pyjlad.forward_tape_frees: which dropped frees of taped blocks are put back, and which shapes are left alone.

Only a field that the first-order reverse pass ``diffeX`` frees from its tape is freed, in ``fwddiffe<W>diffeX``,
from the tape and from each tangent tape, and only when the one ``fwddiffe<W>augmented_...`` producing such tapes
puts there, in the primal and in each tangent, a block it allocates (a different one in each) or null or
undefined (an undefined ``phi`` incoming becomes null). Every other shape is left as Enzyme wrote it: a second
``free`` of a block, or one of garbage, would crash the process. The leak this closes, measured end to end
against JAX, is in ``tests/test_repeated_calls_memory.py``.
"""

from __future__ import annotations

import pytest

from pyjlad.forward_tape_frees import forward_tape_frees_restored

TAPE = "{ ptr, i64 }"
RESULT = f"{{ {TAPE}, ptr }}"  # a tape and the function's own result, as Enzyme's augmented passes return them
RETURNED = f"{{ {RESULT}, [2 x {RESULT}] }}"


def _producer(fields: list[str], block: str = "%b") -> list[str]:
    """``fwddiffe2augmented_g``: blocks allocated where ``%n`` is not zero (null or undefined otherwise, through
    ``phi`` nodes), field 0 of each tape set from ``fields`` (primal, tangent 0, tangent 1)."""
    primal, lane0, lane1 = fields
    return [f"define internal {RETURNED} @fwddiffe2augmented_g(i64 %n) {{", "entry:",
            "  %z = icmp eq i64 %n, 0", "  br i1 %z, label %done, label %alloc", "alloc:",
            "  %b = call ptr @malloc(i64 %n)", "  %b0 = call ptr @malloc(i64 %n)", "  %b1 = call ptr @malloc(i64 %n)",
            "  br label %done", "done:",
            f"  %p = phi ptr [ undef, %entry ], [ {block}, %alloc ]", "  %p0 = phi ptr [ null, %entry ], [ %b0, %alloc ]",
            "  %p1 = phi ptr [ poison, %entry ], [ %b1, %alloc ]",
            f"  %t = insertvalue {RESULT} poison, ptr {primal}, 0, 0", f"  %u = insertvalue {RESULT} %t, i64 %n, 0, 1",
            f"  %l0 = insertvalue {RESULT} zeroinitializer, ptr {lane0}, 0, 0",
            f"  %l1 = insertvalue {RESULT} zeroinitializer, ptr {lane1}, 0, 0",
            f"  %a = insertvalue [2 x {RESULT}] undef, {RESULT} %l0, 0",
            f"  %c = insertvalue [2 x {RESULT}] %a, {RESULT} %l1, 1",
            f"  %r = insertvalue {RETURNED} undef, {RESULT} %u, 0", f"  %s = insertvalue {RETURNED} %r, [2 x {RESULT}] %c, 1",
            f"  ret {RETURNED} %s", "}"]


REVERSE = [f"define internal void @diffeg(i64 %n, {TAPE} %tapeArg) {{", "entry:",
           f"  %q = extractvalue {TAPE} %tapeArg, 0", "  call void @free(ptr %q), !enzyme_cache_free !1", "  ret void",
           "}"]


def _module(producer: list[str], forward: list[str] | None = None, reverse: list[str] = REVERSE) -> str:
    forward = forward if forward is not None else ["  ret void"]
    return "\n".join([*producer, *reverse,
                      f"define internal void @fwddiffe2diffeg(i64 %n, {TAPE} %tapeArg, [2 x {TAPE}] %\"tapeArg'\") {{",
                      "entry:", *forward, "}", "declare ptr @malloc(i64)", "declare void @free(ptr)", ""])


FIELDS = ["%p", "%p0", "%p1"]


def test_the_tapes_blocks_are_freed_and_undefined_incomings_made_null() -> None:
    text = _module(_producer(FIELDS))
    out = forward_tape_frees_restored(text).splitlines()
    at = out.index("define internal void @fwddiffe2diffeg(i64 %n, { ptr, i64 } %tapeArg, [2 x { ptr, i64 }] %\"tapeArg'\") {")
    assert out[at + 2:at + 9] == [
        "  %pyjlad.tape.free.0 = extractvalue { ptr, i64 } %tapeArg, 0", "  call void @free(ptr %pyjlad.tape.free.0)",
        "  %pyjlad.tape.free.1 = extractvalue [2 x { ptr, i64 }] %\"tapeArg'\", 0, 0",
        "  call void @free(ptr %pyjlad.tape.free.1)",
        "  %pyjlad.tape.free.2 = extractvalue [2 x { ptr, i64 }] %\"tapeArg'\", 1, 0",
        "  call void @free(ptr %pyjlad.tape.free.2)", "  ret void"]
    assert "  %p = phi ptr [ null, %entry ], [ %b, %alloc ]" in out
    assert "  %p1 = phi ptr [ null, %entry ], [ %b1, %alloc ]" in out


@pytest.mark.parametrize("fields, block", [
    (["%p", "%p", "%p1"], "%b"),  # a tangent's block is the primal's: it would be freed twice
    (["%p", "%p0", "%p1"], "%b0"),  # the primal's block is a tangent's too
    (["%n2", "%p0", "%p1"], "%b"),  # not a block the function allocates
], ids=["tangent-is-primal", "primal-is-tangent", "not-allocated-here"])
def test_fields_that_may_not_be_distinct_blocks_are_left_alone(fields, block) -> None:
    text = _module(_producer(fields, block)).replace("  %z = icmp", "  %n2 = inttoptr i64 %n to ptr\n  %z = icmp")
    assert forward_tape_frees_restored(text) == text


def test_a_field_left_undefined_in_the_aggregate_is_left_alone() -> None:
    producer = [line for line in _producer(FIELDS) if not line.startswith("  %t = ")]
    producer = [line.replace("%u = insertvalue { { ptr, i64 }, ptr } %t,", "%u = insertvalue { { ptr, i64 }, ptr } poison,")
                for line in producer]
    text = _module(producer)
    assert forward_tape_frees_restored(text) == text


def test_a_forward_derivative_that_frees_from_its_tapes_is_left_alone() -> None:
    forward = [f"  %q = extractvalue {TAPE} %tapeArg, 0", "  call void @free(ptr %q)", "  ret void"]
    text = _module(_producer(FIELDS), forward)
    assert forward_tape_frees_restored(text) == text


def test_fields_the_first_order_reverse_does_not_free_are_left_alone() -> None:
    reverse = [line for line in REVERSE if "@free" not in line]
    text = _module(_producer(FIELDS), reverse=reverse)
    assert forward_tape_frees_restored(text) == text


def test_two_producers_of_the_same_tape_leave_it_alone() -> None:
    second = [line.replace("@fwddiffe2augmented_g", "@fwddiffe2augmented_h") for line in _producer(FIELDS)]
    text = _module([*_producer(FIELDS), *second])
    assert forward_tape_frees_restored(text) == text
