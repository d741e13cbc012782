"""The type of the value an instruction defines, read from its line (:func:`result_type`).

A pass that adds a ``phi`` for an existing value (:mod:`pyjlad.ir.ssa`) must write its type. LLVM's text names
it in most instructions (``load double``, ``fadd <4 x double>``, ``phi i64``, a call's return type); a few derive
it (``icmp`` gives ``i1``, ``extractvalue`` an element of the aggregate). :func:`result_type` knows the opcodes
Numba's code uses and says ``None`` for anything else (a named struct's element, ``va_arg``), so that a caller can
leave that code alone.

>>> result_type("  %s = fadd fast double %a, %b")
'double'
>>> result_type("  %c = icmp ult <4 x i64> %a, %b")
'<4 x i1>'
>>> result_type("  %v = extractvalue { i64, { double, ptr } } %r, 1, 0")
'double'
"""

from __future__ import annotations

from collections.abc import Sequence

from .instructions import Instruction, parse_instruction, significant
from .lexer import Token, closing, split_top_level, tokenize

__all__ = ["SCALAR_BYTES", "result_type", "element_types", "element_at", "type_written_at"]

#: The bytes of each scalar type a load or store of Numba's code moves (a pointer's on a 64-bit target).
SCALAR_BYTES = {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "ptr": 8, "double": 8, "float": 4}

#: Opcodes whose value has the type written first after them (and their flags).
_TYPE_FIRST = frozenset(("add", "sub", "mul", "udiv", "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and", "or",
                         "xor", "fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "freeze", "phi", "load", "insertvalue",
                         "insertelement", "landingpad"))
_CASTS = frozenset(("trunc", "zext", "sext", "fptrunc", "fpext", "fptoui", "fptosi", "uitofp", "sitofp", "ptrtoint",
                    "inttoptr", "bitcast", "addrspacecast"))
#: Words between an opcode (or a call's ``call``) and the type: flags, fast-math flags, ordering, calling
#: conventions, return attributes without an argument.
_SKIPPED = frozenset(("nuw", "nsw", "exact", "disjoint", "nneg", "samesign", "volatile", "atomic", "fast", "nnan",
                      "ninf", "nsz", "arcp", "contract", "afn", "reassoc", "inbounds", "tail", "musttail", "notail",
                      "fastcc", "ccc", "coldcc", "tailcc", "swiftcc", "noalias", "nonnull", "noundef", "zeroext",
                      "signext", "inreg", "cleanup"))
#: Return attributes that take an argument: ``align 8``, ``dereferenceable(16)``.
_WITH_ARGUMENT = frozenset(("align", "dereferenceable", "dereferenceable_or_null", "range", "nofpclass", "cc"))


def _type_at(tokens: Sequence[Token], index: int) -> tuple[str, int] | None:
    """The type written from ``tokens[index]`` on (significant tokens) and the index after it."""
    if index >= len(tokens):
        return None
    first = tokens[index]
    if first.text in ("<", "{", "["):
        end = closing(tokens, index)
        return _joined(tokens[index:end + 1]), end + 1
    if first.kind == "word" or first.kind == "local":
        end = index + 1
        if end < len(tokens) and tokens[end].text == "addrspace":
            end = closing(tokens, end + 1) + 1
        return _joined(tokens[index:end]), end
    return None


def _joined(tokens: Sequence[Token]) -> str:
    """Significant tokens written back as a type (``<4 x double>``, ``{ i64, ptr }``): LLVM's parser takes any
    spacing between tokens; this is the spacing it prints."""
    text = " ".join(t.text for t in tokens)
    for opening in "<[(":
        text = text.replace(f"{opening} ", opening)
    for closing_ in ">])":
        text = text.replace(f" {closing_}", closing_)
    return text.replace(" ,", ",")


def _skip(tokens: Sequence[Token], index: int) -> int:
    """The index of the first token from ``index`` on that is not a flag or an argument-less attribute."""
    while index < len(tokens):
        text = tokens[index].text
        if text in _SKIPPED:
            index += 1
        elif text in _WITH_ARGUMENT and index + 1 < len(tokens):
            index = closing(tokens, index + 1) + 1 if tokens[index + 1].text == "(" else index + 2
        else:
            return index
    return index


def _elements(aggregate: str) -> list[str] | None:
    """The element types of a literal struct (``{ a, b }``) or array/vector (``[n x t]``; one entry: ``t``)."""
    tokens = significant(tokenize(aggregate))
    if not tokens:
        return None
    if tokens[0].text == "{" or (tokens[0].text == "<" and len(tokens) > 1 and tokens[1].text == "{"):
        inner = tokens[1:-1] if tokens[0].text == "{" else tokens[2:-2]
        return [_joined(part) for part in split_top_level(inner)]
    if tokens[0].text in ("[", "<") and len(tokens) > 3 and tokens[2].text == "x":
        return [_joined(tokens[3:-1])]
    return None


def _element_at(aggregate: str, indices: list[str]) -> str | None:
    for index in indices:
        elements = _elements(aggregate)
        if elements is None or not index.isdigit():
            return None
        if len(elements) == 1 and aggregate.lstrip().startswith(("[", "<")) and "{" not in aggregate[:2]:
            aggregate = elements[0]
        elif int(index) < len(elements):
            aggregate = elements[int(index)]
        else:
            return None
    return aggregate


