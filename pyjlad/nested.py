"""Nested differentiation: differentiating a function that calls a pyjlad derivative from ``@njit`` code.

A derivative called from ``@njit`` code (:mod:`pyjlad.numba_calls`) is a call to
its Enzyme driver's symbol (``pyjlad_<f>_<mode>_<digest>``), whose code, linked
into the caller, is machine code Enzyme produced. Enzyme cannot differentiate
that code a second time as it was compiled, but it differentiates a module that
calls ``__enzyme_autodiff`` inside a function it differentiates: it lowers the
inner call first, then differentiates the derivative it generated. So the
export of the outer function ``g`` keeps only a declaration of the inner driver
(:func:`declare_nested_drivers`, the first pass of the portable pipeline), and
the module Enzyme gets for ``g`` is linked with the inner driver's module as it
was *before* Enzyme (:func:`nested_modules`): the inner function's portable
module and a driver calling ``__enzyme_autodiff``/``__enzyme_fwddiff`` on it,
built without the out-of-memory guard (``setjmp``, which Enzyme cannot
differentiate), every definition but the driver made internal so the inner
function's symbols never clash with the outer's.

Every driver :func:`pyjlad.engines.embedded.build` makes is remembered here by
symbol (:func:`remember`); a symbol only names that one module, since its
digest covers the inner module's text, ABI, mode and activities.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .activity import Activity
from .errors import EnzymeError
from .ir.edit import rename_callees
from .ir.module import Module, parse
from .nested_raises import checked_first, loops_left_early

__all__ = ["NestedDerivativeError", "NestedSweep", "cache_key_parts", "calls_kept", "declare_nested_drivers",
           "explain_failure", "is_nested_driver", "keep_calls", "nested_modules", "refuse_endless", "remember"]


class NestedDerivativeError(EnzymeError):
    """Enzyme could not differentiate a function through a pyjlad derivative it calls from ``@njit`` code.

    The message names the function, the derivative it calls and, where known,
    the construct of the inner function to rewrite; Enzyme's report is in
    :attr:`diagnostics`.
    """


@dataclass(frozen=True)
class NestedSweep:
    """What rebuilds one driver's module before Enzyme.

    Attributes
    ----------
    exported : ExportedFunction
        The inner function as exported.
    mode : str
        ``"reverse"`` or ``"forward"``.
    activities : tuple of Activity
        The driver's per-argument activities.
    noalias : bool
        The driver's ``noalias`` choice (see :func:`pyjlad.engines.driver.ad_driver`).
    value : bool
        Whether the driver computes the function's value (``ad_driver``'s ``value``).
    """

    exported: Any
    mode: str
    activities: tuple[Activity, ...]
    noalias: bool
    value: bool = True


#: Held weakly: the build that made a driver holds its sweep (see :func:`remember`), so a function the
#: user drops is not kept alive by this registry.
_SWEEPS: weakref.WeakValueDictionary[str, NestedSweep] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def remember(symbol: str, sweep: NestedSweep) -> NestedSweep:
    """Record that the driver ``symbol`` is built from ``sweep`` (called by every build).

    Returns the sweep recorded for ``symbol``; the caller must keep it (the registry holds it
    weakly) for as long as the driver's machine code can be called.
    """
    with _LOCK:
        return _SWEEPS.setdefault(symbol, sweep)


_KEEPING = threading.local()


@contextlib.contextmanager
def calls_kept() -> Iterator[None]:
    """While pyjlad compiles a function's copy for Enzyme: calls to derivatives are not inlined.

    A derivative that takes nothing from the pool has no ``setjmp`` guard and LLVM may
    inline it into its caller (see :mod:`pyjlad.numba_calls`): its Enzyme-generated code
    would then be in the caller's body, where :func:`declare_nested_drivers` cannot
    replace it by the derivative's module before Enzyme.
    """
    previous = getattr(_KEEPING, "on", False)
    _KEEPING.on = True
    try:
        yield
    finally:
        _KEEPING.on = previous


def keep_calls() -> bool:
    """Whether a call to a derivative being lowered now must stay a call (see :func:`calls_kept`)."""
    return getattr(_KEEPING, "on", False)


def is_nested_driver(name: str) -> bool:
    """Whether ``name`` is the symbol of a driver pyjlad built in this process."""
    return name in _SWEEPS


#: Linkage a declaration cannot have (a driver's definition may).
_DEFINITION_ONLY_LINKAGE = frozenset({"internal", "private", "linkonce_odr", "linkonce", "weak_odr", "weak", "external",
                                      "available_externally", "dso_local"})


def declare_nested_drivers(module: Module, context: object = None) -> Module:
    """Keep only a declaration of each pyjlad derivative the function calls (the ``nested-drivers`` pass).

    Its definition in a Numba library's module is the machine code Enzyme already
    produced, which Enzyme cannot differentiate again; the module Enzyme gets is
    linked with the derivative's module as it was before Enzyme instead
    (:func:`nested_modules`), so that one Enzyme run differentiates both. What the
    definition reached (the differentiated functions, the runtime they call) is then
    unreachable from the entry and dropped by the portable pipeline's ``extract``.
    """
    for function in module.definitions if _SWEEPS else ():
        if function.name in _SWEEPS:
            function.keyword, function.body = "declare", None
            function.linkage = [word for word in function.linkage if word not in _DEFINITION_ONLY_LINKAGE]
            if "personality" in function.attributes:
                del function.attributes[function.attributes.index("personality"):]
    return module


def _driver_module(symbol: str, sweep: NestedSweep, under_reverse: bool) -> list[str]:
    """The inner sweep's modules before Enzyme: the function with its unguarded driver, and what it links.

    ``under_reverse``: the derivative linking it is a reverse sweep; a reverse inner sweep of a function with a
    loop left early is refused then (:func:`pyjlad.nested_raises.loops_left_early`)."""
    from .engines.differentiate import linked_modules
    from .engines.driver import ad_driver

    exported = sweep.exported
    driver = ad_driver(exported.abi, sweep.mode, sweep.activities, noalias=sweep.noalias,
                       salt=exported.module.text, oom_guard=False, value=sweep.value)
    assert driver.symbol == symbol, (driver.symbol, symbol)
    # its loops' raising exits, which Enzyme cannot differentiate twice, checked by a run of the function first
    module = checked_first(driver.module(exported.enzyme_module.text), symbol, driver.primal)
    if under_reverse and sweep.mode == "reverse":
        _refuse_loops_left_early(symbol, loops_left_early(module, driver.primal))
    return [_zeroed_shadows_by_the_c_library(module), *linked_modules(exported)]


def _zeroed_shadows_by_the_c_library(text: str) -> str:
    """``text`` with the driver's zeroed shadows (of constant arrays the function writes) allocated and released by
    ``calloc`` and ``free``: the outer Enzyme run differentiates the driver, and knows those (the engine's own
    names for them, :data:`pyjlad.engines.driver.ZEROED`/``RELEASE``, it refused: "No augmented forward pass
    found for pyjlad_release", a nested derivative of a function writing a work array, 2026-12-07)."""
    from .engines.driver import RELEASE, ZEROED
    from .portable import dedupe_declarations

    if f"@{ZEROED}(" not in text and f"@{RELEASE}(" not in text:
        return text
    return dedupe_declarations(rename_callees(parse(text, strict=False),
                                              {ZEROED: "calloc", RELEASE: "free"}.get).render())


#: Lowers the ``__enzyme_*`` calls of a module that nests derivatives itself (see :func:`nested_modules`).
_LOWER = "function(scalarize-masked-mem-intrin),preserve-nvvm,enzyme,preserve-nvvm-end,function(sroa,instcombine,simplifycfg,early-cse),"
#: Every definition but the driver made internal, what nothing reaches dropped.
_INTERNALIZE = "internalize,globaldce"


def _internalized(modules: Sequence[str], keep: str, what: str, lower: bool) -> str:
    """``modules`` linked into one in which only ``keep`` is defined with external linkage;
    its ``__enzyme_*`` calls lowered first if ``lower``."""
    from .enzyme_copy import NO_SPECULATION_ARGS
    from .toolchain import locate

    toolchain = locate()
    linked = toolchain.link(list(modules), what=what, text=True) if len(modules) > 1 else modules[0]
    if isinstance(linked, bytes):
        linked = linked.decode()
    options = (*(NO_SPECULATION_ARGS if lower else ()), f"-internalize-public-api-list={keep}", "-S")
    out = toolchain.run(linked, (_LOWER if lower else "") + _INTERNALIZE, what=what, options=options)
    return out.decode() if isinstance(out, bytes) else out


def _nested_module(symbol: str, under_reverse: bool) -> str:
    """The module defining the driver ``symbol`` for linking before Enzyme.

    A driver whose function calls derivatives itself (``grad`` of a function
    calling ``grad``, called from a third function) has its own ``__enzyme_*``
    call lowered here, with those of the derivatives it calls, by a separate
    Enzyme run over its module: Enzyme v0.0.289 does not lower three levels in
    one run (the outermost differentiation reaches the innermost driver before
    its call is lowered: "cannot compute with global variable that doesn't
    have marked shadow global"). Two levels are lowered by the outer run itself.
    ``under_reverse``: see :func:`_driver_module`.
    """
    sweep = _SWEEPS[symbol]
    what = f"the derivative of {sweep.exported.name} it calls"
    calls = sweep.exported.enzyme_module.external_functions
    inner = nested_modules(calls, under_reverse=sweep.mode == "reverse")
    try:
        return _internalized([*inner, *_driver_module(symbol, sweep, under_reverse)], symbol, what, lower=bool(inner))
    except NestedDerivativeError:
        raise
    except EnzymeError as exc:
        raise explain_failure(sweep.exported.name, calls, exc) from None


#: Identifies how nested modules are made (part of the disk cache key of a function that calls derivatives).
_FORM = "nested/2 " + _LOWER + _INTERNALIZE


def cache_key_parts(external_functions: Sequence[str]) -> list[str]:
    """What identifies the nested modules of a function with ``external_functions``, for its disk cache key.

    A driver's symbol digests its function's module, ABI, mode and activities;
    :data:`_FORM` covers how its module is rebuilt, linked and lowered. Empty for
    a function that calls no derivative (its key is unchanged).
    """
    return [f"{name}:{_FORM}" for name in external_functions if name in _SWEEPS]


def nested_modules(external_functions: Sequence[str], under_reverse: bool = False) -> list[str]:
    """The modules to link, first, before Enzyme for the nested drivers among ``external_functions``;
    ``under_reverse``: the derivative they are linked into is a reverse sweep (see :func:`_driver_module`)."""
    return [_nested_module(name, under_reverse) for name in external_functions if name in _SWEEPS]


#: Enzyme v0.0.289's BLAS rules (``np.dot``, ``@``) in its stack trace: the first derivative of a
#: BLAS call is BLAS calls again (``cblas_ddot``'s is two ``cblas_daxpy``), and differentiating
#: those a second time asserts (``handle_axpy``: ``inst->getParent()->getParent() == oldFunc``).
_BLAS_FAILURES = ("AdjointGenerator::handleBLAS", "AdjointGenerator::handle_")


def _stack_frame(line: str) -> bool:
    """Whether ``line`` is a frame of LLVM's crash stack (``#12 0x00007f... name``)."""
    parts = line.split()
    return len(parts) >= 2 and parts[0][:1] == "#" and parts[0][1:].isdigit() and parts[1].startswith("0x")


def _describe(name: str) -> str:
    sweep = _SWEEPS[name]
    kind = "pyjlad.grad" if sweep.mode == "reverse" else "a forward-mode derivative"
    return f"{kind}({sweep.exported.name})"


#: What works where a second reverse sweep does not (the refusals below).
_FORWARD_OVER_REVERSE = ("Forward over reverse works there: pyjlad.jacobian(..., mode=\"forward\") or pyjlad.jvp of "
                         "the outer function, or pyjlad.hessian / pyjlad.hvp of the inner one.")
#: The loops Enzyme v0.0.289 cannot differentiate twice in reverse mode.
_LEFT_EARLY = ("a loop with a run-time trip count that it can leave early (a break, a return inside the loop, or an "
               "exception raised in the loop and caught by try/except around it)")


def _refuse_loops_left_early(symbol: str, loops: Sequence[tuple[str, str]]) -> None:
    """Raise a :class:`NestedDerivativeError` where the reverse sweep ``symbol`` would be differentiated in reverse
    mode and its function has ``loops`` left early (``(function, header)``); nothing where ``loops`` is empty."""
    if not loops:
        return
    name = _SWEEPS[symbol].exported.name
    where = "; ".join(f"the loop at block {header} of {function}" for function, header in loops)
    raise NestedDerivativeError(
        f"pyjlad cannot differentiate {_describe(symbol)} a second time in reverse mode: {name} has {_LEFT_EARLY}, "
        "and Enzyme v0.0.289 builds the reverse sweep of such a loop's reverse sweep wrong (it never returns, or "
        f"its values are wrong). {_FORWARD_OVER_REVERSE}", diagnostics=f"loops left early: {where}")


def refuse_endless(outer_name: str, external_functions: Sequence[str], loops: Sequence[tuple[str, str]]) -> None:
    """Raise a :class:`NestedDerivativeError` where Enzyme's derivative of ``outer_name``, which calls the
    derivatives among ``external_functions`` from ``@njit`` code, has ``loops`` that would never end
    (:func:`pyjlad.endless_loops.endless_loops`: ``(function, header)``); nothing where ``loops`` is empty.
    (The loops known to give them are refused before Enzyme runs, by :func:`_refuse_loops_left_early`.)"""
    inner = [name for name in external_functions if name in _SWEEPS]
    if not loops or not inner:
        return
    called = ", ".join(_describe(name) for name in inner)
    where = "; ".join(f"block {header} of {function}" for function, header in loops)
    raise NestedDerivativeError(
        f"pyjlad cannot differentiate {outer_name} through the derivative it calls from @njit code ({called}): "
        "Enzyme v0.0.289 built a second derivative whose sweep would never return (a loop it could only repeat), "
        f"as it does for reverse over reverse where the inner function has {_LEFT_EARLY}. {_FORWARD_OVER_REVERSE}",
        diagnostics=f"loops of the derivative that run once or for ever: {where}")


def explain_failure(outer_name: str, external_functions: Sequence[str], error: EnzymeError) -> EnzymeError:
    """A :class:`NestedDerivativeError` for Enzyme's ``error`` on a module linked with nested drivers,
    or ``error`` itself if the module calls no pyjlad derivative."""
    inner = [name for name in external_functions if name in _SWEEPS]
    if not inner:
        return error
    diagnostics = error.diagnostics or str(error)
    called = ", ".join(_describe(name) for name in inner)
    message = (f"pyjlad cannot differentiate {outer_name} through the derivative it calls from @njit code "
               f"({called}): Enzyme failed on the second derivative. ")
    with_blas = sorted({_SWEEPS[name].exported.name for name in inner
                        if any(f.startswith("cblas_") for f in _SWEEPS[name].exported.module.external_functions)})
    if with_blas or any(marker in diagnostics for marker in _BLAS_FAILURES):
        # (forward mode over such a derivative crashed elsewhere: in LLVM's verifier, no BLAS frame on the stack)
        functions = ", ".join(with_blas or sorted({_SWEEPS[name].exported.name for name in inner}))
        message += (f"{functions} uses np.dot, @ or another BLAS/LAPACK call, whose derivative (BLAS calls "
                    "again) Enzyme v0.0.289 cannot differentiate a second time; write that product in "
                    f"{functions} as np.sum(x * y) or a loop. ")
    lines = [line for line in diagnostics.splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if "Assertion" in line or "error:" in line or "UNREACHABLE" in line),
                None)
    if last is None:  # a crash: its stack, whose last frame (``_start``) says nothing
        crashed = "Stack dump:" in diagnostics or any(_stack_frame(line) for line in lines)
        last = "opt crashed inside Enzyme (its stack is in the report)" if crashed else (lines[-1] if lines else "")
    if not with_blas:
        message += ("Forward over reverse may work where this fails: pyjlad.jacobian(..., mode=\"forward\") or "
                    "pyjlad.jvp of the outer function, or pyjlad.hessian / pyjlad.hvp of the inner one. ")
    message += f"Enzyme's message: {last.strip()[:400]}. Enzyme's full report is in exc.diagnostics."
    return NestedDerivativeError(message, diagnostics=diagnostics)
