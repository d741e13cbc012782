"""Check one corpus program: pyjlad's derivatives against JAX's, in float64.

:func:`check` builds the program's arguments from a seed derived from its name, takes
copies of every input (and of every tangent, cotangent and Hessian vector) before pyjlad
sees them, computes the oracle with JAX (``jax_enable_x64``) on float64 copies of those
inputs, and runs each of the program's transforms through pyjlad:

============  ==============================================  ==========================================
transform     pyjlad                                          oracle
============  ==============================================  ==========================================
gradient      ``pyjlad.gradient(f, *args, wrt=...)``          ``jax.grad(g, argnums=wrt)``
jvp           ``pyjlad.jvp(f, primals, tangents)``            ``jax.jvp`` (seeded random tangents)
vjp           ``pyjlad.vjp(f, primals, cotangent)``           ``jax.vjp`` (seeded random cotangent)
jacobian      ``pyjlad.jacobian(f, *args, wrt=..., mode=...)``  ``jax.jacrev(g, argnums=wrt)``
hvp           ``pyjlad.hvp(f, primals, v, wrt=...)``          ``jax.jvp(jax.grad(g), ...)``
============  ==============================================  ==========================================

Each transform runs twice, the second time with the C library's next small blocks filled with NaN
(:mod:`corpus.heap`), and the second result is checked: a derivative reading memory it never wrote
is then wrong every time instead of once in a while.

pyjlad is never compared against itself. Outcomes (the first element of the result):

``agree``
    every transform matches the oracle within the program's tolerances;
``wrong``
    a transform's result differs (the detail names it, with the max abs/rel error);
``mutated``
    an input, tangent, cotangent or vector differs bitwise after the call from its copy
    (for a view, the whole array it views is compared, so writes past its ends count too);
``refused:<reason>``
    pyjlad raised :class:`pyjlad.EnzymeError` (reason: the construct its message names, and
    Enzyme's kind of failure) or refused the input with ``TypeError``/``ValueError``/
    ``NotImplementedError`` (reason ``input``);
``error:<ExceptionType>``
    anything else pyjlad raised, :class:`pyjlad.ParallelFallbackWarning` included (a ``parallel=True``
    program whose derivative ran serially: the program says it runs in parallel);
``invalid-program``
    the Numba function and its JAX twin disagree on the value (or one of them fails): the
    pair is wrong, not pyjlad.

When transforms give different outcomes the most serious one is reported
(``wrong`` > ``mutated`` > ``error`` > ``refused`` > ``agree``); the detail lists every
transform that did not agree.
"""

from __future__ import annotations

import re
import warnings
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from corpus.heap import poison_small_free_blocks
from corpus.program import Program, find

jax.config.update("jax_enable_x64", True)

__all__ = ["check", "check_program", "arguments"]

_SEVERITY = ("wrong", "mutated", "error", "refused", "agree")

T = TypeVar("T")


class _Mutated(Exception):
    """An array pyjlad was given differs from its copy taken before the call."""


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def arguments(prog: Program) -> tuple[Any, ...]:
    """The program's arguments, built from a seed derived from its name (deterministic)."""
    return tuple(prog.make_args(np.random.default_rng(_seed(prog.name))))


def _is_float_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and x.dtype.kind == "f"


def _is_float(x: Any) -> bool:
    return isinstance(x, (float, np.floating)) and not isinstance(x, bool)


def _to_oracle(x: Any) -> Any:
    """A float64 JAX copy of a float input; other inputs (ints, index arrays) unchanged."""
    if _is_float_array(x):
        return jnp.asarray(np.array(x, dtype=np.float64))
    if _is_float(x):
        return jnp.asarray(float(x), dtype=jnp.float64)
    return x


