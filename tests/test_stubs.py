"""``pyjlad.stubs``: what ``extract`` keeps in place of Numba's items, on parsed hand-written items."""

from __future__ import annotations

from pyjlad import stubs
from pyjlad.ir import parse
from pyjlad.ir.rewrite import items_of


def test_stub_returns_zero_of_the_declared_type_with_the_declared_parameters() -> None:
    declaration = items_of("declare noundef i32 @PyErr_SetString(ptr noundef, ptr, ...) #2")[0]
    assert stubs.stub(declaration) == ("define linkonce_odr i32 @PyErr_SetString(ptr %a0, ptr %a1, ...) {\n"
                                       "entry:\n  ret i32 0\n}")
    assert "ret void" in stubs.stub(items_of("declare void @PyErr_Clear()")[0])


def test_inactive_helpers_and_string_code_are_marked_once() -> None:
    helper = items_of("declare i32 @numba_attempt_nocopy_reshape(i64, ptr)")[0]
    marked = stubs.mark_inactive(helper)
    assert marked.render() == 'declare i32 @numba_attempt_nocopy_reshape(i64, ptr) nofree nounwind "enzyme_inactive"'
    assert stubs.mark_inactive(marked) is marked and helper.render().endswith("(i64, ptr)")  # the original is kept
    assert stubs.mark_inactive(items_of("declare double @exp(double)")[0]).attributes == []
    code = items_of("define i64 @_ZN5numba7cpython7unicode3lenE(ptr %s) #0 {\nentry:\n  ret i64 0\n}")[0]
    marked = stubs.inactive_definition(code)
    assert marked.render().startswith('define i64 @_ZN5numba7cpython7unicode3lenE(ptr %s) '
                                      '#0 "enzyme_inactive" "enzyme_ta_norecur" {')
    assert stubs.inactive_definition(marked) is marked


def test_libm_declaration_inlines_its_group_without_readonly() -> None:
    module = parse("declare double @erfc(double) #1\ndeclare double @g(double) #1\n"
                   "attributes #1 = { nounwind memory(read) }\n")
    erfc, other = module.declarations
    assert stubs.libm_declaration(erfc, module.attribute_groups).render() == "declare double @erfc(double) nounwind"
    assert stubs.libm_declaration(other, module.attribute_groups) is other  # not libm


def test_clean_global_makes_common_internal_and_drops_comdats() -> None:
    variable = items_of("@_ZN08NumbaEnv1f = common local_unnamed_addr global ptr null, comdat, align 8")[0]
    assert stubs.clean_global(variable).render() == "@_ZN08NumbaEnv1f = internal global ptr null, align 8"
    plain = items_of("@g = internal global i64 0")[0]
    assert stubs.clean_global(plain) is plain
