"""pyjlad.ir: the lexer, the structured module and its analyses.

Hand-written IR covers the syntax Numba, pyjlad and Enzyme drivers use (quoted
names, varargs, attribute groups, metadata, globals whose initializers name
symbols, ``c"..."`` strings holding ``@`` and ``\\22``, typed and opaque
pointers); real modules exported from the test suite's functions are
round-tripped and checked against LLVM's own reading of them (llvmlite).
"""

from __future__ import annotations

import pytest

from pyjlad.ir import IRParseError, Parameter, decode_name, parse, symbol_for, tokenize
from pyjlad.ir.analysis import (
    external_functions,
    llvmlite_signatures,
    mixed_pointer_arguments,
    numba_entry,
    pointer_flow,
    reachable,
    references,
    users,
)
from pyjlad.ir.lexer import closing, split_top_level, words

HAND_WRITTEN = r"""; ModuleID = 'hand'
source_filename = "hand"
target datalayout = "e-m:e-p270:32:32-i64:64-n8:16:32:64-S128"
target triple = "x86_64-unknown-linux-gnu"

%struct.T = type { i64, i8* }
%"class.ns::Q" = type opaque
$comdat.f = comdat any

@.str = private unnamed_addr constant [13 x i8] c"call @x \22q\22;\00", align 1
@tab = internal constant { ptr, i32, ptr } { ptr @g, i32 80, ptr @"h h" }, align 8
@g = external global double
@"h h" = common local_unnamed_addr global ptr null
@alias = internal alias double, ptr @g

define internal fastcc range(i32 0, 2) i32 @"foo bar"(ptr noalias nocapture writeonly %retptr, ptr noalias nocapture writeonly %excinfo, double %"x y", ptr readonly align 8 dereferenceable(16) %arr, ptr addrspace(1) %far) local_unnamed_addr #0 {
entry:
  %p = getelementptr inbounds i8, ptr %arr, i64 8
  %q = select i1 true, ptr %p, ptr %arr
  %v = load double, ptr %q, align 8
  %c = tail call double @llvm.sin.f64(double %v) #1
  %r = call i32 (ptr, ...) @printf(ptr @.str, double %c)
  br label %"loop body"

"loop body":                                      ; preds = %entry, %"loop body"
  %m = phi ptr [ %arr, %entry ], [ %m, %"loop body" ]
  call void @helper(ptr %m, ptr @tab)
  store double %c, ptr %retptr, align 8
  ret i32 0
}

define void @helper(ptr %h0, ptr %h1) #1 {
  ret void
}

define void @typed(i8* %p, double* nocapture readonly %q) {
  %x = bitcast i8* %p to double*
  ret void
}

declare double @llvm.sin.f64(double) #1
declare i32 @printf(ptr, ...)
declare void @__enzyme_autodiff(...)
declare void @"a\22b"(ptr)

attributes #0 = { nounwind memory(argmem: readwrite) "frame-pointer"="none" "enzyme_type"="{[-1]:Pointer}" }
attributes #1 = { }

!llvm.module.flags = !{!0}
!0 = !{i32 1, !"wchar_size", i32 4}
"""


@pytest.fixture(scope="module")
def hand() -> object:
    return parse(HAND_WRITTEN)


def test_lexer_is_lossless_and_keeps_data_apart() -> None:
    tokens = tokenize(HAND_WRITTEN)
    assert "".join(t.text for t in tokens) == HAND_WRITTEN
    kinds = {t.text: t.kind for t in tokens}
    assert kinds['c"call @x \\22q\\22;\\00"'] == "cstring"
    assert kinds['@"foo bar"'] == "global"
    assert kinds['%"loop body"'] == "local"
    assert kinds["#0"] == "attrgroup"
    assert kinds['!"wchar_size"'] == "metadata"
    assert kinds["$comdat.f"] == "comdat"
    assert kinds['"frame-pointer"'] == "string"
    assert "@x" not in kinds  # inside the c"..." string


