"""The parts of a portable module: pyjlad's runtime replacements, the BLAS/LAPACK and libm call names.

Numba 0.68 prints IR with LLVM 22's syntax, and the module it keeps holds much more than the
function to differentiate: the CPython and ``cfunc`` wrappers, ``NumbaEnv`` globals, Python C-API
declarations and, once compiled, x86-specific intrinsics. The passes of
:mod:`pyjlad.portable_pipeline` (:func:`~pyjlad.portable_pipeline.make_portable`) keep only the entry
function and what it transitively references, with names that are the same in every process
(:mod:`pyjlad.stable_names`), and rewrite every construct newer than LLVM 15 (:mod:`pyjlad.ir.downlevel`).
The result is accepted by ``llvm-as`` 15, 16, 19 and 22 alike, which is what the Enzyme plugin
(LLVM 15) and Julia's ``Base.llvmcall`` (LLVM 16/18) need. This module holds what those passes share;
:mod:`pyjlad.stubs` what ``extract`` keeps in place of Numba's error-path code.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from . import runtime
from .ir.downlevel import NEW_MATH_INTRINSICS, split_top_level
from .ir.lexer import Token, texts_of, tokenize
from .ir.module import parse, parse_function_header

__all__ = ["PortableModule", "PORTABLE_RUNTIME", "RUNTIME_CALL_DTOR", "dedupe_declarations", "has_recursion",
           "split_top_level"]


#: libm functions (double; the float versions add an ``f``) Enzyme differentiates
#: by name and CUDA's libdevice provides as ``__nv_<name>``.
LIBM_FUNCTIONS = frozenset(
    """sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 exp10
    expm1 log log2 log10 log1p sqrt cbrt pow hypot fabs fmod floor ceil round trunc
    erf erfc tgamma lgamma fmax fmin copysign""".split()
)
# Numba's memory-management runtime, written as IR that Enzyme can read: replacement runtime
# IR in package data (pyjlad/runtime/*.ll, whose header comments say what each function
# replaces and why Enzyme needs it). nrt.ll: Numba's NRT reference counting and allocator
# (same semantics and MemInfo layout as nrt.cpp, but malloc/free Enzyme can shadow). A MemInfo
# with a destructor (e.g. one wrapping a NumPy array owned by Python) is handed to Numba's own
# NRT_MemInfo_call_dtor, exported under the name RUNTIME_CALL_DTOR (resolved by the engine that
# loads the module).
RUNTIME_CALL_DTOR = "pyjlad_NRT_MemInfo_call_dtor"

PORTABLE_RUNTIME = runtime.definitions("nrt.ll")
# cblas.ll: Numba's BLAS helpers (numba_xxdot/gemv/gemm/nrm2 in numba/_lapack.c) over CBLAS,
# which Enzyme differentiates with its BLAS rules, one definition per kind.
# Numba always passes the kind as a constant ('d' = 100, 's' = 115); calls are
# renamed to the kind's own definition, so each has one element type (Enzyme's
# type analysis rejects a function storing both float and double to one pointer).
_BLAS_KINDS = {"100": ("d", "double"), "115": ("s", "float")}
#: Numba's BLAS helpers, defined per kind in cblas.ll (``@numba_xxdot.d``).
BLAS_HELPERS = frozenset({"numba_xxdot", "numba_xxgemv", "numba_xxgemm", "numba_xxnrm2"})
#: Numba's LAPACK helpers, linked per kind from :func:`pyjlad.lapack.lapack_module`.
LAPACK_HELPERS = frozenset({"numba_xxgetrf", "numba_ez_xxgetri", "numba_xgesv", "numba_xxpotrf"})
_BLAS_RUNTIME = runtime.definitions("cblas.ll")
PORTABLE_RUNTIME.update(_BLAS_RUNTIME)

# What each runtime definition refers to (read from its IR).
_PORTABLE_RUNTIME_DEPS = {**runtime.dependencies("nrt.ll"), **runtime.dependencies("cblas.ll")}
# Declarations the definitions above need (the runtime destructor is inactive and `nofree`:
# see nrt.ll).
_PORTABLE_RUNTIME_DECLS = {**runtime.declarations("nrt.ll"), **runtime.declarations("cblas.ll")}


def blas_element_types() -> dict[str, str]:
    """The element type of every pointer each kind-specific BLAS helper takes (its arrays, its scalars and its
    result are of its kind), by the helper's ``@name``:

    >>> blas_element_types()["@numba_xxgemv.d"]
    'double'
    """
    return {f"@{helper}.{letter}": element for helper in sorted(BLAS_HELPERS)
            for letter, element in _BLAS_KINDS.values()}


def _blas_call(tokens: list[Token], k: int) -> tuple[str, str] | None:
    """``(helper, kind letter)`` if ``tokens[k]`` is a BLAS/LAPACK helper called with a constant element kind
    (``@numba_xxdot(i8 100,``); ``None`` otherwise."""
    helper = tokens[k].text[1:]
    if tokens[k].kind != "global" or helper not in BLAS_HELPERS | LAPACK_HELPERS:
        return None
    after = [t.text for t in tokens[k + 1:k + 6]]
    if after[:3] != ["(", "i8", " "] or after[4:] != [","] or after[3] not in _BLAS_KINDS:
        return None
    return helper, _BLAS_KINDS[after[3]][0]


def kind_specific_calls(line: str, links: set[tuple[str, str]]) -> str:
    """``line`` with each BLAS/LAPACK helper called with a constant kind renamed ``@<helper>.<kind>``; the LAPACK
    ones added to ``links``."""
    tokens = tokenize(line)
    for k in range(len(tokens)):
        found = _blas_call(tokens, k)
        if found is not None:
            tokens[k] = Token("global", f"@{found[0]}.{found[1]}")
            if found[0] in LAPACK_HELPERS:
                links.add(found)
    return "".join(t.text for t in tokens)


# Numba runtime helpers that only compute integers (shapes, strides) from their
# arguments: their declarations are marked so that Enzyme treats calls to them as
# inactive and knows they free nothing.
# Numba's threading-layer helpers (thread counts, the parfor schedule) and OpenMP's thread
# count/number, which only a parallel derivative (pyjlad.openmp_loops) calls, are of that kind too.
INACTIVE_HELPERS = frozenset({
    "numba_attempt_nocopy_reshape", "numba_fatal_error",
    "numba_get_internal_random_state", "numba_rnd_shuffle",
    "get_num_threads", "get_parallel_chunksize", "set_parallel_chunksize", "get_sched_size",
    "do_scheduling_signed", "do_scheduling_unsigned", "omp_set_num_threads", "omp_get_thread_num",
})


#: The libm functions ``down-level`` calls for LLVM 22 math intrinsics (double; float adds ``f``).
_LIBM_TARGETS = frozenset(NEW_MATH_INTRINSICS.values())


def libm_calls(line: str) -> Iterator[tuple[str, str, str]]:
    """``(type, name, libm name)`` of each ``call double @tanh(`` / ``call float @tanhf(`` in ``line`` whose callee is a
    libm function ``down-level`` maps an intrinsic to."""
    tokens = tokenize(line)
    for k in range(len(tokens) - 5):
        texts = [t.text for t in tokens[k:k + 6]]
        if texts[0] == "call" and texts[1] == texts[3] == " " and texts[2] in ("double", "float") \
                and texts[5] == "(" and tokens[k + 4].kind == "global":
            name = texts[4][1:]
            base = name if name in _LIBM_TARGETS else name[:-1] if name.endswith("f") else ""
            if base in _LIBM_TARGETS:
                yield texts[2], name, base


def is_libm_function(name: str) -> bool:
    """Whether ``name`` is a libm function of :data:`LIBM_FUNCTIONS` (double, or float with an ``f``)."""
    return name in LIBM_FUNCTIONS or (name.endswith("f") and name[:-1] in LIBM_FUNCTIONS)


def is_inactive_helper(name: str) -> bool:
    """Whether ``name`` is a runtime helper that never carries derivatives.

    The Python C API and the GIL helpers (print(), formatted exception messages)
    are deliberately not listed: Enzyme may replay inactive calls in the reverse
    sweep, and a replayed ``numba_gil_ensure`` deadlocks.
    """
    return name in INACTIVE_HELPERS


@dataclass(frozen=True)
class PortableModule:
    """A self-contained LLVM module holding one Numba function.

    Attributes
    ----------
    text : str
        The module's LLVM IR (opaque pointers, LLVM 15 syntax).
    entry : str
        Name of the entry function (without ``@``), Numba's inner ABI
        function ``i32 (ptr retptr, ptr excinfo, args...)``.
    external_functions : tuple of str
        Functions the module declares but does not define (libm, Numba's
        runtime, LLVM intrinsics); resolved when the module is linked or JIT-ed.
    links : tuple of (str, str)
        ``(helper, kind)`` pairs of Numba LAPACK helpers the module calls as
        ``@<helper>.<kind>``: the modules of :func:`pyjlad.lapack.lapack_module`
        to link with it.
    """

    text: str
    entry: str
    external_functions: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()


def _global_symbols(text: str) -> set[str]:
    """The ``@`` symbols ``text`` mentions, read by the IR lexer.

    The lexer tells quoted names (``@"f.<locals>.func"``, ``%"arg.spéc"``), constant byte strings
    (``c"..@x.."``: data, not references) and comments apart. Stripping ``c"..."`` with a regex does
    not: ``c"[^"]*"`` also matches the end of a quoted name ending in ``c`` and swallows every symbol
    up to the next quote, so a function's callees went missing from the portable module.
    """
    return set(texts_of(text, "global"))


def _references(text: str, own_name: str) -> set[str]:
    """Global symbols ``text`` refers to, other than ``own_name`` (never those inside ``c"..."`` data)."""
    return _global_symbols(text) - {own_name}


def dedupe_declarations(text: str) -> str:
    """Drop repeated ``declare`` lines (two names mapped onto one).

    >>> print(dedupe_declarations("declare double @tan(double)\\ndeclare double @tan(double)\\n"), end="")
    declare double @tan(double)
    """
    seen: set[str] = set()
    out = []
    for line in text.splitlines():
        if line.startswith("declare "):
            symbol = parse_function_header(line).symbol
            if symbol in seen:
                continue
            seen.add(symbol)
        out.append(line)
    return "\n".join(out) + "\n"


def has_recursion(text: str) -> bool:
    """Whether a function defined in module ``text`` can call itself (directly or through others).

    Deep recursion needs a deep stack; the engine runs such sweeps on a thread with a large one.
    """
    defined = {f.symbol: f for f in parse(text).definitions}
    calls = {name: _global_symbols("\n".join(f.body or ())) & defined.keys() for name, f in defined.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: finished

    def cycle_from(name: str) -> bool:
        state[name] = 1
        for callee in calls[name]:
            if state.get(callee) == 1 or (callee not in state and cycle_from(callee)):
                return True
        state[name] = 2
        return False

    return any(name not in state and cycle_from(name) for name in defined)
