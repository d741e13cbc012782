"""The passes that turn Numba's module into pyjlad's portable module, and :func:`make_portable`.

:data:`PORTABLE` runs them in order (see :mod:`pyjlad.ir.pipeline`; ``PYJLAD_DUMP_IR=dir`` writes
the module after each); ``print(PORTABLE.describe())`` lists them with what each may change, and
README's "The pass pipeline" says what each does.

Every pass but ``down-level`` gets and returns a parsed :class:`pyjlad.ir.Module` (so the passes
before it share one parse, and those after it another); ``down-level`` rewrites LLVM's syntax itself,
as text. Between ``extract`` and ``down-level`` the module has LLVM 22 syntax and refers to metadata it
no longer defines (metadata is dropped), so those dumps are for reading, not for ``llvm-as``; the input
and the final module are valid.

The helpers the passes use live in :mod:`pyjlad.portable` (runtime replacements, call names),
:mod:`pyjlad.stubs` (what ``extract`` keeps in place of an item) and :mod:`pyjlad.ir.downlevel`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field

from . import address_comparisons, excinfo_slots, stubs
from . import portable as p
from . import stable_names as sn
from .atomic_flags import atomic_flags_as_ir
from .branch_selects import resolve_branch_selects
from .carried_selects import freeze_carried_selects
from .errors import IRError, PortabilityError
from .guarded_selects import branch_guarded_selects
from .integer_minmax import integer_min_max_as_selects
from .inverse_calls import INVERSE, inverse_declarations, inverse_pairs_in
from .ir import analysis, downlevel
from .ir.edit import drop_empty_attribute_groups, drop_repeated_declarations
from .ir.lexer import texts_of
from .ir.module import AttributeGroup, Function, GlobalVariable, Item, Line, Module, TypeDefinition
from .ir.names import is_entry_name, symbol_for
from .ir.pipeline import Pass, Pipeline
from .ir.rewrite import definitions_named, drop_debug_attachments, items_of, map_items, rename
from .list_growth import type_list_growth
from .nested import declare_nested_drivers
from .smooth_sinc import smooth_sinc_zero
from .zero_powers import safe_zero_powers

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


def kind_specific_blas(module: Module, context: PortableContext) -> Module:
    """Call Numba's BLAS/LAPACK helpers by element kind (``@numba_xxdot.d``); record the LAPACK ones to link.

    Numba calls one C helper per operation with the element kind as a run-time argument (``i8 100``
    for double, ``115`` for float); a derivative needs a differentiable implementation per kind:
    pyjlad defines the BLAS ones in the module (``extract``) and links a LAPACK module per helper and
    kind (:func:`pyjlad.lapack.lapack_module`). Each LAPACK helper's kind-specific name is declared
    with the helper's own signature.
    """
    links: set[tuple[str, str]] = set()
    for function in module.definitions:
        function.body = [p.kind_specific_calls(line, links) if "@numba_" in line else line
                         for line in function.body or ()]
    context.links = sorted(links)
    declarations: dict[str, Function] = {}
    for declaration in module.declarations:
        declarations.setdefault(declaration.symbol, declaration)
    module.items.extend(dataclasses.replace(declarations["@" + helper], symbol=f"@{helper}.{kind}")
                        for helper, kind in context.links if "@" + helper in declarations)
    return module


def inverse_pairs(module: Module, context: PortableContext) -> Module:
    """Call ``np.linalg.inv``'s inverse as one function with a reverse rule (``@pyjlad_inverse.d``,
    :mod:`pyjlad.inverse_calls`, :mod:`pyjlad.lapack_inverse`), declared here and linked beside the helpers."""
    kinds: set[str] = set()
    for function in module.definitions:
        kinds |= inverse_pairs_in(function)
    for kind in sorted(kinds):
        module.items.extend(items_of(inverse_declarations(kind)))
    # first: llvm-link drops a linkonce definition nothing linked before it calls (the inverse calls the helpers)
    context.links = [*((INVERSE, kind) for kind in sorted(kinds)), *context.links]
    return module


def typed_list_growth(module: Module, context: PortableContext) -> Module:
    """Each growth of a list whose item type is known made a call of pyjlad's typed growth
    (:func:`pyjlad.list_growth.type_list_growth`)."""
    return type_list_growth(module)


def _entity(item: Item) -> sn.Entity:
    """The :class:`pyjlad.stable_names.Entity` of a function, global or named type."""
    kind = item.keyword if isinstance(item, Function) else "global" if isinstance(item, GlobalVariable) else "type"
    return sn.Entity(kind, item.symbol, item.render())


def stable_names(module: Module, context: PortableContext) -> Module:
    """Rename what Numba names from per-process state; find the entry; drop comments, metadata and ``!dbg``
    attachments.

    The portable text is part of the gradient disk cache's key, so it must be the same in every
    process: string constants Numba names by Python's ``hash()`` get names by content, and the uids
    in mangled names (how many functions the process compiled before) are numbered in order of
    appearance (see :func:`pyjlad.stable_names.stable_uids`).

    Raises
    ------
    PortabilityError
        If the entry function is not defined in the module.
    """
    header = [i for i in module.items if isinstance(i, Line) and i.kind in ("datalayout", "triple")]
    kept = [i for i in module.items if isinstance(i, (Function, GlobalVariable, TypeDefinition))]
    groups = [i for i in module.items if isinstance(i, AttributeGroup)]
    entities = [_entity(item) for item in kept]
    renamed, stable_entry = sn.stable_uids(sn.name_by_content(entities), context.entry)
    items: list[Item] = list(header)
    for item, old, new in zip(kept, entities, renamed, strict=True):
        items.extend([item] if new.text == old.text else items_of(new.text))
    module.items = items + groups
    # The metadata nodes are gone; their ``!dbg`` attachments (Numba's debug information) go too, so that the
    # passes below read each instruction as it would be without them (an address comparison ending in
    # ``, !dbg !117`` was not recognized: np.hstack under NUMBA_DEBUGINFO=1).
    map_items(module, drop_debug_attachments, where=lambda item: isinstance(item, Function) and item.body is not None)
    context.entry_symbol = symbol_for(stable_entry)
    found = module.functions.get(context.entry_symbol)
    if found is None or found.is_declaration:
        raise PortabilityError(f"entry function {context.entry!r} is not defined in the module")
    return module


_REGISTRATIONS = ("@__enzyme_register_derivative_", "@__enzyme_register_gradient_")


def _registered_derivatives(items: dict[str, Item]) -> dict[str, set[str]]:
    """``@f`` -> the ``@__enzyme_register_*_f`` globals of ``items`` (derivatives registered with Enzyme)."""
    found: dict[str, set[str]] = {}
    for symbol in items:
        for prefix in _REGISTRATIONS:
            if symbol.startswith(prefix):
                found.setdefault("@" + symbol[len(prefix):], set()).add(symbol)
    return found


def _global_references(item: Item) -> set[str]:
    """The ``@`` symbols ``item`` mentions, other than its own (never inside ``c"..."`` data)."""
    return set(texts_of(item.render(), "global")) - {getattr(item, "symbol", None)}


def _kept(symbol: str, item: Item | None, groups: dict[str, AttributeGroup],
          context: PortableContext) -> tuple[str, list[Item]]:
    """Where (``"global"``, ``"define"``, ``"declare"``) and as what the reachable ``symbol`` is kept.

    Raises
    ------
    PortabilityError
        If ``symbol`` is referenced but neither defined, declared nor provided by pyjlad's runtime.
    """
    if symbol in p.PORTABLE_RUNTIME:
        return "define", items_of(p.PORTABLE_RUNTIME[symbol])
    if symbol in p._PORTABLE_RUNTIME_DECLS and (item is None or isinstance(item, Function) and item.is_declaration):
        context.externals.append(symbol.lstrip("@"))
        return "declare", items_of(p._PORTABLE_RUNTIME_DECLS[symbol])
    if item is None:
        raise PortabilityError(f"symbol {symbol} is referenced but not declared")
    if isinstance(item, GlobalVariable):
        return "global", [stubs.clean_global(item)]
    if not item.is_declaration:
        if symbol.startswith(stubs.EXCINFO_UNWRAP):
            return "define", items_of(stubs.excinfo_unwrap_stub(symbol))
        if symbol.startswith(stubs.STRING_CODE):
            return "define", [stubs.inactive_definition(item)]
        if symbol.startswith(stubs.HASHING):
            return "define", [stubs.inactive_definition(item, frees=False)]
        raising = stubs.raise_only_stub(item) if symbol.startswith(stubs.RAISE_ONLY) else None
        if raising is not None:
            return "define", items_of(raising)
        context.rewritten.add(symbol)
        return "define", [item]
    if symbol.lstrip("@") in stubs.ERROR_PATH_STUBS:
        return "define", items_of(stubs.stub(item))
    context.externals.append(symbol.lstrip("@").strip('"'))
    return "declare", [stubs.libm_declaration(stubs.mark_inactive(item), groups)]


def extract(module: Module, context: PortableContext) -> Module:
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
    context.numba_functions = {m for f in module.definitions if (m := excinfo_slots.numba_abi_symbol(f.render()))}
    groups = module.attribute_groups
    items: dict[str, Item] = {i.symbol: i for i in module.items if isinstance(i, (Function, GlobalVariable))}
    extra = {symbol: p._PORTABLE_RUNTIME_DEPS.get(symbol, set()) for symbol in p.PORTABLE_RUNTIME}
    for symbol, registrations in _registered_derivatives(items).items():
        if symbol in items and symbol not in extra:  # a reached function brings its Enzyme registration
            extra[symbol] = _global_references(items[symbol]) | registrations
    sections: dict[str, list[Item]] = {"global": [], "define": [], "declare": []}
    for symbol in analysis.reachable(module, context.entry_symbol, extra=extra, references_of=_global_references):
        where, kept = _kept(symbol, items.get(symbol), groups, context)
        sections[where].extend(kept)
    blank = Line("", "blank")
    body: list[Item] = [*module.types.values(), blank, *sections["global"], blank, *sections["define"], blank,
                        *sections["declare"]]
    if not sections["declare"]:
        body.pop()  # as the text this module was: no empty line after the last item
    header = [i for i in module.items if isinstance(i, Line) and i.kind in ("datalayout", "triple")]
    module.items = [*header, blank, *body, *groups.values()]
    return module


#: The globals by which Numba reads an array it does not copy into the module (``add_dynamic_addr``: a global
#: or closure array over 1 MB, or not contiguous), each holding the array's address.
DYNAMIC_GLOBAL_PREFIX = "numba.dynamic.globals."


def constant_dynamic_globals(module: Module, context: PortableContext) -> Module:
    """Declare ``constant`` each global holding the address of an array Numba reads where it is.

    Numba writes ``global`` (it never stores to one); Enzyme took such a global for memory the function could
    write, with no shadow, and refused every function reading a global array over 1 MB ("cannot compute with
    global variable that doesn't have marked shadow global", until 2026-12-06). Constant, it is a constant of
    the function, as the small arrays Numba copies into the module are.

    >>> from pyjlad.ir import parse
    >>> module = parse('@"numba.dynamic.globals.7f" = linkonce local_unnamed_addr global ptr inttoptr (i64 8 to ptr)')
    >>> constant_dynamic_globals(module, PortableContext("f", "f")).items[0].kind
    'constant'
    """
    for item in module.items:
        if isinstance(item, GlobalVariable) and item.kind == "global" and item.name.startswith(DYNAMIC_GLOBAL_PREFIX):
            item.kind = "constant"
    return module


def split_excinfo_slots(module: Module, context: PortableContext) -> Module:
    """Give the exception slot of each call to a Numba function its own ``alloca`` where LLVM shared it.

    Enzyme's type analysis gives a stack slot one type for the whole function; LLVM may reuse one
    slot for an exception pointer and, later, an integer shape (see
    :func:`pyjlad.excinfo_slots.split_shared_excinfo_slots`).
    """
    return map_items(module, lambda d: excinfo_slots.split_shared_excinfo_slots(d, context.numba_functions),
                     where=definitions_named(context.rewritten))


def split_result_slots(module: Module, context: PortableContext) -> Module:
    """Give each block's use of a slot that Numba calls return through its own ``alloca`` where LLVM shared one
    between calls returning different types (see :func:`pyjlad.excinfo_slots.split_result_slots`)."""
    return map_items(module, lambda d: excinfo_slots.split_result_slots(d, context.numba_functions),
                     where=definitions_named(context.rewritten))


def branch_selects(module: Module, context: PortableContext) -> Module:
    """Read a pointer ``select`` on a branch's condition as its operand on each side of the branch.

    Numba's callees kept out of line (debug information) gave one ``select`` of a call's result and its
    exception, two pointers Enzyme cannot type alike (see :mod:`pyjlad.branch_selects`).
    """
    return map_items(module, resolve_branch_selects, where=definitions_named(context.rewritten))


def opaque_address_comparisons(module: Module, context: PortableContext) -> Module:
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

    return map_items(module, rewrite, where=definitions_named(context.rewritten))


def freeze_selects(module: Module, context: PortableContext) -> Module:
    """Put a ``freeze`` after each loop-carried ``select`` (a running max/min), so Enzyme's general rule applies.

    Enzyme v0.0.289's reverse rule for such a select sends its adjoint only to the element chosen
    at the loop's exit (see :mod:`pyjlad.carried_selects`).
    """
    return map_items(module, lambda d: freeze_carried_selects(d)[0], where=definitions_named(context.rewritten))


def guarded_selects(module: Module, context: PortableContext) -> Module:
    """Write a speculated float ``select`` whose discarded side's derivative depends on its values as a branch.

    Enzyme's adjoint of the discarded side is ``0 * value``: NaN where the guard failed because the value is
    NaN or infinite (``np.nanvar``'s gradient was all NaN; see :mod:`pyjlad.guarded_selects`).
    """
    return map_items(module, branch_guarded_selects, where=definitions_named(context.rewritten))


def smooth_special_points(module: Module, context: PortableContext) -> Module:
    """Write the special points of Numba's implementations of smooth functions with their values and the
    functions' derivatives there: ``np.sinc`` at 0 (``sinc(1e-20)``, a constant to Enzyme: a Hessian of 0; see
    :mod:`pyjlad.smooth_sinc`) and ``pow(x, p)`` at ``x = p = 0``, whose derivative Enzyme took as ``0 * inf``
    (see :mod:`pyjlad.zero_powers`). (The ties of ``np.logaddexp`` are written in smooth form when Numba compiles
    the copy Enzyme differentiates: :mod:`pyjlad.smooth_logaddexp`.)"""
    return map_items(module, lambda d: safe_zero_powers(smooth_sinc_zero(d)),
                     where=definitions_named(context.rewritten))


def integer_min_max(module: Module, context: PortableContext) -> Module:
    """Write each integer ``min``/``max`` intrinsic as an ``icmp`` and a ``select``, which Enzyme differentiates.

    Enzyme v0.0.289 has no reverse rule for ``@llvm.smin`` and its kin, and stops on one it cannot prove
    inactive: an index clamped after ``np.searchsorted`` (see :mod:`pyjlad.integer_minmax`).
    """
    return map_items(module, lambda d: integer_min_max_as_selects(d)[0], where=definitions_named(context.rewritten))


def down_level(text: str, context: PortableContext) -> str:
    """Rewrite LLVM 22 syntax to LLVM 15's, line by line.

    The Enzyme plugin runs under LLVM 15 and Julia's ``llvmcall`` reads LLVM 16/18: newer
    attributes, flags, intrinsic spellings and vector math intrinsics become their LLVM 15
    equivalents, or are dropped where they only carry optimization hints (see
    :func:`pyjlad.ir.downlevel.rewrite_line`). Attribute groups are translated by
    ``translate-attribute-groups``.
    """
    lines = text.split("\n")
    return "\n".join(line if line.startswith("attributes #") else downlevel.rewrite_line(line) for line in lines)


def _used_groups(module: Module) -> set[str]:
    """The ``#N`` attribute groups the items of ``module`` name: function headers, call sites, globals."""
    used: set[str] = set()
    for item in module.items:
        if isinstance(item, Function):
            used.update(item.attribute_group_refs)
            used.update(g for line in item.body or () if "#" in line for g in texts_of(line, "attrgroup"))
        elif not isinstance(item, AttributeGroup) and "#" in (text := item.render()):
            used.update(texts_of(text, "attrgroup"))
    return used


def translate_attribute_groups(module: Module, context: PortableContext) -> Module:
    """Keep only the attribute groups still used, translated to LLVM 15's attributes, in numeric order.

    LLVM 22 attributes (``memory(...)``, ``nocreateundeforpoison``, ...) have no LLVM 15 spelling, or
    another one (see :func:`pyjlad.ir.downlevel.translate_attribute_group`); a group no function of the
    portable module names any more is dropped.
    """
    groups = {g.ref: g for g in module.attribute_groups.values()}
    module.items = [i for i in module.items if not isinstance(i, AttributeGroup)]
    for ref in sorted(_used_groups(module), key=lambda g: int(g[1:])):
        old = groups.get(ref)
        attributes = downlevel.translate_attribute_group(" ".join(old.attributes) if old else "")
        module.items.append(AttributeGroup(ref, [attributes] if attributes else []))
    return drop_empty_attribute_groups(module)  # a group whose every attribute went (opt's CPU attributes)


def unique_names(module: Module, context: PortableContext) -> Module:
    """Name the entry ``@<name>``; make the renumbered mangled names unique to this module.

    A digest of the module goes into every renumbered uid, so two modules linked together (LAPACK,
    custom rules) never give one name to two different functions, which Numba's ``linkonce_odr``
    linkage would merge.
    """
    salt = hashlib.sha256(module.render().encode()).hexdigest()[:12]
    map_items(module, lambda text: sn.salt_uids(text, salt))
    return rename(module, sn.salt_uids(context.entry_symbol, salt), "@" + context.name)


def dedupe_declarations(module: Module, context: PortableContext) -> Module:
    """Drop repeated declarations (two intrinsics ``down-level`` mapped onto one libm name)."""
    return drop_repeated_declarations(module)


def declare_libm_calls(module: Module, context: PortableContext) -> Module:
    """Declare the libm functions that scalarized vector intrinsics now call."""
    declared = set(module.functions)
    added: dict[str, str] = {}
    for function in module.definitions:
        for line in function.body or ():
            if "call double @" not in line and "call float @" not in line:
                continue
            for type_, name, base in p.libm_calls(line):
                if "@" + name not in declared and name not in added:
                    arity = 2 if base == "atan2" else 1
                    added[name] = f"declare {type_} @{name}({', '.join([type_] * arity)})"
    module.items.extend(items_of("\n".join(added.values())) if added else [])
    context.externals.extend(added)
    return module


def atomic_flag_intrinsics(module: Module, context: PortableContext) -> Module:
    """Write x86's atomic flag intrinsics (``@llvm.x86.atomic.sub.cc.i64``, which LLVM's x86 code generator makes
    of a reference count's release in a module Numba had compiled) back as an ``atomicrmw`` and a compare (see
    :mod:`pyjlad.atomic_flags`); their declarations, no longer used, are dropped by ``extract``."""
    return map_items(module, lambda d: atomic_flags_as_ir(d)[0], where=lambda item: isinstance(item, Function))


def refuse_target_intrinsics(module: Module, context: PortableContext) -> Module:
    """Refuse x86-specific intrinsics: no other target, and no LLVM 15 Enzyme rule, knows them.

    Raises
    ------
    PortabilityError
        Naming the intrinsic.
    """
    for item in module.items:
        text = item.render()
        if "@llvm.x86." not in text:
            continue
        for symbol in texts_of(text, "global"):
            if symbol.startswith("@llvm.x86."):
                raise PortabilityError(
                    f"the function uses the target-specific intrinsic {symbol}, "
                    "which cannot be made portable; rewrite the code that produces it"
                )
    return module


#: The portable pipeline, in order.
PORTABLE = Pipeline("portable", (
    Pass("nested-drivers", declare_nested_drivers, "derivatives called from the function declared only"),
    Pass("kind-specific-blas", kind_specific_blas, "BLAS/LAPACK call names; declarations added"),
    Pass("inverse-pairs", inverse_pairs, "np.linalg.inv's LAPACK calls; a declaration added"),
    Pass("typed-list-growth", typed_list_growth, "calls that grow lists"),
    Pass("atomic-flag-intrinsics", atomic_flag_intrinsics, "bodies: x86 atomic flag intrinsics written back"),
    Pass("stable-names", stable_names, "global names; comments and metadata dropped"),
    Pass("extract", extract, "which items are kept; runtime definitions and stubs"),
    Pass("constant-dynamic-globals", constant_dynamic_globals, "globals holding arrays' addresses"),
    Pass("split-excinfo-slots", split_excinfo_slots, "bodies of Numba's functions"),
    Pass("split-result-slots", split_result_slots, "bodies of Numba's functions"),
    Pass("branch-selects", branch_selects, "bodies of Numba's functions"),
    Pass("opaque-address-comparisons", opaque_address_comparisons, "bodies of Numba's functions; a helper added"),
    Pass("freeze-carried-selects", freeze_selects, "bodies of Numba's functions"),
    Pass("guarded-selects", guarded_selects, "bodies of Numba's functions: blocks added"),
    Pass("smooth-special-points", smooth_special_points, "bodies of Numba's functions: instructions added"),
    Pass("integer-min-max", integer_min_max, "bodies of Numba's functions"),
    Pass("down-level", down_level, "syntax, vector intrinsics", form="text"),
    Pass("translate-attribute-groups", translate_attribute_groups, "attribute groups"),
    Pass("unique-names", unique_names, "the entry's and mangled names"),
    Pass("dedupe-declarations", dedupe_declarations, "declarations"),
    Pass("declare-libm-calls", declare_libm_calls, "declarations"),
    Pass("refuse-target-intrinsics", refuse_target_intrinsics, "nothing: a check"),
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
    if not is_entry_name(name):
        raise IRError(f"invalid LLVM identifier for the entry: {name!r}")
    context = PortableContext(entry=entry, name=name)
    text = PORTABLE.run(ir, context, label=name, prefix=dump_as)
    return p.PortableModule(text=text, entry=name, external_functions=tuple(sorted(set(context.externals))),
                            links=tuple(context.links))