def test_brackets_and_top_level_splits() -> None:
    tokens = tokenize("{ ptr, <2 x double> } (i64 %a, [2 x i8] %b), 3")
    assert closing(tokens, 0) == next(k for k, t in enumerate(tokens) if t.text == "}")
    parts = ["".join(t.text for t in part).strip() for part in split_top_level(tokens)]
    assert parts == ["{ ptr, <2 x double> } (i64 %a, [2 x i8] %b)", "3"]
    assert words(tokenize("ptr noalias align 8 %x")) == ["ptr", "noalias", "align", "8", "%x"]
    assert words(tokenize("{ i64, ptr } %s")) == ["{ i64, ptr }", "%s"]
    with pytest.raises(ValueError, match="never closed"):
        closing(tokenize("(a, (b)"), 0)


def test_names_decode_and_quote() -> None:
    assert decode_name('@"a\\22b"') == 'a"b'
    assert decode_name('%"x y"') == "x y"
    assert decode_name("@llvm.sin.f64") == "llvm.sin.f64"
    for name in ("f.1", "a b", 'q"uote', "back\\slash", "_ZN5numba2f"):
        assert decode_name(symbol_for(name)) == name
    assert symbol_for("a b") == '@"a b"'


def test_hand_written_round_trip(hand) -> None:
    assert hand.render() == HAND_WRITTEN
    assert parse(HAND_WRITTEN.rstrip("\n")).render() == HAND_WRITTEN.rstrip("\n")


def test_hand_written_structure(hand) -> None:
    assert [line.kind for line in hand.header] == ["source_filename", "datalayout", "triple"]
    assert set(hand.types) == {"%struct.T", '%"class.ns::Q"'}
    assert hand.types["%struct.T"].body == "{ i64, i8* }"
    assert hand.globals["@tab"].kind == "constant" and hand.globals["@tab"].linkage == ["internal"]
    assert hand.globals["@alias"].kind == "alias"
    foo = hand.function("foo bar")
    assert foo.symbol == '@"foo bar"' and not foo.is_declaration
    assert foo.linkage == ["internal", "fastcc"] and foo.return_attributes == ["range(i32 0, 2)"]
    assert foo.return_type == "i32" and foo.attributes == ["local_unnamed_addr", "#0"]
    assert foo.attribute_group_refs == ["#0"]
    assert [p.name for p in foo.parameters] == ["%retptr", "%excinfo", '%"x y"', "%arr", "%far"]
    assert foo.parameters[3] == Parameter("ptr", ["readonly", "align 8", "dereferenceable(16)"], "%arr")
    assert foo.parameters[3].readonly and not foo.parameters[2].readonly
    assert foo.parameters[4].type == "ptr addrspace(1)"
    typed = hand.function("typed")
    assert [(p.type, p.attributes) for p in typed.parameters] == [("i8*", []), ("double*", ["nocapture", "readonly"])]
    printf = hand.function("printf")
    assert printf.varargs and [p.type for p in printf.parameters] == ["ptr"] and printf.parameters[0].name is None
    autodiff = hand.function("__enzyme_autodiff")
    assert autodiff.varargs and autodiff.parameters == []
    assert hand.function('a"b').symbol == '@"a\\22b"'
    assert hand.attribute_groups["#0"].attributes == [
        "nounwind", "memory(argmem: readwrite)", '"frame-pointer"="none"', '"enzyme_type"="{[-1]:Pointer}"']
    assert hand.attribute_groups["#1"].attributes == []
    assert hand.metadata["!0"].value == '!{i32 1, !"wchar_size", i32 4}'
    assert external_functions(hand) == ["llvm.sin.f64", "printf", "__enzyme_autodiff", 'a"b']


def test_instructions_and_calls(hand) -> None:
    foo = hand.function("foo bar")
    opcodes = [(i.result, i.opcode) for i in foo.instructions()]
    assert opcodes == [("%p", "getelementptr"), ("%q", "select"), ("%v", "load"), ("%c", "call"),
                       ("%r", "call"), (None, "br"), ("%m", "phi"), (None, "call"), (None, "store"), (None, "ret")]
    calls = list(foo.calls())
    assert [c.callee for c in calls] == ["@llvm.sin.f64", "@printf", "@helper"]
    assert calls[1].arguments == ["ptr @.str", "double %c"]
    assert calls[2].values == ["%m", "@tab"]


