"""The derivative as machine code: compiled in a child process, packed with its declarations, cached, loaded.

Parsed and compiled outside Numba's lock where possible; an LLVM crash while compiling is an
:class:`~pyjlad.errors.EnzymeError` (:mod:`pyjlad.engines.native`), and a cached object is checked
before it is loaded (:mod:`pyjlad.objcheck`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
import numba
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import cpu_target

from .. import cache
from ..errors import (
    EnzymeError,
)
from ..log import get_logger, timed
from ..objcheck import InvalidObject, check_elf, check_llvm_module
from . import native
from .blas import resolve_blas_symbols
from .pool import capacity, resolve_pool_symbols, use_pool

__all__ = ["load_library"]


#: A global :func:`mark_loose_types` adds to a derivative Enzyme built with loose types; the object entry's
#: header says so (``loose_types``), and :func:`built_with_loose_types` reads it from the loaded library.
_LOOSE_TYPES_MARKER = "pyjlad.loose_types"
_LOOSE_ATTRIBUTE = "_pyjlad_loose_types"


def mark_loose_types(bitcode: bytes) -> bytes:
    """``bitcode`` (a derivative Enzyme built with loose types) with a marker global saying so, kept with it in
    the cache (:mod:`pyjlad.engines.loose_check` checks such derivatives before trusting them)."""
    context = llvm.create_context()
    text = f"{llvm.parse_bitcode(bitcode, context=context)}\n@{_LOOSE_TYPES_MARKER} = constant i8 1\n"
    return llvm.parse_assembly(text, context=context).as_bitcode()


def built_with_loose_types(library: Any) -> bool:
    """Whether the library :func:`load_library` gave holds a derivative :func:`mark_loose_types` marked."""
    return bool(getattr(library, _LOOSE_ATTRIBUTE, False))


def _prepare_module(bitcode: bytes, name: str) -> tuple[bytes, list[str], bool]:
    """``bitcode`` as the JIT gets it, with its declarations (only ``name`` visible, allocations pooled) and
    whether it was built with loose types (:func:`mark_loose_types`).

    Parsed in an LLVM context of its own (no lock shared with Numba's compiler needed).
    """
    module = llvm.parse_bitcode(bitcode, context=llvm.create_context())
    module.verify()
    loose = any(variable.name == _LOOSE_TYPES_MARKER for variable in module.global_variables)
    # Only the driver is looked up from outside: every other definition (the exported entry
    # `pyjlad_<name>`, Numba's functions, pyjlad's runtime) becomes internal, so two libraries that
    # define the same name for different code (two functions called f) never resolve to each other's,
    # and is renamed under the driver's name: Numba's JIT records every name a loaded library defines,
    # internal ones included, and resolves later code's references to the last library defining it.
    # Kept under Numba's names, pyjlad's `NRT_decref` (pyjlad.runtime's, pooled) became the one every
    # `prange` loop Numba compiled afterwards called: a segmentation fault.
    for function in module.functions:
        if not function.is_declaration and function.name != name:
            function.linkage = "internal"
            function.name = f"{name}.{function.name}"
    for variable in module.global_variables:
        if not variable.is_declaration and not variable.name.startswith("enzyme_"):
            variable.linkage = "internal"
            variable.name = f"{name}.{variable.name}"
    use_pool(module)
    declared = [f.name for f in module.functions if f.is_declaration]
    return module.as_bitcode(), declared, loose


def _compile_object(compiler: native.NativeCompiler, bitcode: bytes, name: str, what: str) -> bytes:
    """The object entry (see :func:`_pack_object`) of ``bitcode``, compiled by ``compiler``'s child process.

    Raises
    ------
    EnzymeError
        If LLVM crashes or fails on the module (in the child: this process lives on).
    """
    prepared, declared, loose = _prepare_module(bitcode, name)
    obj, shared = compiler.compile(prepared, name, what)
    return _pack_object(name, declared, obj, shared, loose)


_OBJECT_FORMAT = "pyjlad-object/8"  # 8: realloc through the pool; 7: internal names under the driver's; 6: loose_types in the header; 5: out-of-memory exit; definitions internal


def _object_key(key: str) -> str:
    """Cache key of the machine code compiled from entry ``key`` on this CPU with this Numba."""
    return cache.cache_key(_OBJECT_FORMAT, key, f"pool={capacity() > 0}", numba.__version__,
                           llvm.llvm_version_info.__repr__(), llvm.get_host_cpu_name(),
                           llvm.get_host_cpu_features().flatten())


def _pack_object(name: str, declared: list[str], obj: bytes, shared: bytes, loose: bool = False) -> bytes:
    """An object entry: the library ``name``'s ELF object and linking bitcode (what Numba's
    ``serialize_using_object_code`` gives) with the module's declarations, and whether it is a derivative
    built with loose types."""
    header = json.dumps({"format": _OBJECT_FORMAT, "name": name, "kind": "object", "declared": declared,
                         "sizes": [len(obj), len(shared)], "loose_types": loose}).encode()
    return len(header).to_bytes(8, "little") + header + obj + shared


def _split_object(payload: bytes) -> tuple[dict[str, Any], bytes, bytes]:
    """The header, ELF object and linking bitcode of an object entry (raises InvalidObject)."""
    size = int.from_bytes(payload[:8], "little")
    try:
        header = json.loads(payload[8:8 + size])
        n_obj, n_shared = header["sizes"]
        name, kind, declared = header["name"], header["kind"], header["declared"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidObject(f"unreadable object-entry header ({exc})") from None
    if header.get("format") != _OBJECT_FORMAT:
        raise InvalidObject(f"object format {header.get('format')!r}, expected {_OBJECT_FORMAT!r}")
    if not (isinstance(name, str) and kind == "object" and isinstance(declared, list)
            and all(isinstance(d, str) for d in declared)):
        raise InvalidObject("malformed object-entry header")
    body = payload[8 + size:]
    if not (isinstance(n_obj, int) and isinstance(n_shared, int) and n_obj >= 0 and n_shared >= 0
            and len(body) == n_obj + n_shared):
        raise InvalidObject(f"object entry of {len(body)} bytes, its header says {n_obj} + {n_shared}")
    return header, body[:n_obj], body[n_obj:]


def _check_object(payload: bytes) -> None:
    """Check an object entry before it is stored or loaded: an ELF object for this machine, and bitcode."""
    _, obj, shared = _split_object(payload)
    check_elf(obj)
    if shared[:4] != b"BC\xc0\xde" or len(shared) % 4:
        raise InvalidObject(f"the linking module ({len(shared)} bytes) is not LLVM bitcode")


def _unpack_object(payload: bytes) -> Any:
    header, obj, shared = _split_object(payload)
    resolve_blas_symbols(header["declared"])
    resolve_pool_symbols(header["declared"])
    codegen = cpu_target.target_context.codegen()
    library = codegen.unserialize_library((header["name"], header["kind"], (obj, shared)))
    setattr(library, _LOOSE_ATTRIBUTE, header.get("loose_types") is True)
    return library


_log = get_logger(__name__)


def load_library(key: str, build_bitcode: Callable[[], bytes], name: str, what: str) -> Any:
    """The JIT-compiled library of cache entry ``key`` (``what``: the derivative, in the user's terms).

    A second process loads the machine code compiled the first time (no
    Enzyme run, no LLVM optimization or code generation); otherwise the bitcode
    (cached, or built by ``build_bitcode``) is optimized and compiled by Numba's
    pipeline in a child process (:mod:`pyjlad.engines.native`: an LLVM crash
    cannot kill this one), its machine code loaded here and stored for the next
    process.
    """
    object_key = _object_key(key)
    payload = cache.get(object_key, check=_check_object)  # checked: a damaged ELF object could crash the JIT
    if payload is not None:
        try:
            with global_compiler_lock:  # Numba's code generator is not thread-safe
                library = _unpack_object(payload)
            _log.debug("loaded the machine code of %s from the disk cache", what)
            return library
        except (ValueError, KeyError, RuntimeError):
            pass  # an unreadable entry: rebuilt below, and replaced
    with native.start() as compiler:  # started first: the interpreter starts while Enzyme runs
        try:
            # Enzyme runs here, with no Numba lock held; its output is parsed before it is stored or used.
            bitcode = cache.get_or_build(key, build_bitcode, check=check_llvm_module)
        except InvalidObject as exc:
            raise EnzymeError(
                f"opt reported success twice but its output for {name} is not a valid LLVM module ({exc}); "
                f"the toolchain is broken: reinstall it with python -m pyjlad toolchain install --force",
                diagnostics=str(exc),
            ) from None
        with timed(_log, "compiled %s to machine code", what):
            payload = _compile_object(compiler, bitcode, name, what)
    try:
        _check_object(payload)
    except InvalidObject as exc:
        raise EnzymeError(f"the machine code compiled for {what} is not a valid object ({exc})",
                          diagnostics=str(exc)) from None
    with global_compiler_lock:
        library = _unpack_object(payload)
    try:
        cache.put(object_key, payload, check=_check_object)
    except (OSError, RuntimeError, InvalidObject):
        pass  # the machine code is an optimization (a lock held too long, say); the bitcode entry is enough
    return library


