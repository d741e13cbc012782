"""Instructions of a function body: :func:`parse_instruction` reads one body line (through the
lexer, :mod:`pyjlad.ir.lexer`) into an :class:`Instruction`, and :meth:`Instruction.call` reads a call
site into a :class:`Call`.

Body lines stay text in :class:`~pyjlad.ir.items.Function`; these classes are views of one line, built
when a pass asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lexer import Token, closing, split_top_level, tokenize, words
from .names import decode_name

__all__ = ["Call", "Instruction", "integer_valued", "parse_instruction", "significant", "valued_call"]


@dataclass
class Call:
    """A call (or invoke) site: the callee symbol and its argument texts.

    Attributes
    ----------
    callee : str
        ``@name`` of a direct call, a ``%value`` of an indirect one.
    arguments : list of str
        Each argument as written (``ptr nonnull %x``, ``double 1.0``).
    """

    callee: str
    arguments: list[str]

    @property
    def values(self) -> list[str]:
        """The last word of each argument: the value passed (``%x``, ``1.0``, ``@g``)."""
        return [(words(tokenize(a)) or [""])[-1] for a in self.arguments]


@dataclass(frozen=True)
class Instruction:
    """One body line that is an instruction: its result (``%x`` or ``None``), opcode and tokens."""

    text: str
    result: str | None
    opcode: str
    tokens: tuple[Token, ...]

    def operands(self) -> list[str]:
        """The local values (``%x``) the instruction reads, in order, its result excluded."""
        found = [t.text for t in self.tokens if t.kind == "local"]
        if self.result is not None and found and found[0] == self.result:
            found = found[1:]
        return found

    def phi_incoming(self) -> list[tuple[str, str]]:
        """``(value, block)`` pairs of a ``phi`` (``[ %a, %bb ]``); ``[]`` for other opcodes."""
        if self.opcode != "phi":
            return []
        pairs, index, tokens = [], 0, self.tokens
        while index < len(tokens):
            if tokens[index].text == "[":
                end = closing(tokens, index)
                parts = ["".join(t.text for t in part).strip() for part in split_top_level(tokens[index + 1:end])]
                if len(parts) == 2:
                    pairs.append((parts[0], parts[1]))
                index = end
            index += 1
        return pairs

    def after_opcode(self) -> list[Token]:
        """The tokens after the opcode, comments left out and leading whitespace dropped (whitespace between
        tokens kept: it separates words)."""
        tokens = [t for t in self.tokens if t.kind != "comment"]
        start = 0
        if self.result is not None:
            start = next(k for k, t in enumerate(tokens) if t.text == "=") + 1
        index = next(k for k in range(start, len(tokens)) if tokens[k].text == self.opcode)
        rest = tokens[index + 1:]
        while rest and rest[0].kind == "ws":
            rest = rest[1:]
        return rest

    def address(self) -> str | None:
        """The address of a plain (neither atomic nor volatile) ``load`` or ``store`` through a ``ptr``; ``None``
        for anything else.

        >>> parse_instruction("  %v = load double, ptr %p, align 8").address()
        '%p'
        >>> parse_instruction("  store atomic double %v, ptr %p unordered, align 8").address() is None
        True
        """
        if self.opcode not in ("load", "store"):
            return None
        rest = self.after_opcode()
        if rest and rest[0].text in ("atomic", "volatile"):
            return None
        parts = [words(part) for part in split_top_level(rest)]
        if len(parts) < 2 or len(parts[1]) != 2 or parts[1][0] != "ptr":
            return None
        return parts[1][1]

    def with_metadata(self, kind: str, node: str) -> str:
        """The instruction's line with ``, <kind> <node>`` after its last significant token (before a comment).

        >>> parse_instruction("  %v = load double, ptr %p, align 8").with_metadata("!invariant.load", "!3")
        '  %v = load double, ptr %p, align 8, !invariant.load !3'
        """
        tokens = list(self.tokens)
        last = max(k for k, t in enumerate(tokens) if t.kind not in ("ws", "comment"))
        head, tail = "".join(t.text for t in tokens[:last + 1]), "".join(t.text for t in tokens[last + 1:])
        return f"{head}, {kind} {node}{tail}"

    def call(self) -> Call | None:
        """The call site, for a ``call``/``invoke``/``callbr``; ``None`` for other opcodes."""
        if self.opcode not in ("call", "invoke", "callbr"):
            return None
        depth = 0
        tokens = self.tokens
        for index, token in enumerate(tokens):
            if token.kind == "punct" and token.text in "([{<":
                depth += 1
            elif token.kind == "punct" and token.text in ")]}>":
                depth -= 1
            elif (depth == 0 and token.kind in ("global", "local") and token.text != self.result
                  and index + 1 < len(tokens) and tokens[index + 1].text == "("):
                end = closing(tokens, index + 1)
                inner = tokens[index + 2:end]
                args = ["".join(t.text for t in part).strip() for part in split_top_level(inner)]
                return Call(token.text, [a for a in args if a])
        return None


def significant(tokens: list[Token]) -> list[Token]:
    """``tokens`` without whitespace and comments."""
    return [t for t in tokens if t.kind not in ("ws", "comment")]


def parse_instruction(line: str) -> Instruction | None:
    """The instruction on body line ``line``; ``None`` for a label, blank or comment line."""
    tokens = tokenize(line)
    kept = significant(tokens)
    if not kept or (len(kept) >= 2 and kept[1].text == ":" and kept[0].kind in ("word", "string")):
        return None
    result = None
    rest = kept
    if len(rest) >= 2 and rest[0].kind == "local" and rest[1].text == "=":
        result, rest = rest[0].text, rest[2:]
    opcode_index = 0
    while opcode_index < len(rest) - 1 and rest[opcode_index].text in ("tail", "musttail", "notail"):
        opcode_index += 1
    opcode = rest[opcode_index].text if rest else ""
    return Instruction(line, result, opcode, tuple(tokens))


def valued_call(line: str) -> tuple[str, Call, list[str]] | None:
    """``(result, call, name)`` where ``line`` assigns the result of a call, ``name`` the callee's unquoted name
    split at its dots (an intrinsic's family and types); ``None`` for any other line.

    >>> result, call, name = valued_call("  %m = tail call i64 @llvm.smax.i64(i64 %a, i64 3)")
    >>> result, call.values, name
    ('%m', ['%a', '3'], ['llvm', 'smax', 'i64'])
    >>> valued_call("  call void @f(ptr %p)") is None, valued_call("  %x = add i64 %a, 1") is None
    (True, True)
    """
    instruction = parse_instruction(line)
    if instruction is None or instruction.result is None:
        return None
    call = instruction.call()
    return None if call is None else (instruction.result, call, decode_name(call.callee).split("."))


#: Words between an opcode and its value's type that are not the type.
_FLAGS = frozenset(("nuw", "nsw", "exact", "disjoint", "volatile", "atomic", "fast", "nnan", "ninf", "nsz"))
#: The integer types an index or a count has.
_INTEGER_TYPES = frozenset(("i16", "i32", "i64"))


def integer_valued(line: str) -> bool:
    """Whether ``line`` is an instruction whose value is an integer or a vector of them (16 to 64 bits): read
    from the type that follows its opcode (and flags), as in ``load``, ``call``, ``add``, ``phi``.

    >>> integer_valued("  %m = tail call <8 x i64> @llvm.smin.v8i64(<8 x i64> %a, <8 x i64> %b) #8")
    True
    >>> integer_valued("%.87 = add nuw nsw i64 %arg.high, %arg.low"), integer_valued("%v = load i64, ptr %p")
    (True, True)
    >>> integer_valued("%p = load ptr, ptr %q"), integer_valued("%c = fcmp uno <8 x double> %w, %z")
    (False, False)
    >>> integer_valued("llvm.smax"), integer_valued("store i64 %v, ptr %p")
    (False, False)
    """
    instruction = parse_instruction(line)
    if instruction is None or instruction.result is None:
        return False
    for token in instruction.after_opcode():
        if token.kind == "ws" or token.text in _FLAGS or token.text in ("<", "x") or token.text.isdigit():
            continue
        return token.text in _INTEGER_TYPES
    return False