class _Snapshot:
    """Bitwise copies of arrays (and of the arrays views point into), compared after a call."""

    def __init__(self, named: dict[str, Any]) -> None:
        self._items: list[tuple[str, np.ndarray, bytes]] = []
        for label, value in named.items():
            for k, array in enumerate(_leaves(value)):
                if not isinstance(array, np.ndarray):
                    continue
                tag = f"{label}[{k}]" if isinstance(value, (tuple, list)) else label
                self._items.append((tag, array, array.tobytes(order="A")))
                base = array.base
                if isinstance(base, np.ndarray):
                    self._items.append((f"{tag} (the array it views)", base, base.tobytes(order="A")))

    def verify(self, transform: str) -> None:
        for label, array, before in self._items:
            if array.tobytes(order="A") != before:
                raise _Mutated(f"{transform} changed {label}")


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _as_arrays(value: Any) -> list[np.ndarray]:
    return [np.asarray(leaf, dtype=np.float64) for leaf in _leaves(value)]


def _compare(got: Any, ref: Any, rtol: float, atol: float) -> str:
    """``""`` when ``got`` matches ``ref``, else the reason.

    An element matches when ``|got - ref| <= atol + rtol * (|ref| + max|ref| / 100)``: relative
    to itself, with a floor relative to the largest entry of its array (results with
    cancellation, such as solves, have entries far below their rounding error otherwise).
    """
    got_leaves, ref_leaves = _as_arrays(got), [np.asarray(leaf, dtype=np.float64) for leaf in
                                               jax.tree_util.tree_leaves(ref)]
    if len(got_leaves) != len(ref_leaves):
        return f"{len(got_leaves)} results, oracle has {len(ref_leaves)}"
    for k, (g, r) in enumerate(zip(got_leaves, ref_leaves)):
        where = f" (part {k})" if len(ref_leaves) > 1 else ""
        if g.shape != r.shape:
            return f"shape {g.shape}, oracle {r.shape}{where}"
        if g.size == 0:
            continue
        same_nonfinite = (~np.isfinite(r)) & ((g == r) | (np.isnan(g) & np.isnan(r)))
        finite_r = np.where(np.isfinite(r), r, 0.0)
        scale = float(np.max(np.abs(finite_r)))
        error = np.where(same_nonfinite, 0.0, np.abs(g - r))
        bound = atol + rtol * (np.abs(finite_r) + scale / 100)
        if not np.all(error <= bound):
            i = int(np.nanargmax(np.where(np.isnan(error), np.inf, error - bound)))
            abs_err = float(np.nanmax(np.where(np.isnan(error), np.inf, error)))
            rel = abs_err / scale if scale else float("inf")
            return (f"max abs error {abs_err:.3g}, relative to max|oracle| {rel:.3g}{where}; "
                    f"element {np.unravel_index(i, r.shape) if r.ndim else ()}: "
                    f"{float(g.ravel()[i]):.10g} vs oracle {float(r.ravel()[i]):.10g}")
    return ""


_CONSTRUCT_RE = re.compile(r"it uses (.+?)(?: \(Numba implements it|\.$|\.\s)")
_ENZYME_RE = re.compile(r"Enzyme's message: (.*)")


def refusal_reason(exc: BaseException) -> str:
    """A short reason for pyjlad's refusal: the construct it names and Enzyme's kind of failure.

    A construct that is one of the user's own functions is called ``user function`` (programs
    are tallied by reason, and the function's name would make every reason unique).
    """
    text = str(exc)
    first = text.splitlines()[0] if text else ""
    construct = _CONSTRUCT_RE.search(first + " ")
    what = construct.group(1) if construct else ("unidentified construct" if "Enzyme failed" in first else
                                                 first[:60])
    if what.startswith("your function"):
        what = "user function"
    enzyme = _ENZYME_RE.search(text)
    if enzyme:
        what += f" [{_enzyme_kind(enzyme.group(1))}]"
    return what


def _enzyme_kind(message: str) -> str:
    """The first words of Enzyme's message, without paths, assertion boilerplate or LLVM prefixes."""
    asserted = re.search(r'Assertion `(?:0 && )?"?([^"`\']+)', message)
    if asserted:
        message = asserted.group(1)
    message = message.replace("LLVM ERROR:", "")
    words = [w for w in re.sub(r"[^\w./ -]+", " ", message).split() if not w.startswith(("/", "opt-")) and ".cpp" not in w]
    return " ".join(words[:4])


