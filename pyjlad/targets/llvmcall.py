"""The ``llvmcall`` target: the module text Julia's ``Base.llvmcall`` receives (the Julia engine's input).

:data:`LLVMCALL` runs four passes over a linked portable module (the context is the entry's name)::

    drop-target-lines     Julia sets its own data layout and triple
    define-runtime-hooks  Numba runtime functions Julia's process lacks, defined through libc
    internalize           every definition but the entry's made internal (one copy per llvmcall site)
    own-trip-counts       every loop's exit compares read a freeze of their own of its bound
                          (pyjlad.trip_counts: Enzyme v0.0.289 reads a sibling loop's loads from another
                          loop's cache; whether Enzyme.jl's Enzyme still does, and whether each freeze
                          survives Julia's own optimization before Enzyme.jl runs, is not checked: no Julia
                          here)

:func:`julia_module_text` adds what the engine needs around them: pyjlad's LAPACK loops linked in, and
the refusal of calls Julia's JIT cannot resolve (:func:`unresolvable_symbols`).
"""

from __future__ import annotations

from ..engines.differentiate import linked_modules
from ..errors import UnsupportedFunctionError
from ..export import ExportedFunction
from ..ir import Function, GlobalVariable, Line, Module, parse
from ..ir.edit import declare
from ..ir.pipeline import Pass, Pipeline
from ..portable import RUNTIME_CALL_DTOR
from ..rules import calls_custom_rules
from ..toolchain import locate
from ..trip_counts import distinct_trip_counts

__all__ = ["LLVMCALL", "drop_target_lines", "define_runtime_hooks", "internalize", "own_trip_counts",
           "llvmcall_module", "unresolvable_symbols", "julia_module_text", "LIBM", "LIBC"]

#: C library functions Julia's JIT resolves in its own process; PyJlad.jl keeps the same list.
LIBM = frozenset("""sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 expm1 log log2
    log10 log1p pow sqrt cbrt hypot erf erfc tgamma lgamma fmod floor ceil trunc round rint nearbyint fabs
    copysign fmin fmax fma ldexp frexp modf remainder""".split())
LIBC = frozenset({"malloc", "calloc", "realloc", "free", "memcpy", "memmove", "memset", "abort"})

#: The definitions :func:`define_runtime_hooks` puts in place of the declarations; each calls a libc
#: function that is declared when the module lacks it.
_HOOKS = {
    RUNTIME_CALL_DTOR: (("void", ["ptr"]),
                        f"define internal void @{RUNTIME_CALL_DTOR}(ptr %mi) {{\n  call void @free(ptr %mi)\n"
                        "  ret void\n}\n", "declare void @free(ptr)"),
    "numba_fatal_error": (("i32", []),
                          "define internal i32 @numba_fatal_error() {\n  call void @abort()\n  unreachable\n}\n",
                          "declare void @abort()"),
}
#: LLVM's linkage types (a definition or global with one keeps it).
_LINKAGE_TYPES = frozenset({"private", "internal", "available_externally", "linkonce", "weak", "common",
                            "appending", "extern_weak", "linkonce_odr", "weak_odr", "external"})


def drop_target_lines(module: Module, entry: str) -> Module:
    """Remove the target lines: Julia sets its own data layout and triple on the module ``llvmcall`` gets."""
    module.items = [item for item in module.items
                    if not (isinstance(item, Line) and item.kind in ("datalayout", "triple"))]
    module.trailing_newline = True
    return module


def _hook(function: Function) -> str | None:
    """The name of the runtime hook ``function`` declares (with the hook's own signature), or ``None``."""
    hook = _HOOKS.get(function.name)
    if hook is None or not function.is_declaration or function.varargs:
        return None
    return_type, parameter_types = hook[0]
    if function.return_type != return_type or [p.type for p in function.parameters] != parameter_types:
        return None
    return function.name


def define_runtime_hooks(module: Module, entry: str) -> Module:
    """Define the runtime functions Julia's process does not have: the destructor hook as ``free``,
    ``numba_fatal_error`` as ``abort``.

    Called from Julia, no MemInfo with a Numba-runtime destructor can reach the hook; Numba's helperlib
    ``numba_fatal_error`` (``Py_FatalError``) is not in Julia's process image: the same fatal stop, through libc.
    Each declaration is replaced where it stands; ``free``/``abort`` are declared at the end unless the
    module has them already.
    """
    defined: list[str] = []
    for index, item in enumerate(module.items):
        name = _hook(item) if isinstance(item, Function) else None
        if name is not None:
            (module.items[index],) = parse(_HOOKS[name][1]).items
            defined.append(name)
    for name in _HOOKS:   # in this order: free, then abort
        if name in defined:
            declare(module, _HOOKS[name][2])
    return module


