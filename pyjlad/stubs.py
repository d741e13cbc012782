"""What ``extract`` keeps in place of Numba's items: error-path stubs, inactive marks, private globals.

A derivative never reads an exception's message (pyjlad re-runs the function for it), so the code
that only builds one becomes inactive stubs; Numba's integer-only runtime helpers are marked inactive;
libm declarations lose ``readonly``; Numba's environment globals become private to the module. Each
function takes and returns items of :mod:`pyjlad.ir` (``extract`` is a pass of
:mod:`pyjlad.portable_pipeline`).
"""

from __future__ import annotations

import dataclasses

from .ir.downlevel import translate_attribute_group
from .ir.lexer import Token, tokenize
from .ir.module import AttributeGroup, Function, GlobalVariable
from .ir.rewrite import items_of
from .portable import is_inactive_helper, is_libm_function

__all__ = ["ERROR_PATH_STUBS", "EXCINFO_UNWRAP", "HASHING", "RAISE_ONLY", "STRING_CODE", "clean_global", "excinfo_unwrap_stub",
           "inactive_definition", "libm_declaration", "mark_inactive", "raise_only_stub", "stub"]

#: Python C-API functions that Numba's generated code calls only to build the message of an exception
#: raised with run-time values (e.g. a shape mismatch in a slice assignment). A differentiated module
#: never reads that message: pyjlad re-runs the function itself to raise the exception with its text
#: (and the Julia engine reports the status). So in the portable module they are stubs returning
#: null/zero; the status still says an exception was raised.
ERROR_PATH_STUBS = frozenset({
    "PyUnicode_FromKindAndData", "PyUnicode_FromString", "PyTuple_Pack", "PyObject_Hash",
    "PyErr_SetString", "PyErr_SetNone", "PyErr_Clear", "Py_DecRef", "Py_IncRef",
    # the error path of a parfor's gufunc wrapper (only a parallel derivative keeps one: pyjlad.openmp_loops)
    "PyBytes_FromStringAndSize", "numba_unpickle", "numba_runtime_build_excinfo_struct",
})
_ZERO = {"ptr": "null", "void": "", "float": "0.0", "double": "0.0"}

#: Numba's builder of a dynamic exception's arguments (``raise E(f"... {value}")``, shape checks
#: of axis reductions): its address is stored in the exception info, which makes Enzyme process
#: it (its vararg PyTuple_Pack call trips Enzyme's preprocessing). Like the other error-path
#: code it is never needed in a differentiated module (the status still says an exception was
#: raised, and pyjlad re-runs the function for the message): an inactive stub returning null.
EXCINFO_UNWRAP = "@__excinfo_unwrap_args"

#: Numba's string implementations (numba.cpython.unicode, unicode_support, charseq): reached
#: from the messages of exceptions raised with run-time values (np.sum's axis check, the shape
#: check of a slice assignment). Text carries no derivative, and Enzyme's type analysis cannot
#: type their byte arithmetic.
STRING_CODE = ("@_ZN5numba7cpython7unicode", "@_ZN5numba7cpython15unicode_support", "@_ZN5numba7cpython7charseq")

#: Numba's hashing (numba.cpython.hashing: the keys of a set): an integer, which for a NaN draws on Numba's random
#: state (``numba_get_internal_random_state``, a call Enzyme would not pass even where no derivative flows). Kept
#: as :func:`inactive_definition`, and ``nofree`` (it frees nothing, so Enzyme need not copy it as such).
HASHING = ("@_ZN5numba7cpython7hashing",)

#: Numba functions that only raise: numba.np.arrayobj's ``raise_with_shape_context`` (Numba 0.61 on), called
#: where a slice assignment's shapes differ (``g[1:, :] = x`` of a 2-D array), formats its message with a list of
#: strings it grows (``NRT_MemInfo_varsize_realloc``, which Enzyme refused to process even in an inactive
#: function: every such assignment failed to differentiate). Kept as :func:`raise_only_stub`.
RAISE_ONLY = ("@_ZN5numba2np8arrayobj31ol_raise_with_shape_context",)

_INACTIVE = '"enzyme_inactive"'
#: Enzyme's type analysis does not look into the function's body (it still analyzes the caller).
_NOT_ANALYZED = '"enzyme_ta_norecur"'


def inactive_definition(function: Function, *, frees: bool = True) -> Function:
    """``function`` (a definition of :data:`STRING_CODE`) that Enzyme neither differentiates
    (``"enzyme_inactive"``) nor analyzes (``"enzyme_ta_norecur"``); with ``frees=False`` (:data:`HASHING`), also
    ``nofree``.

    Without the second, Enzyme's type analysis walked the string code of every error message the
    function can raise, for each call of it: most of Enzyme's time on a slice assignment
    (``y[1:-1] = x``, whose shape check formats its message with ``unicode_concat``) or a reduction
    along an axis (``benchmarks/build_time.py`` times their first derivatives).
    """
    wanted = (_INACTIVE, _NOT_ANALYZED) if frees else (_INACTIVE, _NOT_ANALYZED, "nofree")
    missing = [a for a in wanted if a.strip('"') not in " ".join(function.attributes)]
    return dataclasses.replace(function, attributes=[*function.attributes, *missing]) if missing else function


