"""``pyjlad.ir.rewrite``: item edits that keep every other byte (and every unchanged item) as it was."""

from __future__ import annotations

from pyjlad.ir import Function, GlobalVariable, parse
from pyjlad.ir.rewrite import definitions_named, drop_attachment, items_of, map_items, rename

MODULE = """@msg = internal constant [9 x i8] c"@f called"
define void @f() {
entry:
  ret void
}
define void @g() {
entry:
  call void @f()
  ret void
}
declare void @h()
"""


def test_map_items_parses_only_the_items_it_changes() -> None:
    module = parse(MODULE)
    before = list(module.items)
    map_items(module, lambda text: text.replace("ret void", "unreachable"), where=definitions_named({"@g"}))
    assert module.items[0] is before[0] and module.items[1] is before[1] and module.items[3] is before[3]
    assert module.items[2] is not before[2] and module.items[2].body == ["entry:", "  call void @f()", "  unreachable"]
    assert module.render() == MODULE.replace("  call void @f()\n  ret void", "  call void @f()\n  unreachable")


def test_map_items_may_turn_one_item_into_several() -> None:
    module = map_items(parse(MODULE), lambda text: text + "\ndeclare void @extra()", where=definitions_named({"@f"}))
    assert [getattr(i, "symbol", None) for i in module.items] == ["@msg", "@f", "@extra", "@g", "@h"]
    assert isinstance(module.items[2], Function) and module.items[2].is_declaration


def test_rename_changes_symbols_but_not_constant_bytes() -> None:
    module = rename(parse(MODULE), "@f", "@renamed")
    text = module.render()
    assert 'c"@f called"' in text  # data, not a reference
    assert "define void @renamed() {" in text and "call void @renamed()" in text and "@f(" not in text
    assert module.functions["@renamed"].body == ["entry:", "  ret void"]


def test_items_of_reads_a_fragment() -> None:
    items = items_of("@g = global i64 0\ndeclare void @f()")
    assert isinstance(items[0], GlobalVariable) and isinstance(items[1], Function)


def test_drop_attachment_only_from_loads_and_stores_and_only_the_named_one() -> None:
    name = "!invariant.group"
    assert drop_attachment("  store double %v, ptr %p, align 8, !invariant.group !7", name) == \
        "  store double %v, ptr %p, align 8"
    assert drop_attachment("  %x = load atomic i64, ptr %p acquire, align 8, !tbaa !1, !invariant.group !2", name) \
        == "  %x = load atomic i64, ptr %p acquire, align 8, !tbaa !1"
    for kept in ("  %x = call ptr @llvm.launder.invariant.group.p0(ptr %p), !invariant.group !2",  # not a load/store
                 "  %x = load i64, ptr %p, !invariant.load !2",  # another attachment
                 "@g = global ptr null, !invariant.group !2",  # not an instruction line
                 '  store i64 0, ptr %p, !note !{!"!invariant.group !2"}'):  # inside a string
        assert drop_attachment(kept, name) == kept
