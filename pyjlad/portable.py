"""The parts of a portable module: pyjlad's runtime replacements, error-path stubs, the module split into items.

Numba 0.68 prints IR with LLVM 22's syntax, and the module it keeps holds much more than the
function to differentiate: the CPython and ``cfunc`` wrappers, ``NumbaEnv`` globals, Python C-API
declarations and, once compiled, x86-specific intrinsics. The passes of
:mod:`pyjlad.portable_pipeline` (:func:`~pyjlad.portable_pipeline.make_portable`) keep only the entry
function and what it transitively references, with names that are the same in every process
(:mod:`pyjlad.stable_names`), and rewrite every construct newer than LLVM 15 (:mod:`pyjlad.ir.downlevel`).
The result is accepted by ``llvm-as`` 15, 16, 19 and 22 alike, which is what the Enzyme plugin
(LLVM 15) and Julia's ``Base.llvmcall`` (LLVM 16/18) need. This module holds what those passes share.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import runtime
from .errors import PortabilityError
from .ir.downlevel import NEW_MATH_INTRINSICS, split_top_level, translate_attribute_group
from .ir.lexer import Token, substitute, texts_of, tokenize

__all__ = ["PortableModule", "PORTABLE_RUNTIME", "RUNTIME_CALL_DTOR", "split_module", "split_top_level"]



def _function_symbol(line: str) -> str | None:
    """The ``@`` symbol a ``define``/``declare`` line defines or declares (its first ``global`` token, which
    must open the parameter list); ``None`` for any other line.

    >>> _function_symbol('declare double @"a b"(double) #3')
    '@"a b"'
    >>> _function_symbol("@g = global i64 0") is None
    True
    """
    if not line.startswith(("define", "declare")):
        return None
    tokens = tokenize(line)
    if tokens[0].kind != "word" or tokens[0].text not in ("define", "declare"):
        return None
    first = next((k for k, t in enumerate(tokens) if t.kind == "global"), None)
    if first is None or first + 1 >= len(tokens) or tokens[first + 1].text != "(":
        return None
    return tokens[first].text


def _global_symbol(line: str) -> str | None:
    """The ``@`` symbol a global variable line (``@g = ...``) defines; ``None`` for any other line."""
    tokens = tokenize(line)
    if not tokens or tokens[0].kind != "global":
        return None
    rest = [t for t in tokens[1:3] if t.kind != "ws"]
    return tokens[0].text if rest[:1] and rest[0].text == "=" and (tokens[1].kind == "ws" or
                                                                      tokens[1].text == "=") else None


def _attribute_group(line: str) -> tuple[str, str] | None:
    """``(#N, attributes text)`` of an ``attributes #N = { ... }`` line; ``None`` for any other line."""
    tokens = tokenize(line)
    head = [t.text for t in tokens[:7]]
    if len(head) < 7 or head[:2] != ["attributes", " "] or tokens[2].kind != "attrgroup" or head[3:] != [
            " ", "=", " ", "{"]:
        return None
    end = len(tokens)
    while end > 7 and tokens[end - 1].kind == "ws":
        end -= 1
    if end <= 7 or tokens[end - 1].text != "}":
        return None
    return tokens[2].text, "".join(t.text for t in tokens[7:end - 1])


def _trailing_group(line: str) -> tuple[int, str] | None:
    """``(offset, #N)`` of the attribute group ending a declaration (after whitespace); offset is where
    that whitespace starts. ``None`` when the line does not end with one."""
    tokens = tokenize(line)
    end = len(tokens)
    while end > 0 and tokens[end - 1].kind == "ws":
        end -= 1
    if end < 2 or tokens[end - 1].kind != "attrgroup" or tokens[end - 2].kind != "ws":
        return None
    return sum(len(t.text) for t in tokens[:end - 2]), tokens[end - 1].text

#: libm functions (double; the float versions add an ``f``) Enzyme differentiates
#: by name and CUDA's libdevice provides as ``__nv_<name>``.
LIBM_FUNCTIONS = frozenset(
    """sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 exp10
    expm1 log log2 log10 log1p sqrt cbrt pow hypot fabs fmod floor ceil round trunc
    erf erfc tgamma lgamma fmax fmin copysign""".split()
)
# Numba's memory-management runtime, written as IR that Enzyme can read: replacement runtime
# IR in package data (pyjlad/runtime/*.ll, whose header comments say what each function
# replaces and why Enzyme needs it). nrt.ll: Numba's NRT reference counting and allocator
# (same semantics and MemInfo layout as nrt.cpp, but malloc/free Enzyme can shadow). A MemInfo
# with a destructor (e.g. one wrapping a NumPy array owned by Python) is handed to Numba's own
# NRT_MemInfo_call_dtor, exported under the name RUNTIME_CALL_DTOR (resolved by the engine that
# loads the module).
RUNTIME_CALL_DTOR = "pyjlad_NRT_MemInfo_call_dtor"

PORTABLE_RUNTIME = runtime.definitions("nrt.ll")
# cblas.ll: Numba's BLAS helpers (numba_xxdot/gemv/gemm/nrm2 in numba/_lapack.c) over CBLAS,
# which Enzyme differentiates with its BLAS rules, one definition per kind.
# Numba always passes the kind as a constant ('d' = 100, 's' = 115); calls are
# renamed to the kind's own definition, so each has one element type (Enzyme's
# type analysis rejects a function storing both float and double to one pointer).
_BLAS_KINDS = {"100": ("d", "double"), "115": ("s", "float")}
_BLAS_CALL_RE = re.compile(r"@numba_xx(dot|gemv|gemm|nrm2)\(i8 (100|115),")
_LAPACK_CALL_RE = re.compile(r"@(numba_xxgetrf|numba_ez_xxgetri|numba_xgesv|numba_xxpotrf)\(i8 (100|115),")
_BLAS_RUNTIME = runtime.definitions("cblas.ll")
PORTABLE_RUNTIME.update(_BLAS_RUNTIME)

# What each runtime definition refers to (read from its IR).
_PORTABLE_RUNTIME_DEPS = {**runtime.dependencies("nrt.ll"), **runtime.dependencies("cblas.ll")}
# Declarations the definitions above need (the runtime destructor is inactive and `nofree`:
# see nrt.ll).
_PORTABLE_RUNTIME_DECLS = {**runtime.declarations("nrt.ll"), **runtime.declarations("cblas.ll")}


# Numba runtime helpers that only compute integers (shapes, strides) from their
# arguments: their declarations are marked so that Enzyme treats calls to them as
# inactive and knows they free nothing.
INACTIVE_HELPERS = frozenset({"numba_attempt_nocopy_reshape", "numba_fatal_error"})


# Python C-API functions that Numba's generated code calls only to build the
# message of an exception raised with run-time values (e.g. a shape mismatch in
# a slice assignment). A differentiated module never reads that message: pyjlad
# re-runs the function itself to raise the exception with its text (and the
# Julia engine reports the status). So in the portable module they are stubs
# returning null/zero; the status still says an exception was raised.
ERROR_PATH_STUBS = frozenset({
    "PyUnicode_FromKindAndData", "PyUnicode_FromString", "PyTuple_Pack", "PyObject_Hash",
    "PyErr_SetString", "PyErr_SetNone", "PyErr_Clear", "Py_DecRef", "Py_IncRef",
})
_ZERO = {"ptr": "null", "void": "", "float": "0.0", "double": "0.0"}


#: Numba's builder of a dynamic exception's arguments (``raise E(f"... {value}")``, shape checks
#: of axis reductions): its address is stored in the exception info, which makes Enzyme process
#: it (its vararg PyTuple_Pack call trips Enzyme's preprocessing). Like the other error-path
#: code it is never needed in a differentiated module (the status still says an exception was
#: raised, and pyjlad re-runs the function for the message): an inactive stub returning null.
_EXCINFO_UNWRAP = "@__excinfo_unwrap_args"


#: Numba's string implementations (numba.cpython.unicode, unicode_support, charseq): reached
#: from the messages of exceptions raised with run-time values (np.sum's axis check). Text
#: carries no derivative, and Enzyme's type analysis cannot type their byte arithmetic.
_STRING_CODE = ("@_ZN5numba7cpython7unicode", "@_ZN5numba7cpython15unicode_support", "@_ZN5numba7cpython7charseq")


def _inactive_definition(text: str) -> str:
    """``text`` (a definition) with the ``"enzyme_inactive"`` function attribute."""
    header, rest = text.split("\n", 1)
    if "enzyme_inactive" in header:
        return text
    return header[:header.rindex("{")].rstrip() + ' "enzyme_inactive" {\n' + rest


def _excinfo_unwrap_stub(symbol: str) -> str:
    return f'define linkonce_odr ptr {symbol}(ptr %args) nounwind "enzyme_inactive" {{\nentry:\n  ret ptr null\n}}'


def _stub(declaration: str) -> str:
    """A definition with the declaration's signature that returns zero/null."""
    match = re.match(r"^declare\s+(?:noalias\s+|noundef\s+)*(\S+)\s+(@[-\w.$]+)\((.*)\)", declaration)
    if match is None:
        raise PortabilityError(f"cannot parse declaration: {declaration}")
    ret, name, params = match.groups()
    names = []
    for k, param in enumerate(p.strip() for p in split_top_level(params) if p.strip()):
        names.append(param if param == "..." else f"{param.split()[0]} %a{k}")
    value = _ZERO.get(ret, "0")
    body = "ret void" if ret == "void" else f"ret {ret} {value}"
    return f"define linkonce_odr {ret} {name}({', '.join(names)}) {{\nentry:\n  {body}\n}}"


def is_libm_function(name: str) -> bool:
    """Whether ``name`` is a libm function of :data:`LIBM_FUNCTIONS` (double, or float with an ``f``)."""
    return name in LIBM_FUNCTIONS or (name.endswith("f") and name[:-1] in LIBM_FUNCTIONS)


def _libm_declaration(line: str, groups: dict[str, str]) -> str:
    """A libm declaration without Numba's ``readonly``.

    Numba declares every libm function it calls "pure" (``readonly``); LLVM
    strengthens that to ``readnone`` for most (``erf``, ``tan``) but not all
    (``erfc``, ``lgamma``). Enzyme marks the functions it knows
    ``readnone`` itself, and a declaration that is both is invalid ("Attributes
    'readnone and readonly' are incompatible", ``math.erfc``). Dropping
    ``readonly`` is always safe; its other attributes are kept inline.
    """
    symbol = _function_symbol(line)
    group = _trailing_group(line)
    if symbol is None or group is None or not is_libm_function(symbol.lstrip("@")):
        return line
    attrs = translate_attribute_group(groups.get(group[1], "")).split()
    if "readonly" not in attrs:
        return line
    kept = " ".join(a for a in attrs if a != "readonly")
    return line[:group[0]] + (" " + kept if kept else "")


def is_inactive_helper(name: str) -> bool:
    """Whether ``name`` is a runtime helper that never carries derivatives.

    The Python C API and the GIL helpers (print(), formatted exception messages)
    are deliberately not listed: Enzyme may replay inactive calls in the reverse
    sweep, and a replayed ``numba_gil_ensure`` deadlocks.
    """
    return name in INACTIVE_HELPERS


def _mark_inactive(line: str) -> str:
    symbol = _function_symbol(line)
    if symbol and is_inactive_helper(symbol.lstrip("@")) and "enzyme_inactive" not in line:
        return line.rstrip() + ' nofree nounwind "enzyme_inactive"'
    return line


@dataclass(frozen=True)
class PortableModule:
    """A self-contained LLVM module holding one Numba function.

    Attributes
    ----------
    text : str
        The module's LLVM IR (opaque pointers, LLVM 15 syntax).
    entry : str
        Name of the entry function (without ``@``), Numba's inner ABI
        function ``i32 (ptr retptr, ptr excinfo, args...)``.
    external_functions : tuple of str
        Functions the module declares but does not define (libm, Numba's
        runtime, LLVM intrinsics); resolved when the module is linked or JIT-ed.
    links : tuple of (str, str)
        ``(helper, kind)`` pairs of Numba LAPACK helpers the module calls as
        ``@<helper>.<kind>``: the modules of :func:`pyjlad.lapack.lapack_module`
        to link with it.
    """

    text: str
    entry: str
    external_functions: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()


@dataclass
class _Entity:
    kind: str  # "global", "define", "declare", "type"
    name: str
    text: str


def split_module(ir: str) -> tuple[list[str], list[_Entity], dict[str, str]]:
    """Split LLVM IR text into header lines, top-level entities and attribute groups."""
    header: list[str] = []
    entities: list[_Entity] = []
    groups: dict[str, str] = {}
    lines = ir.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define "):
            body = [line]
            while not lines[i].startswith("}"):
                i += 1
                body.append(lines[i])
            symbol = _function_symbol(line)
            if symbol is None:
                raise PortabilityError(f"cannot parse function header: {line[:200]}")
            entities.append(_Entity("define", symbol, "\n".join(body)))
        elif line.startswith("declare "):
            symbol = _function_symbol(line)
            if symbol is None:
                raise PortabilityError(f"cannot parse declaration: {line[:200]}")
            entities.append(_Entity("declare", symbol, line))
        elif line.startswith("@"):
            symbol = _global_symbol(line)
            if symbol is None:
                raise PortabilityError(f"cannot parse global: {line[:200]}")
            entities.append(_Entity("global", symbol, line))
        elif line.startswith("%") and " = type " in line:
            entities.append(_Entity("type", line.split(" = ", 1)[0], line))
        elif line.startswith("attributes #"):
            group = _attribute_group(line)
            if group:
                groups[group[0]] = group[1]
        elif line.startswith(("target datalayout", "target triple")):
            header.append(line)
        # Comments, metadata, source_filename, module flags and comdats are dropped.
        i += 1
    return header, entities, groups


def _global_symbols(text: str) -> set[str]:
    """The ``@`` symbols ``text`` mentions, read by the IR lexer.

    The lexer tells quoted names (``@"f.<locals>.func"``, ``%"arg.spéc"``), constant byte strings
    (``c"..@x.."``: data, not references) and comments apart. Stripping ``c"..."`` with a regex does
    not: ``c"[^"]*"`` also matches the end of a quoted name ending in ``c`` and swallows every symbol
    up to the next quote, so a function's callees went missing from the portable module.
    """
    return set(texts_of(text, "global"))


def _references(text: str, own_name: str) -> set[str]:
    """Global symbols ``text`` refers to, other than ``own_name`` (never those inside ``c"..."`` data)."""
    return _global_symbols(text) - {own_name}


def _reachable(entities: dict[str, _Entity], root: str) -> list[str]:
    seen: set[str] = set()
    order: list[str] = []
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        order.append(name)
        if name in PORTABLE_RUNTIME:
            refs = _PORTABLE_RUNTIME_DEPS.get(name, set())
        elif name in entities:
            refs = _references(entities[name].text, name)
        else:
            refs = set()
        stack.extend(sorted(refs - seen))
    return order


def _rename(text: str, old: str, new: str) -> str:
    """``text`` with the ``global`` token ``old`` (an ``@`` symbol) renamed ``new``; ``c"..."`` data and comments
    are kept."""
    if old not in text:
        return text
    return substitute(text, "global", lambda symbol: new if symbol == old else symbol)


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


def _clean_global(text: str) -> str:
    """A global's definition as this function's private state: Numba's environment globals are ``common``
    (``internal`` here), and a standalone module has no comdats."""
    tokens = _without_comdat(_internal(tokenize(text)))
    return "".join(t.text for t in tokens)


_LIBM_CALL_RE = re.compile(
    r"call (double|float) @(" + "|".join(sorted({*NEW_MATH_INTRINSICS.values()})) + r")(f?)\("
)


def _declare_libm_calls(text: str) -> tuple[str, list[str]]:
    declared = {s for s in map(_function_symbol, text.splitlines()) if s}
    added: dict[str, str] = {}
    for match in _LIBM_CALL_RE.finditer(text):
        ty, name = match.group(1), match.group(2) + match.group(3)
        if "@" + name not in declared and name not in added:
            arity = 2 if match.group(2) == "atan2" else 1
            added[name] = f"declare {ty} @{name}({', '.join([ty] * arity)})"
    if not added:
        return text, []
    return text + "\n".join(added.values()) + "\n", list(added)


def dedupe_declarations(text: str) -> str:
    """Drop repeated ``declare`` lines (two names mapped onto one)."""
    seen: set[str] = set()
    out = []
    for line in text.splitlines():
        if line.startswith("declare "):
            symbol = _function_symbol(line)
            if symbol:
                if symbol in seen:
                    continue
                seen.add(symbol)
        out.append(line)
    return "\n".join(out) + "\n"


def has_recursion(text: str) -> bool:
    """Whether a function defined in module ``text`` can call itself (directly or through others).

    Deep recursion needs a deep stack; the engine runs such sweeps on a thread with a large one.
    """
    _, entities, _ = split_module(text)
    defined = {e.name: e for e in entities if e.kind == "define"}
    calls = {name: _global_symbols(e.text.split("\n", 1)[-1]) & defined.keys() for name, e in defined.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: finished

    def cycle_from(name: str) -> bool:
        state[name] = 1
        for callee in calls[name]:
            if state.get(callee) == 1 or (callee not in state and cycle_from(callee)):
                return True
        state[name] = 2
        return False

    return any(name not in state and cycle_from(name) for name in defined)
