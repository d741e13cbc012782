"""Names the same in every process: what Numba names from per-process state, renamed by content.

The portable module's text is part of the gradient disk cache's key, so it must not depend on the
process that made it: the ``stable-names`` and ``unique-names`` passes
(:mod:`pyjlad.portable_pipeline`) use these.

IR text is read through :mod:`pyjlad.ir`'s tokens: symbols are ``global`` tokens, a string constant's
length is the ``[N x i8]`` before its ``cstring`` token. Two regular expressions remain, and both match
inside one *name*, never IR text: :data:`_PROCESS_HASH_NAME_RE` (is a global's name one Numba made from
a per-process hash?) and the mangled-name uid tags :data:`_UID_TAG_RE`/:data:`_NUMBERED_TAG_RE`
(``B3v29``), applied to the text of each token that can hold a name (:func:`_map_names`: symbols,
local values and labels, which LLVM names after inlined functions, the ``c"..."`` messages that
name a symbol, comments).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import NamedTuple

from .ir.lexer import Token, substitute, substitute_kinds, tokenize

__all__ = ["Entity", "name_by_content", "salt_uids", "stable_uids"]


class Entity(NamedTuple):
    """A top-level item as these renamings see it: its kind (``"define"``, ``"declare"``, ``"global"``,
    ``"type"``), its symbol and its text."""

    kind: str
    name: str
    text: str


#: The names Numba gives the constant bytes of string literals (``BaseContext.insert_const_bytes``):
#: ``.bytes.`` and Python's ``hash()`` of the bytes, randomized per process (``@.bytes.-4446739099191175225``;
#: LLVM appends ``.1``, ``.2`` when linking two such constants of one name). The only names of a portable
#: module that change from one process to the next (measured on the fuzzer's programs: bounds-check messages).
_PROCESS_HASH_NAME_RE = re.compile(r"@\.bytes\.-?\d+(?:\.\d+)*")
#: Their names in the portable module: the SHA-256 of the global's definition (a namespace Numba never uses).
_CONTENT_NAME_PREFIX = "@.bytes.content."


def _content_names(entities: list[Entity]) -> dict[str, str]:
    """New names, by content, for the globals Numba named by a per-process hash (old symbol to new).

    Globals of the same definition are numbered in module order (``.1``, ``.2``), which, unlike their
    names, is the same in every process.
    """
    renames: dict[str, str] = {}
    counts: dict[str, int] = {}
    for entity in entities:
        if entity.kind == "global" and _PROCESS_HASH_NAME_RE.fullmatch(entity.name):
            definition = entity.text.split("=", 1)[1]
            base = _CONTENT_NAME_PREFIX + hashlib.sha256(definition.encode()).hexdigest()[:20]
            n = counts[base] = counts.get(base, -1) + 1
            renames[entity.name] = base + (f".{n}" if n else "")
    return renames


def _rename_symbols(text: str, renames: dict[str, str]) -> str:
    """``text`` with the ``@`` symbols of ``renames`` renamed (never text inside ``c"..."`` data or comments)."""
    return substitute(text, "global", lambda symbol: renames.get(symbol, symbol))


def name_by_content(entities: list[Entity]) -> list[Entity]:
    """``entities`` with the per-process names of :func:`_content_names` replaced in names and references.

    The portable module's text is part of the gradient disk cache's key, so a name that differs from
    one process to the next made the same function miss the cache in every new process. Renaming
    happens before the reachable symbols are ordered (by name), so their order is stable too.
    """
    renames = _content_names(entities)
    if not renames:
        return entities
    return [Entity(e.kind, renames.get(e.name, e.name),
                    _rename_symbols(e.text, renames) if "@.bytes." in e.text else e.text) for e in entities]


#: Numba's unique id of a compiled function, an ABI tag of its mangled name: ``B3v29`` (the tag "v29",
#: the 29th function this process compiled), followed by the next tag or the ``E`` closing the name.
_UID_TAG_RE = re.compile(r"(?<=[A-Za-z0-9_])B(\d+)v(\d+)(?=B\d|E)")
#: The token kinds that can hold a (part of a) mangled name; ``ws`` and ``punct`` never do.
_NAME_KINDS = frozenset({"global", "local", "word", "comdat", "cstring", "string", "metadata", "comment",
                         "attrgroup"})


def _names(text: str) -> list[str]:
    """The texts of the tokens of ``text`` that can hold a name (:data:`_NAME_KINDS`) with a uid tag's ``B``,
    in order."""
    if _UID_TAG_RE.search(text) is None:
        return []
    names: list[str] = []
    substitute_kinds(text, _NAME_KINDS, lambda name: (names.append(name) if "B" in name else None) or name)
    return names


def _map_names(text: str, pattern: re.Pattern[str], replace: Callable[[re.Match[str]], str]) -> str:
    """``text`` with ``pattern`` (a pattern of a name part) replaced by ``replace`` inside each token that can
    hold a name; every other byte kept. ``pattern`` is a tag starting ``B``. A match inside a token is a match in ``text`` (never the reverse), so
    ``text`` with no match at all is returned without tokenizing it."""
    if pattern.search(text) is None:
        return text
    return substitute_kinds(text, _NAME_KINDS, lambda name: pattern.sub(replace, name) if "B" in name else name)


def _uid_tags(text: str) -> list[str]:
    """The uids (digits) of the mangled names in ``text``, in order, each once."""
    return list(dict.fromkeys(m.group(2) for name in _names(text) for m in _UID_TAG_RE.finditer(name)
                              if int(m.group(1)) == len(m.group(2)) + 1))


def _uid_numbers(entities: list[Entity]) -> dict[str, int]:
    """The uids of the names ``entities`` define, numbered 1, 2... in order of first appearance.

    Uids of declared (external) symbols are left out: those names are resolved when the module is loaded.
    """
    external = {u for e in entities if e.kind == "declare" for u in _uid_tags(e.name)}
    numbers: dict[str, int] = {}
    for entity in entities:
        for uid in _uid_tags(entity.text):
            if uid not in external and uid not in numbers:
                numbers[uid] = len(numbers) + 1
    return numbers


def _byte_length(data: str) -> int:
    """The number of bytes of the body of a ``c"..."`` constant (an escape ``\\XX`` is one byte)."""
    count = index = 0
    while index < len(data):
        escaped = data[index] == "\\" and all(c in "0123456789abcdefABCDEF" for c in data[index + 1:index + 3])
        index += 3 if escaped and len(data) >= index + 3 else 1
        count += 1
    return count


def _fix_lengths(text: str) -> str:
    """``text`` with each ``[N x i8] c"..."`` given N the byte length of its string."""
    tokens = tokenize(text)
    for k, token in enumerate(tokens):
        if token.kind != "cstring" or k < 8:
            continue
        array = [t.text for t in tokens[k - 8:k]]
        if array[0] == "[" and array[1].isdigit() and array[2:] == [" ", "x", " ", "i8", "]", " "]:
            tokens[k - 7] = Token("word", str(_byte_length(token.text[2:-1])))
    return "".join(t.text for t in tokens)


def _retag(entities: list[Entity], entry: str, tags: dict[str, str]) -> tuple[list[Entity], str]:
    """``entities`` and ``entry`` with each uid tag ``v<uid>`` of ``tags`` replaced by its new tag."""

    def retag(match: re.Match[str]) -> str:
        new = tags.get(match.group(2)) if int(match.group(1)) == len(match.group(2)) + 1 else None
        return match.group(0) if new is None else f"B{len(new)}{new}"

    renamed = []
    for entity in entities:
        text = _map_names(entity.text, _UID_TAG_RE, retag)
        if entity.kind == "global" and text != entity.text:
            text = _fix_lengths(text)
        renamed.append(Entity(entity.kind, _UID_TAG_RE.sub(retag, entity.name), text))
    return renamed, _UID_TAG_RE.sub(retag, entry)


def stable_uids(entities: list[Entity], entry: str) -> tuple[list[Entity], str]:
    """``entities`` and ``entry`` with Numba's per-process function uids renumbered (``v<uid>`` to ``u<k>``).

    A uid counts the functions the process compiled before, so the same function's callees (Numba's
    library code, the user's other ``@njit`` functions) had other names after another history (a
    gradient found in the disk cache compiles less), and so had the module and its cache key. The uids
    of the names the module defines are numbered in order of first appearance; :func:`salt_uids` then
    makes the names unique to the module. Numba writes ``v<uid>``, so the new tags never meet a declared
    symbol's. The text of a ``c"..."`` message naming a symbol (``missing Environment: ...``) follows
    it, with its length.
    """
    numbers = _uid_numbers(entities)
    if not numbers:
        return entities, entry
    return _retag(entities, entry, {uid: f"u{k}" for uid, k in numbers.items()})


_NUMBERED_TAG_RE = re.compile(r"(?<=[A-Za-z0-9_])B(\d+)u(\d+)(?=B\d|E)")


def salt_uids(text: str, salt: str) -> str:
    """``text`` (a module or a symbol) with the tags ``u<k>`` of :func:`stable_uids` made ``u<k>h<salt>``.

    With ``salt`` a digest of the module, two modules linked together (LAPACK, custom rules) never give
    one name to two different functions, which Numba's ``linkonce_odr`` would merge.
    """

    def salted(match: re.Match[str]) -> str:
        if int(match.group(1)) != len(match.group(2)) + 1:
            return match.group(0)
        tag = f"u{match.group(2)}h{salt}"
        return f"B{len(tag)}{tag}"

    lines = text.split("\n")
    for k, line in enumerate(lines):
        new = _map_names(line, _NUMBERED_TAG_RE, salted)
        if new != line and new.startswith("@"):
            new = _fix_lengths(new)
        lines[k] = new
    return "\n".join(lines)


