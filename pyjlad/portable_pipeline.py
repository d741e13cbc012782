"""The passes that turn Numba's module into pyjlad's portable module, and :func:`make_portable`.

:data:`PORTABLE` runs them in order (see :mod:`pyjlad.ir.pipeline`; ``PYJLAD_DUMP_IR=dir`` writes
the module after each)::

    nested-drivers            pyjlad derivatives the function calls declared only
    kind-specific-blas        BLAS/LAPACK calls by element kind, LAPACK modules to link
    stable-names              per-process names renamed by content
    extract                   the entry and what it reaches; Numba's runtime replaced
    split-excinfo-slots       one type per stack slot
    opaque-address-comparisons
    freeze-carried-selects
    down-level                LLVM 22 syntax to LLVM 15
    unique-names              the entry named, mangled names unique to the module
    dedupe-declarations
    declare-libm-calls
    refuse-target-intrinsics  a check

Every pass gets and returns a whole module as text. Between ``extract`` and ``down-level`` the
module has LLVM 22 syntax and refers to metadata it no longer defines (metadata is dropped), so those
dumps are for reading, not for ``llvm-as``; the input and the final module are valid.

The helpers the passes use (runtime replacements, line rewrites, attribute translation) live in
:mod:`pyjlad.portable`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from . import address_comparisons, excinfo_slots
from . import portable as p
from . import stable_names as sn
from .carried_selects import freeze_carried_selects
from .errors import IRError, PortabilityError
from .ir import downlevel
from .ir.pipeline import Pass, Pipeline

__all__ = ["PORTABLE", "PortableContext", "make_portable"]


@dataclass
class PortableContext:
    """What the passes of :data:`PORTABLE` share.

    Attributes
    ----------
    entry : str
        Numba's mangled name of the entry function (input).
    name : str
        The entry's new name (input).
    entry_symbol : str
        The entry's ``@`` symbol after ``stable-names``.
    links : list of (str, str)
        LAPACK helpers and element kinds the module calls (``kind-specific-blas``).
    numba_functions : set of str
        Definitions with Numba's calling convention (``extract``).
    rewritten : set of str
        Numba's definitions the function-body passes rewrite (``extract``); not pyjlad's replacements and stubs.
    externals : list of str
        Functions the module declares and needs from outside (``extract``, ``declare-libm-calls``).
    """

    entry: str
    name: str
    entry_symbol: str = ""
    links: list[tuple[str, str]] = field(default_factory=list)
    numba_functions: set[str] = field(default_factory=set)
    rewritten: set[str] = field(default_factory=set)
    externals: list[str] = field(default_factory=list)


def _render(header: list[str], entities: list[p._Entity], groups: dict[str, str]) -> str:
    """A module from :func:`pyjlad.portable.split_module`'s parts (comments and metadata are not kept)."""
    lines = [*header, *(e.text for e in entities), *(f"attributes {g} = {{{c}}}" for g, c in groups.items())]
    return "\n".join(lines) + "\n"


def nested_drivers(text: str, context: PortableContext) -> str:
    """Keep only a declaration of each pyjlad derivative the function calls (see :mod:`pyjlad.nested`).

    Its linked machine code is Enzyme's output; the module Enzyme gets is linked with the
    derivative's module before Enzyme instead, so that one Enzyme run differentiates both.
    """
    from .nested import declare_nested_drivers

    return declare_nested_drivers(text)


def kind_specific_blas(text: str, context: PortableContext) -> str:
    """Call Numba's BLAS/LAPACK helpers by element kind (``@numba_xxdot.d``); record the LAPACK ones to link.

    Numba calls one C helper per operation with the element kind as a run-time argument (``i8 100``
    for double, ``115`` for float); a derivative needs a differentiable implementation per kind:
    pyjlad defines the BLAS ones in the module (``extract``) and links a LAPACK module per helper and
    kind (:func:`pyjlad.lapack.lapack_module`). Each LAPACK helper's kind-specific name is declared
    with the helper's own signature.
    """
    kind_of = p._BLAS_KINDS
    text = p._BLAS_CALL_RE.sub(lambda m: f"@numba_xx{m.group(1)}.{kind_of[m.group(2)][0]}(i8 {m.group(2)},", text)
    context.links = sorted({(m.group(1), kind_of[m.group(2)][0]) for m in p._LAPACK_CALL_RE.finditer(text)})
    text = p._LAPACK_CALL_RE.sub(lambda m: f"@{m.group(1)}.{kind_of[m.group(2)][0]}(i8 {m.group(2)},", text)
    if not context.links:
        return text
    declarations: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("declare ") and (symbol := p._function_symbol(line)):
            declarations.setdefault(symbol, line)
    added = [declarations["@" + helper].replace(f"@{helper}(", f"@{helper}.{kind}(")
             for helper, kind in context.links if "@" + helper in declarations]
    if not added:
        return text
    return text + ("" if text.endswith("\n") else "\n") + "\n".join(added) + "\n"


