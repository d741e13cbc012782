"""Down-levelling: LLVM 22's spelling of instructions, attributes and intrinsics to LLVM 15's.

Numba 0.68 prints IR with LLVM 22's syntax (``captures(none)``, ``memory(...)``, ``range(...)``,
``getelementptr inbounds nuw``, ``samesign``, vector math intrinsics LLVM 15 lacks...). The Enzyme
plugin runs under LLVM 15 and Julia's ``llvmcall`` reads LLVM 16/18, so the ``down-level`` pass
(:mod:`pyjlad.portable_pipeline`) rewrites each line here. This is the one part of the IR layer
that works on text by design: it changes spelling, line by line, and LLVM 22 cannot read its output.
Dropping an attribute or a metadata attachment is always safe: it only removes information an
optimizer may use.
"""

from __future__ import annotations

import re

from ..errors import PortabilityError

__all__ = ["NEW_MATH_INTRINSICS", "rewrite_line", "split_top_level", "tokenize_attributes", "translate_attribute_group"]

# Math intrinsics that LLVM 15 lacks (added in 17-20): the libm call Enzyme
# already has derivative rules for, per floating-point suffix.
NEW_MATH_INTRINSICS = {
    "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "atan2": "atan2",
    "exp10": "exp10",
}
_FLOAT_SUFFIX = {"f64": "", "f32": "f"}
_NEW_INTRINSIC_RE = re.compile(
    r"@llvm\.(" + "|".join(NEW_MATH_INTRINSICS) + r")\.(f64|f32)\b"
)
# The vector forms of the same intrinsics (from Numba's loop vectorizer) are
# scalarized into one libm call per lane.
_NEW_VECTOR_CALL_RE = re.compile(
    r"^(\s*)(%[-\w.$]+) = (?:tail |notail )?call (?:[a-z]+ )*<(\d+) x (double|float)> "
    r"@llvm\.(" + "|".join(NEW_MATH_INTRINSICS) + r")\.v\d+f(?:64|32)\((.*)\)(?:\s*#\d+)?\s*$"
)
_NEW_VECTOR_DECL_RE = re.compile(r"^declare .*@llvm\.(" + "|".join(NEW_MATH_INTRINSICS) + r")\.v\d+f(64|32)\(")

# Instruction-level syntax newer than LLVM 15, with its LLVM 15 spelling.
_LINE_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bcaptures\(none\)"), "nocapture"),
    (re.compile(r"\bcaptures\([^)]*\)\s?"), ""),
    (re.compile(r"\brange\([^()]*\)\s?"), ""),
    (re.compile(r"\binitializes\((?:\([^()]*\)(?:,\s*)?)+\)\s?"), ""),
    (re.compile(r"\bnofpclass\([^()]*\)\s?"), ""),
    (re.compile(r"\b(?:dead_on_unwind|dead_on_return|writable)\s"), ""),
    (re.compile(r"\bgetelementptr (inbounds )?(?:(?:nuw|nusw) )+"), r"getelementptr \1"),
    (re.compile(r"\b(zext|uitofp) nneg "), r"\1 "),
    (re.compile(r"\bicmp samesign "), "icmp "),
    (re.compile(r"\bor disjoint "), "or "),
    (re.compile(r"\btrunc (?:(?:nuw|nsw) )+"), "trunc "),
    # Metadata attachments (!tbaa, !noalias, !prof, !llvm.loop, ...).
    (re.compile(r",\s*![-a-zA-Z$._0-9]+\s+!\d+"), ""),
    # A function's own attachments, before its body (`define ... #0 !dbg !6 {`: Numba's debug=True).
    (re.compile(r"(?:\s+![-a-zA-Z$._0-9]+\s+!\d+)+(?=\s*\{\s*$)"), ""),
)
# Masked memory intrinsics: LLVM 22 passes the alignment as a parameter
# attribute (`ptr align 8 %p`), LLVM 15 as an `i32` argument after the pointer.
_MASKED_LOAD_DECL_RE = re.compile(r"^(declare .*@llvm\.masked\.(?:load|gather)\.[\w.]+\()([^,]+),")
_MASKED_STORE_DECL_RE = re.compile(r"^(declare .*@llvm\.masked\.(?:store|scatter)\.[\w.]+\()([^,]+, [^,]+),")
_HINT_INTRINSICS = ("@llvm.lifetime.", "@llvm.experimental.noalias.scope.decl", "@llvm.dbg.")
_SPLAT_RE = re.compile(r"splat \(([^()]+?) ([^()]+)\)")
_VECTOR_TYPE_RE = re.compile(r"<(\d+) x ([^>]+)>")