def element_types(aggregate: str) -> list[str] | None:
    """The element types of a literal struct, or the one element type of an array or vector; None for anything
    else.

    >>> element_types("{ ptr, i64, [2 x i64] }"), element_types("[4 x double]"), element_types("i64")
    (['ptr', 'i64', '[2 x i64]'], ['double'], None)
    """
    return _elements(aggregate)


def element_at(aggregate: str, indices: Sequence[int]) -> str | None:
    """The type ``extractvalue``/``insertvalue`` with ``indices`` reach in ``aggregate``; None where they do not.

    >>> element_at("{ { ptr, i64 }, i32 }", [0, 1]), element_at("[2 x { ptr }]", [1]), element_at("i64", [0])
    ('i64', '{ ptr }', None)
    """
    return _element_at(aggregate, [str(i) for i in indices])


def type_written_at(tokens: Sequence[Token], index: int) -> tuple[str, int] | None:
    """The type written from ``tokens[index]`` on (significant tokens, as :func:`~pyjlad.ir.instructions.significant`
    gives them) and the index of the token after it; None where no type starts there.

    >>> from pyjlad.ir.lexer import tokenize
    >>> from pyjlad.ir.instructions import significant
    >>> type_written_at(significant(tokenize("%a = alloca { ptr, i64 }, align 8")), 3)
    ('{ ptr, i64 }', 8)
    """
    return _type_at(tokens, index)


def _vector_of(type_text: str, element: str) -> str:
    """``element``, or a vector of it as long as ``type_text`` where that is a vector."""
    tokens = significant(tokenize(type_text))
    if len(tokens) > 3 and tokens[0].text == "<" and tokens[2].text == "x" and tokens[1].text.isdigit():
        return f"<{tokens[1].text} x {element}>"
    return element


def result_type(line: str | Instruction) -> str | None:
    """The type of the value ``line`` defines; ``None`` where it defines none or the opcode is not one read here.

    >>> result_type("  %m = tail call fastcc { i64, i1 } @f(i64 %a)"), result_type("  %p = alloca [4 x i8], align 8")
    ('{ i64, i1 }', 'ptr')
    >>> result_type("  %x = sitofp i64 %n to double"), result_type("  %v = select i1 %c, <2 x double> %a, <2 x double> %b")
    ('double', '<2 x double>')
    >>> result_type("  %e = extractelement <4 x double> %v, i64 0"), result_type("  %g = getelementptr inbounds i8, ptr %p, i64 8")
    ('double', 'ptr')
    >>> result_type("  store double %v, ptr %p") is None
    True
    """
    instruction = parse_instruction(line) if isinstance(line, str) else line
    if instruction is None or instruction.result is None:
        return None
    opcode = instruction.opcode
    rest = significant(instruction.after_opcode())
    parts = split_top_level(rest)
    found = _type_at(rest, _skip(rest, 0))
    if opcode in _TYPE_FIRST:
        return found[0] if found else None
    if opcode in ("icmp", "fcmp"):
        typed = _type_at(rest, _skip(rest, _skip(rest, 0) + 1))
        return _vector_of(typed[0], "i1") if typed else None
    if opcode == "alloca":
        return "ptr"
    if opcode == "getelementptr":
        return "ptr" if not any(t.text == "<" for t in rest) else None
    if opcode in _CASTS:
        to = [k for k, t in enumerate(rest) if t.text == "to"]
        typed = _type_at(rest, to[-1] + 1) if to else None
        return typed[0] if typed else None
    if opcode == "select" and len(parts) >= 3:
        typed = _type_at(parts[1], 0)
        return typed[0] if typed else None
    if opcode == "extractelement" and found:
        elements = _elements(found[0])
        return elements[0] if elements else None
    if opcode == "extractvalue" and found:
        return _element_at(found[0], ["".join(t.text for t in part) for part in parts[1:]])
    if opcode == "shufflevector" and found and len(parts) == 3:
        mask = _type_at(parts[2], 0)
        elements = _elements(found[0])
        lanes = significant(tokenize(mask[0]))[1].text if mask else ""
        return f"<{lanes} x {elements[0]}>" if elements and lanes.isdigit() else None
    if opcode == "atomicrmw" and len(parts) >= 2:
        typed = _type_at(parts[1], 0)
        return typed[0] if typed else None
    if opcode == "cmpxchg" and len(parts) >= 2:
        typed = _type_at(parts[1], 0)
        return f"{{ {typed[0]}, i1 }}" if typed else None
    if opcode in ("call", "invoke"):
        return _call_type(instruction)
    return None


def _call_type(instruction: Instruction) -> str | None:
    """The return type of a call: the type written just before the callee (or before its function type)."""
    call = instruction.call()
    tokens = significant(list(instruction.tokens))
    at = next((k for k, t in enumerate(tokens) if t.text == (call.callee if call else None)
               and k + 1 < len(tokens) and tokens[k + 1].text == "("), None)
    if at is None:
        return None
    opcode = next(k for k, t in enumerate(tokens) if t.text == instruction.opcode)
    start = _skip(tokens, opcode + 1)
    typed = _type_at(tokens, start)
    if typed is None or typed[0] == "void":
        return None
    return typed[0] if typed[1] == at or tokens[typed[1]].text == "(" else None