def _internal(linkage: list[str]) -> list[str]:
    """``linkage`` with ``internal`` first and no ``hidden``/``protected`` (local linkage needs default visibility)."""
    return ["internal", *(word for word in linkage if word not in ("hidden", "protected"))]


def internalize(module: Module, entry: str) -> Module:
    """Every external definition but ``entry``'s made ``internal``.

    Julia parses a module per ``llvmcall`` site, renames only the entry and
    links the module into the calling function's (julia src/ccall.cpp,
    ``emit_llvmcall``: ``f->setName(ir_name)``, ``ctx.llvmcall_modules``); two
    sites of one function, or two functions sharing a callee (pyjlad's LAPACK
    loops), would define the same external symbol twice ("symbol multiply
    defined"). Internal definitions are private to each copy. Definitions and
    globals that have a linkage type of their own (``linkonce_odr``,
    ``external`` declarations of globals, ...) keep it.
    """
    for item in module.items:
        if isinstance(item, Function) and item.is_declaration:
            continue
        if not isinstance(item, (Function, GlobalVariable)) or item.name == entry:
            continue
        if not _LINKAGE_TYPES.intersection(item.linkage):
            item.linkage = _internal(item.linkage)
    return module


def own_trip_counts(text: str, entry: str) -> str:
    """Every loop's exit compares read a ``freeze`` of their own of the loop's bound
    (:func:`pyjlad.trip_counts.distinct_trip_counts`)."""
    return distinct_trip_counts(text)


#: The passes that make a linked portable module the text Julia's ``llvmcall`` receives; the context is the entry.
LLVMCALL = Pipeline("llvmcall", (
    Pass("drop-target-lines", drop_target_lines, "target lines"),
    Pass("define-runtime-hooks", define_runtime_hooks, "declarations become definitions"),
    Pass("internalize", internalize, "linkage of every definition but the entry"),
    Pass("own-trip-counts", own_trip_counts, "the exit compares of loops", form="text"),
))


def llvmcall_module(portable_text: str) -> str:
    """The module text handed to Julia's ``Base.llvmcall``, before :func:`internalize`: no target lines,
    runtime hooks defined (the first two passes of :data:`LLVMCALL`)."""
    return define_runtime_hooks(drop_target_lines(parse(portable_text), ""), "").render()


def unresolvable_symbols(module: str | Module) -> list[str]:
    """The functions ``module`` declares that Julia's JIT cannot resolve, in the order declared.

    An unresolved symbol in an ``llvmcall`` module aborts Julia at link time,
    so such modules are refused before they reach it. LLVM intrinsics, :data:`LIBC` and :data:`LIBM`
    (and its ``float`` versions, ``sinf``) resolve.

    Examples
    --------
    >>> unresolvable_symbols("declare float @sinf(float)\\ndeclare void @cblas_ddot(ptr)\\n")
    ['cblas_ddot']
    """
    module = parse(module) if isinstance(module, str) else module
    out = []
    for function in module.declarations:
        name = function.name
        plain = name[:-1] if name.endswith("f") and name[:-1] in LIBM else name
        if not (name.startswith("llvm.") or plain in LIBM or name in LIBC):
            out.append(name)
    return out


def julia_module_text(exported: ExportedFunction) -> str:
    """The complete module of ``exported`` as ``llvmcall`` takes it (pyjlad's LAPACK loops linked in).

    Raises
    ------
    UnsupportedFunctionError
        If the function calls a :func:`pyjlad.custom_derivative` (its rules
        are registered for the embedded engine's Enzyme only), or a function
        Julia's JIT cannot resolve (SciPy's BLAS/LAPACK behind Numba's
        ``np.dot``/``np.linalg``, which would abort Julia).
    """
    if calls_custom_rules(exported.module.external_functions):
        raise UnsupportedFunctionError(
            f"{exported.name} calls a pyjlad.custom_derivative; its rules are applied by the embedded "
            "engine only: use engine='embedded', or write the rule with Enzyme.jl's EnzymeRules in Julia"
        )
    text = exported.enzyme_module.text
    extra = linked_modules(exported)
    if extra:
        text = locate().link([text, *extra], what=exported.name, text=True).decode()
    text = LLVMCALL.run(text, exported.abi.entry, label=exported.abi.entry)
    missing = unresolvable_symbols(text)
    if missing:
        raise UnsupportedFunctionError(
            f"{exported.name} calls {', '.join(missing)}, which Julia's JIT cannot resolve (BLAS/LAPACK from "
            "SciPy or Numba's runtime; an unresolved symbol would abort Julia): use engine='embedded'"
        )
    return text
