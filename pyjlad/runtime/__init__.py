"""pyjlad's replacement runtime, as LLVM IR package data (``pyjlad/runtime/*.ll``).

Each file is an LLVM 15 module whose header comment says which Numba runtime
function or CBLAS symbol each definition stands for, and why Enzyme needs it:

``nrt.ll``
    Numba's NRT reference counting and allocation (:data:`pyjlad.portable.PORTABLE_RUNTIME`).
``cblas.ll``
    Numba's BLAS helpers ``numba_xx{dot,gemv,nrm2,gemm}`` over CBLAS, one definition per kind.
``blas_loops.ll``
    The same helpers as loops, for the parallel loops of a derivative (:mod:`pyjlad.blas_loops`).
``address.ll``
    ``@pyjlad_address``, an address compared as an integer (:data:`pyjlad.portable.ADDRESS_FUNCTION`).
``lascl.ll``
    ``cblas_dlascl``/``cblas_slascl``, which Enzyme's BLAS rules call (:mod:`pyjlad.engines.blas`).
``pool.ll``
    The memory pool of differentiated code (:mod:`pyjlad.engines.pool`), a template: see :func:`fill`.

Files are read once per process (:func:`source`) and parsed with :func:`pyjlad.ir.parse`; a
definition's text is the parsed function rendered back, byte for byte as the file writes it.
"""

from __future__ import annotations

import string
from functools import cache
from importlib import resources

from ..errors import IRLookupError
from ..ir import Function, Module, parse
from ..ir.analysis import references

__all__ = ["FILES", "TEMPLATES", "source", "module", "definitions", "declarations", "dependencies", "fill"]

#: Every runtime file; each is a valid LLVM 15 module as it stands.
FILES = ("nrt.ll", "cblas.ll", "blas_loops.ll", "address.ll", "lascl.ll")
#: Runtime files with ``${name}`` placeholders: valid LLVM 15 modules once :func:`fill` ed.
TEMPLATES = ("pool.ll",)


class _Template(string.Template):
    """``${name}`` placeholders only: a bare ``$`` (legal in LLVM names) is reported, never substituted."""

    idpattern = r"(?!)"
    braceidpattern = r"[a-z_][a-z0-9_]*"


@cache
def source(name: str) -> str:
    """The text of runtime file ``name`` (``"nrt.ll"``), read once per process.

    Raises
    ------
    IRLookupError
        If ``name`` is not a file of this package.
    """
    if name not in FILES + TEMPLATES:
        raise IRLookupError(f"no runtime IR file {name!r}; the files are {', '.join(FILES + TEMPLATES)}")
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


@cache
def module(name: str) -> Module:
    """Runtime file ``name`` parsed by :func:`pyjlad.ir.parse` (not for :data:`TEMPLATES`)."""
    return parse(source(name))


def _functions(name: str, declarations: bool) -> dict[str, Function]:
    return {f.symbol: f for f in module(name).functions.values() if f.is_declaration == declarations}


def definitions(name: str) -> dict[str, str]:
    """The functions runtime file ``name`` defines: ``@symbol`` to its text, in file order."""
    return {symbol: f.render() for symbol, f in _functions(name, False).items()}


def declarations(name: str) -> dict[str, str]:
    """The functions runtime file ``name`` declares: ``@symbol`` to its ``declare`` line, in file order."""
    return {symbol: f.render() for symbol, f in _functions(name, True).items()}


def dependencies(name: str) -> dict[str, set[str]]:
    """The ``@`` symbols each definition of file ``name`` refers to (definitions that refer to none left out)."""
    found = {symbol: references(f) for symbol, f in _functions(name, False).items()}
    return {symbol: refs for symbol, refs in found.items() if refs}


def fill(name: str, **values: object) -> str:
    """Template ``name`` with each ``${key}`` replaced by ``str(values[key])``, its leading comment dropped.

    The text starts at the first line after the header comment (the blank line that ends
    the header is kept), so a module built from it carries no file documentation.

    Raises
    ------
    KeyError
        If the template names a placeholder ``values`` lacks.
    ValueError
        If the template holds a ``$`` that is not a ``${name}`` placeholder.
    """
    if name not in TEMPLATES:
        raise IRLookupError(f"{name!r} is not a runtime template; the templates are {', '.join(TEMPLATES)}")
    lines = source(name).split("\n")
    start = next(k for k, line in enumerate(lines) if not line.startswith(";"))
    return _Template("\n".join(lines[start:])).substitute(values)