# Function attributes LLVM 15 knows and that are worth keeping.
_KEPT_FN_ATTRS = frozenset(
    """nounwind readnone readonly writeonly argmemonly inaccessiblememonly
    inaccessiblemem_or_argmemonly noinline alwaysinline norecurse willreturn
    nofree nosync mustprogress speculatable cold noreturn returns_twice
    inlinehint nocallback""".split()
)

_MEMORY_TRANSLATION = {
    "none": "readnone",
    "read": "readonly",
    "write": "writeonly",
    "argmem: readwrite": "argmemonly",
    "argmem: read": "argmemonly readonly",
    "argmem: write": "argmemonly writeonly",
    "inaccessiblemem: readwrite": "inaccessiblememonly",
    "argmem: readwrite, inaccessiblemem: readwrite": "inaccessiblemem_or_argmemonly",
}

def tokenize_attributes(content: str) -> list[str]:
    """Split an attribute list on spaces outside parentheses and quotes."""
    tokens, depth, quoted, current = [], 0, False, []
    for ch in content:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        if ch == " " and depth == 0 and not quoted:
            if current:
                tokens.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        tokens.append("".join(current))
    return tokens


def translate_attribute_group(content: str) -> str:
    """Keep the LLVM 15 function attributes of a group, translating ``memory(...)``."""
    kept: list[str] = []
    for token in tokenize_attributes(content.strip()):
        if token in _KEPT_FN_ATTRS:
            kept.append(token)
        elif token.startswith("memory(") and token.endswith(")"):
            translated = _MEMORY_TRANSLATION.get(token[len("memory("):-1])
            if translated:
                kept.extend(translated.split())
        # Everything else (string attributes, target features, uwtable kinds,
        # newer attributes) is dropped: dropping an attribute is always safe.
    return " ".join(dict.fromkeys(kept))


def _scalarize_vector_call(match: re.Match[str]) -> str:
    indent, result, lanes, elem, name, args_text = match.groups()
    args = [a.strip() for a in split_top_level(args_text)]
    vector_ty = f"<{lanes} x {elem}>"
    fn = NEW_MATH_INTRINSICS[name] + ("" if elem == "double" else "f")
    lines = []
    previous = "poison"
    base = "pj." + result.lstrip("%").replace('"', "")
    for lane in range(int(lanes)):
        scalars = []
        for k, arg in enumerate(args):
            value = arg[len(vector_ty):].strip() if arg.startswith(vector_ty) else arg
            lines.append(f"{indent}%{base}.a{k}.l{lane} = extractelement {vector_ty} {value}, i64 {lane}")
            scalars.append(f"{elem} %{base}.a{k}.l{lane}")
        lines.append(f"{indent}%{base}.r.l{lane} = call {elem} @{fn}({', '.join(scalars)})")
        target = result if lane == int(lanes) - 1 else f"%{base}.v.l{lane}"
        lines.append(f"{indent}{target} = insertelement {vector_ty} {previous}, {elem} %{base}.r.l{lane}, i64 {lane}")
        previous = target
    return "\n".join(lines)