def _classify(exc: BaseException) -> tuple[str, str]:
    import pyjlad

    message = str(exc).splitlines()[0][:300] if str(exc) else ""
    if isinstance(exc, pyjlad.EnzymeError):
        return f"refused:{refusal_reason(exc)}", message
    if isinstance(exc, (TypeError, ValueError, NotImplementedError)) and _raised_by_pyjlad(exc):
        return "refused:input", f"{type(exc).__name__}: {message}"
    return f"error:{type(exc).__name__}", message


def _raised_by_pyjlad(exc: BaseException) -> bool:
    """Whether the innermost frame of the traceback is pyjlad's own code (not Numba's or NumPy's)."""
    import pyjlad

    if isinstance(exc, pyjlad.PyjladError):
        return True
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and "/pyjlad/" in last.replace("\\", "/")


def _random_like(rng: np.random.Generator, x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return rng.standard_normal(x.shape).astype(x.dtype)
    if isinstance(x, np.float32):
        return np.float32(rng.standard_normal())
    return float(rng.standard_normal())


class _Case:
    """One program at its arguments: the Numba value, the oracle as a function of ``wrt``."""

    def __init__(self, prog: Program) -> None:
        self.prog = prog
        self.args = arguments(prog)
        self.wrt = tuple(prog.wrt)
        self.oracle_args = [_to_oracle(x) for x in self.args]
        self.rng = np.random.default_rng(_seed(prog.name) + 1)
        self.value: Any = None

    def restricted(self, fn: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """The oracle as a function of the ``wrt`` arguments only (the others held at their values)."""
        fn = fn or self.prog.oracle

        def g(*diff: Any) -> Any:
            full = list(self.oracle_args)
            for index, value in zip(self.wrt, diff):
                full[index] = value
            return fn(*full)

        return g

    def primals(self) -> list[Any]:
        return [self.oracle_args[i] for i in self.wrt]


def _value_check(case: _Case) -> str:
    """``""`` when the Numba function and its JAX twin agree on the value, else why not."""
    prog = case.prog
    snapshot = _Snapshot({"argument": list(case.args)})
    try:
        value = prog.numba(*case.args)
    except Exception as exc:  # noqa: BLE001 - a program Numba rejects is not a corpus program
        return f"Numba: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    try:
        snapshot.verify("the Numba function itself")
    except _Mutated as exc:
        return f"{exc}: corpus programs must not write their inputs"
    try:
        expected = prog.oracle(*case.oracle_args)
    except Exception as exc:  # noqa: BLE001 - a broken twin is the program's fault
        return f"oracle: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    why = _compare(value, expected, prog.rtol, prog.atol)
    case.value = value
    return f"value: {why}" if why else ""


def _on_a_poisoned_heap(call: Callable[[], T]) -> T:
    """``call()`` once (it builds the derivative), then again with the C library's next small blocks NaN
    (:mod:`corpus.heap`): the second result is the one checked, so a derivative that reads memory it never
    wrote is wrong every time, not once in a while. (No corpus program writes into its arguments: a
    snapshot taken before the first call is compared after the second.)"""
    call()
    poison_small_free_blocks()
    return call()


def _run_transform(case: _Case, transform: str) -> str:
    """Run one transform through pyjlad and the oracle; ``""`` on agreement, else the reason.

    Raises
    ------
    _Mutated
        When pyjlad changed an array it was given.
    """
    import pyjlad

    prog, args, wrt = case.prog, case.args, case.wrt
    rtol, atol = prog.rtol, prog.atol
    single = wrt[0] if len(wrt) == 1 else wrt
    if transform == "gradient":
        snapshot = _Snapshot({"argument": list(args)})
        got = _on_a_poisoned_heap(lambda: pyjlad.gradient(prog.numba, *args, wrt=single))
        snapshot.verify(transform)
        ref = jax.grad(case.restricted(), argnums=tuple(range(len(wrt))))(*case.primals())
        return _compare(got, ref, rtol, atol)
    if transform == "jacobian":
        snapshot = _Snapshot({"argument": list(args)})
        got = _on_a_poisoned_heap(lambda: pyjlad.jacobian(prog.numba, *args, wrt=single, mode="reverse"))
        snapshot.verify(transform)
        ref = jax.jacrev(case.restricted(), argnums=tuple(range(len(wrt))))(*case.primals())
        return _compare(got, ref, rtol, atol)
    if transform == "jvp":
        tangents = [(_random_like(case.rng, x) if i in wrt else None) for i, x in enumerate(args)]
        snapshot = _Snapshot({"argument": list(args), "tangent": [t for t in tangents if t is not None]})
        value, tangent = _on_a_poisoned_heap(lambda: pyjlad.jvp(prog.numba, tuple(args), tuple(tangents)))
        snapshot.verify(transform)
        ref_value, ref_tangent = jax.jvp(case.restricted(), tuple(case.primals()),
                                         tuple(_to_oracle(tangents[i]) for i in wrt))
        why = _compare(value, ref_value, rtol, atol)
        return ("value: " + why) if why else _compare(tangent, ref_tangent, rtol, atol)
    if transform == "vjp":
        ref_value, pullback = jax.vjp(case.restricted(), *case.primals())
        out = case.value
        cotangent: Any
        if isinstance(out, tuple):
            cotangent = tuple(_random_like(case.rng, np.asarray(o) if np.ndim(o) else float(o)) for o in out)
        elif isinstance(out, np.ndarray):
            cotangent = _random_like(case.rng, out)
        else:
            cotangent = _random_like(case.rng, out if isinstance(out, np.float32) else float(out))
        snapshot = _Snapshot({"argument": list(args), "cotangent": cotangent})
        value, cotangents = _on_a_poisoned_heap(lambda: pyjlad.vjp(prog.numba, tuple(args), cotangent))
        snapshot.verify(transform)
        ref = pullback(jax.tree_util.tree_map(lambda c: jnp.asarray(np.asarray(c, dtype=np.float64)), cotangent))
        why = _compare(value, ref_value, rtol, atol)
        return ("value: " + why) if why else _compare([cotangents[i] for i in wrt], list(ref), rtol, atol)
    if transform == "hvp":
        index = wrt[0]
        x = args[index]
        v = _random_like(case.rng, x)
        snapshot = _Snapshot({"argument": list(args), "vector v": v})
        got = _on_a_poisoned_heap(lambda: pyjlad.hvp(prog.numba, tuple(args), v, wrt=index))
        snapshot.verify(transform)
        only = lambda y: prog.oracle(*[y if i == index else a for i, a in enumerate(case.oracle_args)])  # noqa: E731
        ref = jax.jvp(jax.grad(only), (case.oracle_args[index],), (_to_oracle(v),))[1]
        return _compare(got, ref, rtol, atol)
    raise ValueError(f"unknown transform {transform!r}")


def check_program(prog: Program) -> tuple[str, str]:
    """:func:`check` for a :class:`~corpus.program.Program` object."""
    case = _Case(prog)
    invalid = _value_check(case)
    if invalid:
        return "invalid-program", invalid
    import pyjlad

    results: list[tuple[str, str, str]] = []
    for transform in prog.transforms:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", pyjlad.ParallelFallbackWarning)
                why = _run_transform(case, transform)
            results.append(("wrong", transform, why) if why else ("agree", transform, ""))
        except _Mutated as exc:
            results.append(("mutated", transform, str(exc)))
        except Exception as exc:  # noqa: BLE001 - every failure is classified
            outcome, detail = _classify(exc)
            results.append((outcome, transform, detail))
    worst = min(results, key=lambda r: _SEVERITY.index(r[0].split(":")[0]))
    detail = "; ".join(f"{transform}: {outcome} {why}".rstrip() for outcome, transform, why in results
                       if outcome != "agree")
    return worst[0], detail


def check(name: str) -> tuple[str, str]:
    """Check the corpus program ``name``: ``(outcome, detail)`` (outcomes in the module docstring)."""
    return check_program(find(name))
