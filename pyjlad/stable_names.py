"""Names the same in every process: what Numba names from per-process state, renamed by content.

The portable module's text is part of the gradient disk cache's key, so it must not depend on the
process that made it: the ``stable-names`` and ``unique-names`` passes
(:mod:`pyjlad.portable_pipeline`) use these.
"""

from __future__ import annotations

import hashlib
import re

from .ir.lexer import substitute
from .portable import _Entity

__all__ = ["name_by_content", "salt_uids", "stable_uids"]


#: The names Numba gives the constant bytes of string literals (``BaseContext.insert_const_bytes``):
#: ``.bytes.`` and Python's ``hash()`` of the bytes, randomized per process (``@.bytes.-4446739099191175225``;
#: LLVM appends ``.1``, ``.2`` when linking two such constants of one name). The only names of a portable
#: module that change from one process to the next (measured on the fuzzer's programs: bounds-check messages).
_PROCESS_HASH_NAME_RE = re.compile(r"@\.bytes\.-?\d+(?:\.\d+)*")
#: Their names in the portable module: the SHA-256 of the global's definition (a namespace Numba never uses).
_CONTENT_NAME_PREFIX = "@.bytes.content."


def _content_names(entities: list[_Entity]) -> dict[str, str]:
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


def name_by_content(entities: list[_Entity]) -> list[_Entity]:
    """``entities`` with the per-process names of :func:`_content_names` replaced in names and references.

    The portable module's text is part of the gradient disk cache's key, so a name that differs from
    one process to the next made the same function miss the cache in every new process. Renaming
    happens before the reachable symbols are ordered (by name), so their order is stable too.
    """
    renames = _content_names(entities)
    if not renames:
        return entities
    return [_Entity(e.kind, renames.get(e.name, e.name),
                    _rename_symbols(e.text, renames) if "@.bytes." in e.text else e.text) for e in entities]


#: Numba's unique id of a compiled function, an ABI tag of its mangled name: ``B3v29`` (the tag "v29",
#: the 29th function this process compiled), followed by the next tag or the ``E`` closing the name.
_UID_TAG_RE = re.compile(r"(?<=[A-Za-z0-9_])B(\d+)v(\d+)(?=B\d|E)")
_CSTRING_GLOBAL_RE = re.compile(r'\[(\d+) x i8\] c"([^"]*)"')


def _uid_tags(text: str) -> list[str]:
    """The uids (digits) of the mangled names in ``text``, in order, each once."""
    return list(dict.fromkeys(m.group(2) for m in _UID_TAG_RE.finditer(text)
                              if int(m.group(1)) == len(m.group(2)) + 1))


def _uid_numbers(entities: list[_Entity]) -> dict[str, int]:
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


_BYTE_ESCAPE_RE = re.compile(r"\\[0-9A-Fa-f]{2}")


def _fix_length(match: re.Match[str]) -> str:
    """``[N x i8] c"..."`` with N the byte length of the string (an escape ``\\XX`` is one byte)."""
    size = len(_BYTE_ESCAPE_RE.sub("x", match.group(2)))
    return f'[{size} x i8] c"{match.group(2)}"'


def _retag(entities: list[_Entity], entry: str, tags: dict[str, str]) -> tuple[list[_Entity], str]:
    """``entities`` and ``entry`` with each uid tag ``v<uid>`` of ``tags`` replaced by its new tag."""

    def retag(match: re.Match[str]) -> str:
        new = tags.get(match.group(2)) if int(match.group(1)) == len(match.group(2)) + 1 else None
        return match.group(0) if new is None else f"B{len(new)}{new}"

    renamed = []
    for entity in entities:
        text = _UID_TAG_RE.sub(retag, entity.text)
        if entity.kind == "global" and text != entity.text:
            text = _CSTRING_GLOBAL_RE.sub(_fix_length, text)
        renamed.append(_Entity(entity.kind, _UID_TAG_RE.sub(retag, entity.name), text))
    return renamed, _UID_TAG_RE.sub(retag, entry)


def stable_uids(entities: list[_Entity], entry: str) -> tuple[list[_Entity], str]:
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
        new = _NUMBERED_TAG_RE.sub(salted, line)
        if new != line and new.startswith("@"):
            new = _CSTRING_GLOBAL_RE.sub(_fix_length, new)
        lines[k] = new
    return "\n".join(lines)