def stable_names(text: str, context: PortableContext) -> str:
    """Rename what Numba names from per-process state; find the entry.

    The portable text is part of the gradient disk cache's key, so it must be the same in every
    process: string constants Numba names by Python's ``hash()`` get names by content, and the uids
    in mangled names (how many functions the process compiled before) are numbered in order of
    appearance (see :func:`pyjlad.stable_names.stable_uids`).

    Raises
    ------
    PortabilityError
        If the entry function is not defined in the module.
    """
    header, entities, groups = p.split_module(text)
    entities = sn.name_by_content(entities)
    entities, stable_entry = sn.stable_uids(entities, context.entry)
    simple = re.fullmatch(r"[-a-zA-Z$._0-9]+", stable_entry)
    context.entry_symbol = "@" + stable_entry if simple else f'@"{stable_entry}"'
    found = {e.name: e for e in entities}.get(context.entry_symbol)
    if found is None or found.kind != "define":
        raise PortabilityError(f"entry function {context.entry!r} is not defined in the module")
    return _render(header, entities, groups)


def extract(text: str, context: PortableContext) -> str:
    """Keep the entry and what it reaches; replace Numba's runtime by pyjlad's; stub the error paths.

    Numba's module also holds the CPython and ``cfunc`` wrappers, ``NumbaEnv`` globals and C-API
    declarations, none of which a derivative runs. What the entry reaches is kept in a fixed order
    (types, globals, definitions, declarations). Numba's runtime functions (``NRT_*``: allocation,
    reference counts) become the differentiable definitions of :data:`pyjlad.portable.PORTABLE_RUNTIME`,
    which Enzyme can follow; the code that only builds exception messages (C-API calls, string
    code, ``__excinfo_unwrap_args``) becomes inactive stubs, since a derivative never reads a
    message (pyjlad re-runs the function for it); libm declarations lose ``readonly`` (Enzyme adds
    ``readnone``, and both are invalid together).
    """
    header, entity_list, groups = p.split_module(text)
    entities = {e.name: e for e in entity_list}
    context.numba_functions = {m for e in entity_list if e.kind == "define"
                               if (m := excinfo_slots.numba_abi_symbol(e.text))}
    types = [e.text for e in entity_list if e.kind == "type"]
    globals_: list[str] = []
    defines: list[str] = []
    declares: list[str] = []
    for symbol in p._reachable(entities, context.entry_symbol):
        if symbol in p.PORTABLE_RUNTIME:
            defines.append(p.PORTABLE_RUNTIME[symbol])
            continue
        entity = entities.get(symbol)
        if entity is None or (entity.kind == "declare" and symbol in p._PORTABLE_RUNTIME_DECLS):
            if symbol in p._PORTABLE_RUNTIME_DECLS:
                declares.append(p._PORTABLE_RUNTIME_DECLS[symbol])
                context.externals.append(symbol.lstrip("@"))
                continue
            raise PortabilityError(f"symbol {symbol} is referenced but not declared")
        if entity.kind == "global":
            globals_.append(p._clean_global(entity.text))
        elif entity.kind == "define" and symbol.startswith(p._EXCINFO_UNWRAP):
            defines.append(p._excinfo_unwrap_stub(symbol))
        elif entity.kind == "define" and symbol.startswith(p._STRING_CODE):
            defines.append(p._inactive_definition(entity.text))
        elif entity.kind == "define":
            defines.append(entity.text)
            context.rewritten.add(symbol)
        elif symbol.lstrip("@") in p.ERROR_PATH_STUBS:
            defines.append(p._stub(entity.text))
        else:
            declares.append(p._libm_declaration(p._mark_inactive(entity.text), groups))
            context.externals.append(symbol.lstrip("@").strip('"'))
    body = "\n".join([*types, "", *globals_, "", *defines, "", *declares]).splitlines()
    group_lines = [f"attributes {g} = {{{c}}}" for g, c in groups.items()]
    return "\n".join([*header, "", *body, *group_lines]) + "\n"


