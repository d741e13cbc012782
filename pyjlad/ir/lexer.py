"""The one tokenizer of LLVM IR text in pyjlad.

Lossless: the tokens of a text, concatenated, are the text (whitespace and
comments are tokens too), so every rewrite built on them can reproduce the
parts it does not touch byte for byte. Never fails: a character no rule knows
becomes a one-character ``punct`` token.

Token kinds
-----------
``ws``        whitespace (spaces, tabs, newlines)
``comment``   ``; ...`` up to the end of the line
``cstring``   ``c"..."`` (a constant byte string; ``@``, ``%`` and ``\\22`` inside are data)
``string``    ``"..."`` (quoted attribute keys/values, section names, quoted labels)
``global``    ``@name``, ``@"quoted name"``, ``@0``
``local``     ``%name``, ``%"quoted name"``, ``%0``
``attrgroup`` ``#0``
``metadata``  ``!name``, ``!0``, ``!"string"`` (a lone ``!`` of ``!{`` is ``punct``)
``comdat``    ``$name``
``word``      keywords, types, numbers, labels: ``define``, ``i64``, ``x``, ``1.0e+00``, ``0x7FF0...``, ``...``
``punct``     every other single character: brackets, ``,``, ``=``, ``*``, ``:``, ``!``

LLVM's lexer has no backslash escape inside quotes: ``"`` always ends a
string, and a quote inside a name or constant is written ``\\22``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

from ..errors import IRError, IRParseError
from .names import decode_name, symbol_for

__all__ = [
    "Token", "tokenize", "texts_of", "substitute", "OPEN", "CLOSE", "closing", "split_top_level", "words", "decode_name",
    "symbol_for", "substitute_kinds",
]

_NAME = r'(?:"[^"]*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+)'
_RULES = (
    ("ws", r"\s+"),
    ("comment", r";[^\n]*"),
    ("cstring", r'c"[^"]*"'),
    ("global", "@" + _NAME),
    ("local", "%" + _NAME),
    ("attrgroup", r"#\d+"),
    ("metadata", r'!(?:"[^"]*"|[-a-zA-Z$._][-a-zA-Z$._0-9\\]*|\d+)'),
    ("comdat", r"\$" + _NAME),
    ("string", r'"[^"]*"'),
    ("word", r"[-a-zA-Z$._0-9]+(?:\+[0-9]+)?"),
    ("punct", r"[\s\S]"),
)
_MASTER = re.compile("|".join(f"(?P<{kind}>{pattern})" for kind, pattern in _RULES))

#: Opening and closing brackets (``<``/``>``: vector and packed-struct types).
OPEN = frozenset("([{<")
CLOSE = frozenset(")]}>")


class Token(NamedTuple):
    """One token: its kind (see the module docstring) and its exact text."""

    kind: str
    text: str


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``; ``"".join(t.text for t in tokenize(text)) == text``."""
    return [Token(m.lastgroup, m.group()) for m in _MASTER.finditer(text)]  # type: ignore[arg-type]


@functools.cache
def _scanner(kind: str) -> re.Pattern[str]:
    """The rules in their order, ``kind`` captured; whitespace and punctuation (one character each, never
    the start of another token) are stepped over by the search itself."""
    if kind not in dict(_RULES) or kind in ("ws", "punct"):
        raise IRError(f"no token kind {kind!r} to scan for")
    return re.compile("|".join(f"({pattern})" if name == kind else f"(?:{pattern})"
                               for name, pattern in _RULES if name not in ("ws", "punct")))


def texts_of(text: str, kind: str) -> list[str]:
    """The texts of the ``kind`` tokens of ``text``, in order.

    The same as ``[t.text for t in tokenize(text) if t.kind == kind]`` (other tokens are matched but
    never built, several times faster); ``kind`` is neither ``ws`` nor ``punct``.
    """
    return [m.group(1) for m in _scanner(kind).finditer(text) if m.group(1) is not None]


def substitute(text: str, kind: str, replace: Callable[[str], str]) -> str:
    """``text`` with each ``kind`` token replaced by ``replace(token text)``, every other byte kept.

    The same as ``"".join(replace(t.text) if t.kind == kind else t.text for t in tokenize(text))``.
    """
    return _scanner(kind).sub(lambda m: m.group(0) if m.group(1) is None else replace(m.group(1)), text)


@functools.cache
def _kinds_scanner(kinds: frozenset[str]) -> re.Pattern[str]:
    """The rules but whitespace and punctuation, in their order, each a named group."""
    if not kinds <= dict(_RULES).keys() - {"ws", "punct"}:
        raise IRError(f"no token kinds {sorted(kinds)!r} to scan for")
    return re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in _RULES if name not in ("ws", "punct")))


def substitute_kinds(text: str, kinds: frozenset[str], replace: Callable[[str], str]) -> str:
    """``text`` with each token of one of ``kinds`` replaced by ``replace(token text)``, every other byte kept.

    The same as ``"".join(replace(t.text) if t.kind in kinds else t.text for t in tokenize(text))``;
    ``kinds`` holds neither ``ws`` nor ``punct``.

    >>> substitute_kinds('@f(ptr %x) ; %y', frozenset({"global", "local"}), str.upper)
    '@F(ptr %X) ; %y'
    """
    return _kinds_scanner(kinds).sub(lambda m: replace(m.group()) if m.lastgroup in kinds else m.group(), text)


def _depth_change(token: Token) -> int:
    if token.kind != "punct":
        return 0
    if token.text in OPEN:
        return 1
    if token.text in CLOSE:
        return -1
    return 0


def closing(tokens: Sequence[Token], start: int) -> int:
    """Index of the bracket closing the one at ``tokens[start]``.

    Raises
    ------
    ValueError
        If ``tokens[start]`` is not an opening bracket or is never closed.
    """
    if _depth_change(tokens[start]) != 1:
        raise IRParseError(f"token {start} ({tokens[start].text!r}) is not an opening bracket")
    depth = 0
    for index in range(start, len(tokens)):
        depth += _depth_change(tokens[index])
        if depth == 0:
            return index
    raise IRParseError(f"bracket {tokens[start].text!r} at token {start} is never closed")


def _split(tokens: Sequence[Token], at: Callable[[Token], bool]) -> Iterator[list[Token]]:
    depth, current = 0, []
    for token in tokens:
        if depth == 0 and at(token):
            yield current
            current = []
            continue
        depth += _depth_change(token)
        current.append(token)
    yield current


def split_top_level(tokens: Sequence[Token]) -> list[list[Token]]:
    """``tokens`` split at the commas outside brackets (operand and parameter lists), commas dropped.

    An empty sequence gives one empty part, as ``"".split(",")`` does.
    """
    return list(_split(tokens, lambda t: t.kind == "punct" and t.text == ","))


def words(tokens: Sequence[Token]) -> list[str]:
    """The texts of ``tokens`` split at whitespace outside brackets: ``ptr noalias align 8 %x`` gives
    ``["ptr", "noalias", "align", "8", "%x"]``, ``{ i64, ptr } %s`` gives ``["{ i64, ptr }", "%s"]``."""
    groups = _split(tokens, lambda t: t.kind == "ws")
    return ["".join(t.text for t in group) for group in groups if group]
