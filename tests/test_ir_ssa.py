"""Dominance restored after a control-flow change (:func:`pyjlad.ir.ssa.restore_dominance`): the bodies it writes
pass ``opt-15``'s verifier, and it refuses (``None``) what it cannot type."""

from __future__ import annotations

import subprocess

from pyjlad.ir.ssa import restore_dominance


def _verified(body: list[str], header: str = "define i64 @f(i1 %c, i1 %d, i64 %n) {") -> str:
    text = "\n".join([header, *body, "}", ""])
    run = subprocess.run(["opt-15", "-passes=verify", "-disable-output"], input=text.encode(), capture_output=True)
    assert run.returncode == 0, run.stderr.decode() + text
    return text


def test_a_value_read_past_two_joins_gets_a_phi_at_each() -> None:
    """``%v`` is defined on one side; it is read after a join and again after a second join that another path
    (not through the first) reaches: each join gets its ``phi``."""
    body = ["entry:", "  br i1 %c, label %a, label %b", "a:", "  %v = add i64 %n, 1", "  br label %join",
            "b:", "  br i1 %d, label %join, label %side", "join:", "  %w = mul i64 %v, 2", "  br label %end",
            "side:", "  br label %end", "end:", "  %x = add i64 %v, 3", "  ret i64 %x"]
    new = restore_dominance(body)
    assert new is not None and new != body
    text = _verified(new)
    assert text.count(" = phi i64 ") == 2
    assert "%w = mul i64 %pyjlad.ssa." in text and "%x = add i64 %pyjlad.ssa." in text


def test_a_phi_entry_from_a_block_the_value_does_not_dominate() -> None:
    body = ["entry:", "  br i1 %c, label %a, label %join", "a:", "  %v = add i64 %n, 1", "  br label %mid",
            "mid:", "  br label %join", "join:", "  br i1 %d, label %out, label %entry2", "entry2:", "  br label %out",
            "out:", "  %p = phi i64 [ %v, %join ], [ 0, %entry2 ]", "  ret i64 %p"]
    new = restore_dominance(body)
    assert new is not None
    text = _verified(new)
    assert "%p = phi i64 [ %pyjlad.ssa.0, %join ], [ 0, %entry2 ]" in text


def test_a_body_whose_uses_are_dominated_is_returned_as_it_is() -> None:
    body = ["entry:", "  %v = add i64 %n, 1", "  br i1 %c, label %a, label %b", "a:", "  br label %b", "b:",
            "  ret i64 %v"]
    assert restore_dominance(body) is body


def test_a_value_it_cannot_type_is_refused() -> None:
    body = ["entry:", "  br i1 %c, label %a, label %b", "a:", "  %v = va_arg ptr %n, i64", "  br label %b", "b:",
            "  ret i64 %v"]
    assert restore_dominance(body) is None