def _map_definitions(text: str, names: set[str], rewrite: Callable[[str], str]) -> str:
    """``text`` with each definition of a function in ``names`` (``define`` to ``}``) replaced by ``rewrite``'s."""
    lines = text.split("\n")
    out: list[str] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        symbol = p._function_symbol(line) if line.startswith("define ") else None
        if symbol is None:
            out.append(line)
            k += 1
            continue
        end = k
        while not lines[end].startswith("}"):
            end += 1
        definition = "\n".join(lines[k:end + 1])
        out.append(rewrite(definition) if symbol in names else definition)
        k = end + 1
    return "\n".join(out)


def split_excinfo_slots(text: str, context: PortableContext) -> str:
    """Give the exception slot of each call to a Numba function its own ``alloca`` where LLVM shared it.

    Enzyme's type analysis gives a stack slot one type for the whole function; LLVM may reuse one
    slot for an exception pointer and, later, an integer shape (see
    :func:`pyjlad.excinfo_slots.split_shared_excinfo_slots`).
    """
    return _map_definitions(text, context.rewritten,
                            lambda d: excinfo_slots.split_shared_excinfo_slots(d, context.numba_functions))


def opaque_address_comparisons(text: str, context: PortableContext) -> str:
    """Compute addresses that are only compared (vectorizer overlap checks) by ``@pyjlad_address``.

    Enzyme types the ``ptrtoint`` of a pointer as a pointer and the arithmetic comparing it as an
    integer, and aborts; the same value from a function Enzyme does not look into is an inactive
    integer (see :func:`pyjlad.address_comparisons.opaque_address_comparisons`). The helper's definition
    follows the first function that needs it.
    """
    added = False

    def rewrite(definition: str) -> str:
        nonlocal added
        new, compared = address_comparisons.opaque_address_comparisons(definition)
        if compared and not added:
            added = True
            return new + "\n" + address_comparisons.ADDRESS_DEFINITION
        return new

    return _map_definitions(text, context.rewritten, rewrite)


def freeze_selects(text: str, context: PortableContext) -> str:
    """Put a ``freeze`` after each loop-carried ``select`` (a running max/min), so Enzyme's general rule applies.

    Enzyme v0.0.289's reverse rule for such a select sends its adjoint only to the element chosen
    at the loop's exit (see :mod:`pyjlad.carried_selects`).
    """
    return _map_definitions(text, context.rewritten, lambda d: freeze_carried_selects(d)[0])


def down_level(text: str, context: PortableContext) -> str:
    """Rewrite LLVM 22 syntax to LLVM 15's; keep only the attribute groups still used, translated.

    The Enzyme plugin runs under LLVM 15 and Julia's ``llvmcall`` reads LLVM 16/18: newer
    attributes, flags, intrinsic spellings and vector math intrinsics become their LLVM 15
    equivalents, or are dropped where they only carry optimization hints (see
    :func:`pyjlad.ir.downlevel.rewrite_line`).
    """
    lines = text.splitlines()
    split = lines.index("")
    header, rest = lines[:split], lines[split + 1:]
    groups: dict[str, str] = {}
    body: list[str] = []
    for line in rest:
        group = p._attribute_group(line) if line.startswith("attributes #") else None
        if group:
            groups[group[0]] = group[1]
        else:
            body.append(line)
    used: set[str] = set()
    out = [*header, ""]
    for line in body:
        line = downlevel.rewrite_line(line)
        used.update(re.findall(r"(?<![\w])#\d+\b", line))
        out.append(line)
    for group in sorted(used, key=lambda g: int(g[1:])):
        attrs = downlevel.translate_attribute_group(groups.get(group, ""))
        out.append(f"attributes {group} = {{ {attrs} }}" if attrs else f"attributes {group} = {{ }}")
    return "\n".join(out) + "\n"


