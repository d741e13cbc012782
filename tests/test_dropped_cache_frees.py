"""pyjlad.dropped_cache_frees: which loop caches get back the ``free`` Enzyme's forward derivative dropped.

A cache allocated (``!enzyme_cache_alloc``) in the same block as a cache that is freed (``!enzyme_cache_free``) is
freed right after it, through ``phi`` nodes mirroring the sibling's; one used after that point, or with no freed
sibling in its block, is freed before the function returns where it is allocated at most once per call; a cache
whose pointer is stored or freed, or that is allocated on each turn of a loop, is left as Enzyme wrote it.
"""

from __future__ import annotations

import pytest

from pyjlad.dropped_cache_frees import dropped_cache_frees_restored

FLOATS = "  %a = tail call noalias nonnull ptr @malloc(i64 %n), !enzyme_cache_alloc !1"
FLAGS = "  %b = tail call noalias nonnull ptr @malloc(i64 %n), !enzyme_cache_alloc !2"


def _function(allocated: list[str], reverse: list[str]) -> str:
    """A forward derivative of a reverse sweep: caches allocated before a loop that may not run, read in the
    reverse loop, the float cache freed after it through the ``phi`` Enzyme builds (``undef`` where the loop did
    not run)."""
    return "\n".join([
        "define void @fwddiffe4diffef(i64 %n, i1 %c) {", "entry:", "  br i1 %c, label %pre, label %skip", "pre:",
        *allocated, "  br label %loop", "loop:", "  %i = phi i64 [ 0, %pre ], [ %j, %loop ]",
        "  %ap = getelementptr double, ptr %a, i64 %i", "  %x = load double, ptr %ap, align 8",
        "  %bp = getelementptr i1, ptr %b, i64 %i", "  %f = load i1, ptr %bp, align 1", "  %j = add i64 %i, 1",
        "  %more = icmp ult i64 %j, %n", "  br i1 %more, label %loop, label %skip", "skip:",
        "  %a.1 = phi ptr [ undef, %entry ], [ %a, %loop ]",
        "  call void @free(ptr nonnull %a.1), !enzyme_cache_free !1", *reverse, "  ret void", "}", ""])


def test_a_flag_cache_is_freed_with_the_float_cache_of_its_loop() -> None:
    out = dropped_cache_frees_restored(_function([FLOATS, FLAGS], [])).splitlines()
    skip = out.index("skip:")
    assert out[skip + 1] == "  %pyjlad.cache.0 = phi ptr [ undef, %entry ], [ %b, %loop ]"
    assert out[out.index("  call void @free(ptr nonnull %a.1), !enzyme_cache_free !1") + 1] == \
        "  call void @free(ptr %pyjlad.cache.0)"
    assert [line for line in out if "pyjlad" not in line] == _function([FLOATS, FLAGS], []).splitlines()


@pytest.mark.parametrize("allocated, reverse", [
    ([FLOATS, FLAGS], ["  %late = load i1, ptr %b, align 1"]),  # read after the float cache's free
    ([FLOATS.replace("!enzyme_cache_alloc !1", "!enzyme_cache_alloc !3"), FLAGS], []),  # no freed cache beside it
    ([FLAGS, "  br label %inner", "inner:", FLOATS], []),  # the freed one allocated in another block
], ids=["used-after", "no-sibling", "another-block"])
def test_other_dropped_caches_are_freed_at_the_return(allocated, reverse) -> None:
    # (the float cache's own free dropped too in the no-sibling case: both are freed there)
    out = dropped_cache_frees_restored(_function(allocated, reverse)).splitlines()
    stored = out[out.index(FLAGS) + 1]  # the address kept in a slot of the entry block, null before
    slot = stored.removeprefix("  store ptr %b, ptr ").removesuffix(", align 8")
    assert slot.startswith("%pyjlad.cache.slot.")
    assert f"  {slot} = alloca ptr, align 8" in out[2:6] and f"  store ptr null, ptr {slot}, align 8" in out[2:6]
    ret = out.index("  ret void")
    loads = [k for k in range(ret) if out[k].endswith(f"= load ptr, ptr {slot}, align 8")]
    assert len(loads) == 1 and out[loads[0] + 1] == f"  call void @free(ptr {out[loads[0]].split()[0]})"


@pytest.mark.parametrize("allocated, loop", [
    ([FLOATS, FLAGS, "  store ptr %b, ptr @kept, align 8"], False),  # its address stored
    ([FLOATS, FLAGS, "  call void @free(ptr %b)"], False),  # freed already (without the mark)
    ([FLOATS.replace("!enzyme_cache_alloc !1", "!enzyme_cache_alloc !3"), FLAGS], True),  # allocated on each turn
], ids=["stored", "freed", "in-a-loop"])
def test_other_caches_stay_as_they_are(allocated, loop) -> None:
    text = _function(allocated, [])
    if loop:  # the allocating block made part of an outer loop
        text = text.replace("  ret void", "  br i1 %c, label %pre, label %out\nout:\n  ret void")
    assert dropped_cache_frees_restored(text) == text