def test_operands_phis_and_users(hand) -> None:
    foo = hand.function("foo bar")
    by_result = {i.result: i for i in foo.instructions()}
    assert by_result["%m"].phi_incoming() == [("%arr", "%entry"), ("%m", '%"loop body"')]
    assert by_result["%q"].phi_incoming() == []
    assert by_result["%q"].operands() == ["%p", "%arr"]
    assert by_result["%m"].operands() == ["%arr", "%entry", "%m", '%"loop body"']
    read = users(foo)
    assert [foo.body[k].split(" = ")[0].strip() for k in read["%arr"]] == ["%p", "%q", "%m"]
    assert [foo.body[k].strip().split()[0] for k in read["%c"]] == ["%r", "store"]


def test_edits_render(hand) -> None:
    edited = parse(HAND_WRITTEN)
    foo = edited.function("foo bar")
    foo.parameters[0].attributes.remove("noalias")
    foo.linkage.remove("fastcc")
    edited.attribute_groups["#0"].attributes[:] = ["nounwind"]
    text = edited.render()
    assert ('define internal range(i32 0, 2) i32 @"foo bar"(ptr nocapture writeonly %retptr, ptr noalias '
            in text)
    assert "attributes #0 = { nounwind }\n" in text
    assert text.count("\n") == HAND_WRITTEN.count("\n")


def test_references_ignore_string_data(hand) -> None:
    assert references(hand.globals["@.str"]) == set()
    assert references(hand.globals["@tab"]) == {"@g", '@"h h"'}
    assert references(hand.function("foo bar")) == {"@llvm.sin.f64", "@printf", "@.str", "@helper", "@tab"}


def test_references_after_a_quoted_name_ending_in_c() -> None:
    # pyjlad.portable strips c"..." with the regex c"[^"]*", which also matches the end of a quoted
    # name ending in "c" and hides the symbols up to the next quote (Numba's cpython wrappers pass
    # @".const.f.<locals>.func"): the lexer reads the name as one token.
    module = parse('define void @w() {\n  call void @g(ptr @".const.<locals>.func", ptr @env, ptr @"q")\n'
                   '  ret void\n}\n')
    assert references(module.function("w")) == {"@g", '@".const.<locals>.func"', "@env", '@"q"'}


def test_reachable_order(hand) -> None:
    # a stack of sorted references: @"foo bar" pushes @.str @helper @llvm.sin.f64 @printf @tab (sorted),
    # so @tab is visited next, then its references @"h h" and @g, then @printf, ...
    assert reachable(hand, '@"foo bar"') == [
        '@"foo bar"', "@tab", "@g", '@"h h"', "@printf", "@llvm.sin.f64", "@helper", "@.str"]
    assert reachable(hand, "@helper", extra={"@helper": ["@undefined"]}) == ["@helper", "@undefined"]


def test_numba_entry(hand) -> None:
    entry = numba_entry(hand, "foo bar")
    assert entry.retptr.name == "%retptr" and entry.excinfo.name == "%excinfo"
    assert [p.name for p in entry.arguments] == ['%"x y"', "%arr", "%far"]
    with pytest.raises(ValueError, match="not a Numba ABI function"):
        numba_entry(hand, "helper")
    with pytest.raises(KeyError):
        numba_entry(hand, "missing")


def test_pointer_flow(hand) -> None:
    flow = pointer_flow(hand)
    assert flow.edges[("foo bar", "%arr")] == [("foo bar", "%p"), ("foo bar", "%q"), ("foo bar", "%m")]
    assert flow.edges[("foo bar", "%m")] == [("foo bar", "%m"), ("helper", "%h0")]
    assert ("foo bar", ("%p", "%arr")) in flow.merges
    # %q merges %arr with a pointer derived from it: only one origin, so not mixed
    assert mixed_pointer_arguments(hand, "foo bar", {"%arr": 1}) == frozenset()
    assert mixed_pointer_arguments(hand, "foo bar", {"%arr": 1, "%p": 2}) == frozenset({1, 2})