def split_top_level(text: str) -> list[str]:
    """Split ``text`` at the commas outside any brackets (LLVM parameter and operand lists)."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "(<{[":
            depth += 1
        elif ch in ")>}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def rewrite_line(line: str) -> str:
    stripped = line.lstrip()
    if "@llvm." in line and ("x double>" in line or "x float>" in line):
        if _NEW_VECTOR_DECL_RE.match(line):
            return ""
        vector_call = _NEW_VECTOR_CALL_RE.match(line)
        if vector_call:
            line = _scalarize_vector_call(vector_call)
    # Debug records (LLVM 19+), lifetime markers (whose signature changed in
    # LLVM 22) and intrinsics whose operands are the metadata dropped here are
    # optimization or debugging hints only: dropping them is always safe.
    if stripped.startswith("#dbg_") or any(name in line for name in _HINT_INTRINSICS):
        return ""
    for pattern, replacement in _LINE_REWRITES:
        line = pattern.sub(replacement, line)
    if "splat (" in line:
        line = _SPLAT_RE.sub(lambda m: _expand_splat(line, m), line)
    if "@llvm.masked." in line:
        line = _rewrite_masked(line)
    if "@llvm." in line:
        line = _NEW_INTRINSIC_RE.sub(
            lambda m: "@" + NEW_MATH_INTRINSICS[m.group(1)] + _FLOAT_SUFFIX[m.group(2)],
            line,
        )
    return line


_MASKED_CALL_RE = re.compile(r"@llvm\.masked\.(load|gather|store|scatter)\.[\w.]+\(")
#: The position of the pointer operand(s) of each masked memory intrinsic.
_MASKED_POINTER_OPERAND = {"load": 0, "gather": 0, "store": 1, "scatter": 1}
_ALIGN_ATTR_RE = re.compile(r"\s+align (\d+)(?=\s)")


def _closing_paren(text: str, start: int) -> int:
    """Index of the ``)`` closing the bracket level open at ``start`` (just after a ``(``)."""
    depth = 0
    for k in range(start, len(text)):
        ch = text[k]
        if ch in "(<{[":
            depth += 1
        elif ch in ")>}]":
            if depth == 0:
                return k
            depth -= 1
    raise PortabilityError(f"unbalanced brackets in: {text.strip()}")


def _rewrite_masked(line: str) -> str:
    """Masked load/store/gather/scatter: LLVM 22's ``ptr align N %p`` -> LLVM 15's ``ptr %p, i32 N``.

    Operands are split at top-level commas, so constant vector operands
    (``<8 x double> <double 1.0, ...>``) keep their commas.
    """
    if line.startswith("declare "):
        if "i32 immarg" in line:
            return line
        line = _MASKED_LOAD_DECL_RE.sub(r"\1\2, i32 immarg,", line)
        return _MASKED_STORE_DECL_RE.sub(r"\1\2, i32 immarg,", line)
    out, position = [], 0
    for match in _MASKED_CALL_RE.finditer(line):
        if match.start() < position:
            continue
        close = _closing_paren(line, match.end())
        operands = split_top_level(line[match.end():close])
        at = _MASKED_POINTER_OPERAND[match.group(1)]
        if len(operands) == 4:  # already LLVM 15's form (the alignment is an operand)
            continue
        align = _ALIGN_ATTR_RE.search(operands[at] + " ")
        operands[at] = _ALIGN_ATTR_RE.sub("", operands[at] + " ").rstrip()
        operands.insert(at + 1, f" i32 {align.group(1) if align else 1}")
        out += [line[position:match.end()], ",".join(operands)]
        position = close
    return "".join(out) + line[position:]


def _expand_splat(line: str, match: re.Match[str]) -> str:
    """``splat (T v)`` -> ``<T v, T v, ...>``; the length comes from the nearest ``<N x T>`` before it."""
    element, value = match.group(1), match.group(2)
    lengths = [
        int(v.group(1)) for v in _VECTOR_TYPE_RE.finditer(line, 0, match.start())
        if v.group(2).strip() == element
    ]
    if not lengths:
        raise PortabilityError(f"cannot find the vector type of {match.group(0)!r} in: {line.strip()}")
    return "<" + ", ".join([f"{element} {value}"] * lengths[-1]) + ">"