def unique_names(text: str, context: PortableContext) -> str:
    """Name the entry ``@<name>``; make the renumbered mangled names unique to this module.

    A digest of the module goes into every renumbered uid, so two modules linked together (LAPACK,
    custom rules) never give one name to two different functions, which Numba's ``linkonce_odr``
    linkage would merge.
    """
    salt = hashlib.sha256(text.encode()).hexdigest()[:12]
    return p._rename(sn.salt_uids(text, salt), sn.salt_uids(context.entry_symbol, salt), "@" + context.name)


def dedupe_declarations(text: str, context: PortableContext) -> str:
    """Drop repeated declarations (two intrinsics ``down-level`` mapped onto one libm name)."""
    return p.dedupe_declarations(text)


def declare_libm_calls(text: str, context: PortableContext) -> str:
    """Declare the libm functions that scalarized vector intrinsics now call."""
    text, added = p._declare_libm_calls(text)
    context.externals.extend(added)
    return text


def refuse_target_intrinsics(text: str, context: PortableContext) -> str:
    """Refuse x86-specific intrinsics: no other target, and no LLVM 15 Enzyme rule, knows them.

    Raises
    ------
    PortabilityError
        Naming the intrinsic.
    """
    leftover = re.search(r"@llvm\.x86\.[a-z0-9_.]+", text)
    if leftover:
        raise PortabilityError(
            f"the function uses the target-specific intrinsic {leftover.group(0)}, "
            "which cannot be made portable; rewrite the code that produces it"
        )
    return text


#: The portable pipeline, in order.
PORTABLE = Pipeline("portable", (
    Pass("nested-drivers", nested_drivers, "derivatives called from the function declared only", form="text"),
    Pass("kind-specific-blas", kind_specific_blas, "BLAS/LAPACK call names; declarations added", form="text"),
    Pass("stable-names", stable_names, "global names; comments and metadata dropped", form="text"),
    Pass("extract", extract, "which items are kept; runtime definitions and stubs", form="text"),
    Pass("split-excinfo-slots", split_excinfo_slots, "bodies of Numba's functions", form="text"),
    Pass("opaque-address-comparisons", opaque_address_comparisons, "bodies of Numba's functions; a helper added", form="text"),
    Pass("freeze-carried-selects", freeze_selects, "bodies of Numba's functions", form="text"),
    Pass("down-level", down_level, "syntax, attributes, vector intrinsics", form="text"),
    Pass("unique-names", unique_names, "the entry's and mangled names", form="text"),
    Pass("dedupe-declarations", dedupe_declarations, "declarations", form="text"),
    Pass("declare-libm-calls", declare_libm_calls, "declarations", form="text"),
    Pass("refuse-target-intrinsics", refuse_target_intrinsics, "nothing: a check", form="text"),
))


def make_portable(ir: str, entry: str, *, name: str, dump_as: str = "portable") -> p.PortableModule:
    """Extract ``entry`` and its dependencies from ``ir`` as a portable module, by the passes of :data:`PORTABLE`.

    Parameters
    ----------
    ir : str
        LLVM IR text of a Numba library (``library.get_llvm_str()``).
    entry : str
        Mangled name of Numba's inner ABI function to keep.
    name : str
        New, readable name for the entry function (a valid LLVM identifier).
    dump_as : str
        The name of the dumps of this run (``PYJLAD_DUMP_IR``): ``"portable"``, or ``"enzyme-copy"``
        for the unvectorized copy Enzyme differentiates.

    Returns
    -------
    PortableModule
        The portable module.

    Raises
    ------
    PortabilityError
        If the entry is missing, or the module uses a construct with no LLVM 15
        equivalent (for example an x86-specific intrinsic in user code).
    """
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_.]*", name):
        raise IRError(f"invalid LLVM identifier for the entry: {name!r}")
    context = PortableContext(entry=entry, name=name)
    text = PORTABLE.run(ir, context, label=name, prefix=dump_as)
    return p.PortableModule(text=text, entry=name, external_functions=tuple(sorted(set(context.externals))),
                            links=tuple(context.links))