def raise_only_stub(function: Function) -> str | None:
    """An inactive definition of ``function`` (of :data:`RAISE_ONLY`) that raises without a message: it stores
    null as its exception info and returns Numba's status of a raised exception (1). pyjlad re-runs the function
    for the message (its first two parameters are Numba's result and exception-info pointers). ``None`` if
    ``function`` does not return a status.

    >>> print(raise_only_stub(items_of("declare i32 @r(ptr %retptr, ptr %excinfo, i64 %n)")[0]))
    define linkonce_odr i32 @r(ptr %a0, ptr %a1, i64 %a2) "enzyme_inactive" {
    entry:
      store ptr null, ptr %a1, align 8
      ret i32 1
    }
    """
    types = [p.type for p in function.parameters]
    if function.return_type != "i32" or types[:2] != ["ptr", "ptr"] or function.varargs:
        return None
    names = ", ".join(f"{t} %a{k}" for k, t in enumerate(types))
    return (f"define linkonce_odr i32 {function.symbol}({names}) {_INACTIVE} {{\nentry:\n"
            f"  store ptr null, ptr %a1, align 8\n  ret i32 1\n}}")


def excinfo_unwrap_stub(symbol: str) -> str:
    """An inactive definition of Numba's exception-argument builder ``symbol`` that returns null."""
    return f'define linkonce_odr ptr {symbol}(ptr %args) nounwind "enzyme_inactive" {{\nentry:\n  ret ptr null\n}}'


def stub(declaration: Function) -> str:
    """A definition with the declaration's signature that returns zero/null.

    >>> print(stub(items_of("declare noalias ptr @PyTuple_Pack(i64, ...)")[0]))
    define linkonce_odr ptr @PyTuple_Pack(i64 %a0, ...) {
    entry:
      ret ptr null
    }
    """
    ret = declaration.return_type
    names = [f"{p.type} %a{k}" for k, p in enumerate(declaration.parameters)] + (["..."] if declaration.varargs else [])
    body = "ret void" if ret == "void" else f"ret {ret} {_ZERO.get(ret, '0')}"
    return f"define linkonce_odr {ret} {declaration.symbol}({', '.join(names)}) {{\nentry:\n  {body}\n}}"


def libm_declaration(declaration: Function, groups: dict[str, AttributeGroup]) -> Function:
    """A libm declaration without Numba's ``readonly``; its attribute group's other attributes inline.

    Numba declares every libm function it calls "pure" (``readonly``); LLVM strengthens that to
    ``readnone`` for most (``erf``, ``tan``) but not all (``erfc``, ``lgamma``). Enzyme marks the
    functions it knows ``readnone`` itself, and a declaration that is both is invalid ("Attributes
    'readnone and readonly' are incompatible", ``math.erfc``). Dropping ``readonly`` is always safe.
    """
    attributes = declaration.attributes
    if not attributes or attributes[-1] not in declaration.attribute_group_refs \
            or not is_libm_function(declaration.symbol.lstrip("@")):
        return declaration
    group = groups.get(attributes[-1])
    translated = translate_attribute_group(" ".join(group.attributes) if group else "").split()
    if "readonly" not in translated:
        return declaration
    kept = " ".join(a for a in translated if a != "readonly")
    return dataclasses.replace(declaration, attributes=[*attributes[:-1], *([kept] if kept else [])])


def mark_inactive(declaration: Function) -> Function:
    """``declaration`` marked ``nofree nounwind "enzyme_inactive"`` if it is an integer-only runtime helper."""
    if is_inactive_helper(declaration.symbol.lstrip("@")) and "enzyme_inactive" not in declaration.render():
        return dataclasses.replace(declaration, attributes=[*declaration.attributes, "nofree", "nounwind", _INACTIVE])
    return declaration


def _internal(tokens: list[Token]) -> list[Token]:
    """``tokens`` with ``= common [local_unnamed_addr ]global`` made ``= internal global``."""
    texts = [t.text for t in tokens]
    for k, text in enumerate(texts):
        if text != "=" or tokens[k].kind != "punct":
            continue
        for middle in ([" ", "common", " ", "global"], [" ", "common", " ", "local_unnamed_addr", " ", "global"]):
            if texts[k + 1:k + 1 + len(middle)] == middle:
                return tokens[:k + 1] + tokenize(" internal global") + tokens[k + 1 + len(middle):]
    return tokens


def _without_comdat(tokens: list[Token]) -> list[Token]:
    """``tokens`` without each ``comdat``/``comdat($name)`` and the comma or whitespace before it."""
    out: list[Token] = []
    k = 0
    while k < len(tokens):
        token = tokens[k]
        if token.kind != "word" or token.text != "comdat":
            out.append(token)
            k += 1
            continue
        end = k + 1
        if end < len(tokens) and tokens[end].text == "(":
            close = next((j for j in range(end, len(tokens)) if tokens[j].text == ")"), None)
            end = end if close is None else close + 1
        start = len(out)
        while start > 0 and out[start - 1].kind == "ws":
            start -= 1
        if start > 0 and out[start - 1].text == ",":
            start -= 1
        if start == len(out):
            out.append(token)
            k += 1
            continue
        del out[start:]
        k = end
    return out


def clean_global(variable: GlobalVariable) -> GlobalVariable:
    """A global's definition as this function's private state: Numba's environment globals are ``common``
    (``internal`` here), and a standalone module has no comdats."""
    text = variable.render()
    cleaned = "".join(t.text for t in _without_comdat(_internal(tokenize(text))))
    return variable if cleaned == text else items_of(cleaned)[0]