def test_parse_errors() -> None:
    with pytest.raises(IRParseError, match="never closed"):
        parse("define void @f() {\n  ret void\n")
    with pytest.raises(IRParseError, match="unknown top-level line"):
        parse("this is not IR\n")
    assert parse("this is not IR\n", strict=False).render() == "this is not IR\n"
    with pytest.raises(IRParseError, match="does not render back"):
        parse("declare void  @f(ptr)\n")  # two spaces: the structured form would change the text


def test_llvmlite_agrees_on_hand_written_opaque_module() -> None:
    typed = ("define void @typed(i8* %p, double* nocapture readonly %q) {\n  %x = bitcast i8* %p to double*\n"
             "  ret void\n}\n")
    # LLVM 22 reads no typed pointers and no empty attribute group (LLVM 15 reads both)
    text = HAND_WRITTEN.replace(typed, "").replace("%struct.T = type { i64, i8* }\n", "")
    text = text.replace("attributes #1 = { }", "attributes #1 = { nounwind }")
    assert text.count("\n") == HAND_WRITTEN.count("\n") - 5
    module = parse(text)
    mine = {f.name: (f.is_declaration, len(f.parameters)) for f in module.functions.values()}
    assert mine == llvmlite_signatures(text)


# --------------------------------------------------------------------------------- real modules
SAMPLE = ("seed000_cfunc", "scalar_math", "scalar_branches_xgt", "numpy_reductions", "weighted_2d_strided",
          "float32_array", "float32_scalar", "call_chain", "closure_array_constant", "cube_3d",
          "global_array_constant", "plain_python", "relu_branch", "sin_x_dot_x", "two_arrays")


def _sample_cases() -> list:
    import cases

    by_name: dict[str, object] = {}
    for case in cases.CASES:
        by_name.setdefault(case.name, case)
    return [by_name[name] for name in SAMPLE]


def _numba_text(case, exported) -> str:
    from numba.core.ccallback import CFunc

    from pyjlad.export import as_numba_function

    target = as_numba_function(case.func)
    if isinstance(target, CFunc):
        return target._library.get_llvm_str()
    return target.overloads[exported.argtypes].library.get_llvm_str()


@pytest.fixture(scope="module")
def real_modules() -> list[tuple[str, str, str]]:
    from pyjlad.export import export, numba_argtypes

    out = []
    for case in _sample_cases():
        exported = export(case.func, numba_argtypes(case.args))
        out.append((case.name, _numba_text(case, exported), exported.module.text))
    return out


def test_real_modules_round_trip(real_modules) -> None:
    assert len(real_modules) == 15
    for name, numba_text, portable_text in real_modules:
        assert parse(numba_text).render() == numba_text, name
        assert parse(portable_text).render() == portable_text, name


def test_real_modules_agree_with_llvmlite(real_modules) -> None:
    for name, numba_text, _ in real_modules:
        module = parse(numba_text)
        mine = {f.name: (f.is_declaration, len(f.parameters)) for f in module.functions.values()}
        assert mine == llvmlite_signatures(numba_text), name
        globals_ = {g.name for g in module.globals.values() if g.kind in ("global", "constant")}
        import llvmlite.binding as llvm

        assert globals_ == {g.name for g in llvm.parse_assembly(numba_text).global_variables}, name


def test_result_types_agree_with_llvmlite(real_modules) -> None:
    """:func:`pyjlad.ir.value_types.result_type` (what :mod:`pyjlad.ir.ssa` writes into a new ``phi``) against
    LLVM's own type of every value Numba's modules define; ``None`` only for opcodes it does not read."""
    import llvmlite.binding as llvm

    from pyjlad.ir.instructions import parse_instruction
    from pyjlad.ir.value_types import result_type

    checked = 0
    for name, numba_text, _ in real_modules:
        for function in llvm.parse_assembly(numba_text).functions:
            for block in function.blocks:
                for instruction in block.instructions:
                    line = "  " + str(instruction).strip()
                    parsed = parse_instruction(line)
                    if parsed is None or parsed.result is None:
                        continue
                    found = result_type(parsed)
                    if found is None:
                        assert parsed.opcode in ("getelementptr", "va_arg", "landingpad"), (name, line)
                        continue
                    assert found.replace(" ", "") == str(instruction.type).replace(" ", ""), (name, line)
                    checked += 1
    assert checked > 1000
