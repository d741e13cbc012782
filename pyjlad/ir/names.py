"""Names of LLVM symbols: how LLVM writes a name (:func:`symbol_for`), the name a symbol stands
for (:func:`decode_name`), and the C identifier pyjlad gives a Python function (:func:`c_identifier`).

LLVM writes ``@name`` bare when ``name`` is a plain identifier (letters, digits and ``-$._``, not
starting with a digit), and ``@"name"`` otherwise, with ``"``, ``\\`` and unprintable characters
as ``\\XX`` escapes.
"""

from __future__ import annotations

import re

__all__ = ["c_identifier", "decode_name", "is_entry_name", "symbol_for"]


def c_identifier(name: str) -> str:
    """``name`` with every character outside ``[a-zA-Z0-9_]`` replaced by ``_``, outer ``_`` stripped;
    ``f`` if nothing is left.

    >>> c_identifier("outer.<locals>.loss")
    'outer__locals__loss'
    >>> c_identifier("<lambda>")
    'lambda'
    >>> c_identifier("λ")
    'f'
    """
    return re.sub(r"[^a-zA-Z0-9_]", "_", name).strip("_") or "f"


def is_entry_name(name: str) -> bool:
    """Whether ``name`` can name an exported entry: a letter or ``_``, then letters, digits, ``_`` and ``.``
    (a bare LLVM symbol that is also a C identifier once dots are mapped).

    >>> is_entry_name("pyjlad_loss.1"), is_entry_name("1f"), is_entry_name("a-b")
    (True, False, False)
    """
    return re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_.]*", name) is not None


def decode_name(symbol: str) -> str:
    """The name a ``@``/``%``/``$`` symbol stands for: sigil and quotes removed, ``\\XX`` escapes decoded.

    >>> decode_name('@"a\\\\22b c"')
    'a"b c'
    >>> decode_name("@llvm.sin.f64")
    'llvm.sin.f64'
    """
    body = symbol[1:]
    if not body.startswith('"'):
        return body
    raw = body[1:-1]
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), raw.replace("\\\\", "\\5C"))


def symbol_for(name: str, sigil: str = "@") -> str:
    """The symbol LLVM writes for ``name``: bare if it is a plain identifier, else quoted and escaped.

    >>> symbol_for("f.1")
    '@f.1'
    >>> symbol_for("a b")
    '@"a b"'
    """
    if re.fullmatch(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*", name):
        return sigil + name
    escaped = "".join(c if c.isprintable() and c not in '"\\' else f"\\{ord(c):02X}" for c in name)
    return f'{sigil}"{escaped}"'
