"""A parallel loop's body reading its private copies through parameters Enzyme can trust.

A thread of a parallel loop's reverse sweep reads each array every iteration reads from a private
copy of its own (:mod:`pyjlad.private_adjoints`). Numba's gufunc wrapper (the loop's body) loads each
array's address from its ``args`` array, and Enzyme cannot know where a pointer loaded from memory
points: it assumes the memory may change before the reverse sweep and keeps every value the body read
through it on the tape. For the pairwise kernel (``x[i] - x[j]`` for all ``i``, ``j``) that was
``n**2`` doubles and one ``malloc`` per row, where the serial derivative, whose ``x`` is a parameter,
reads ``x`` again.

So the task's private rows run a copy of the body (:func:`private_body`) that takes each private copy
as a parameter of its own, ``noalias readonly nocapture``, instead of loading it from ``args``: the
copy is memory the thread allocated for itself and that nothing writes while the rows run (the body
only loads through it: :func:`pyjlad.private_adjoints.read_only_arguments`), which is what those
attributes say. Enzyme then sees the copy's allocation at the call and reads the copy again in the
reverse sweep instead of taping it. (That needs alias analysis to see that the body's other writes
cannot reach the copy: :func:`pyjlad.private_adjoints.private_copy` marks the ``malloc`` ``noalias``
and nothing captures its pointer, not even ``free``, marked ``nocapture``.) Rows whose copies were not made (an array overlapping one the body
writes) run the body as Numba compiled it (:func:`pyjlad.openmp_loops.openmp_parallel_loops`).

Enzyme adds into the copy's adjoint with atomic adds, as into every adjoint in a parallel loop,
though only the thread that made the copy touches it: on x86 an atomic ``fadd`` is a compare-and-swap
loop, ``n**2`` of them for the pairwise kernel. :func:`plain_private_adds` rewrites them, in the
derivative of the body's copy, as a load, an add and a store (between Enzyme and the optimization
after it: :func:`pyjlad.engines.differentiate.run_enzyme`); so are those of a Hessian-vector product's
reverse sweep over the body copy's forward derivative, through the shadows of its copies and of their
tangents' copies (:func:`pyjlad.private_adjoints.tangent_copy`), and those of the functions the body's
derivative calls through the pointers it passes them (Numba's compiled body, pyjlad's loop form of
``dgemv`` for ``w @ x[i]``: :mod:`pyjlad.private_callees`). Only adds through those parameters are
rewritten: a pointer that may also point elsewhere (a ``phi`` or ``select`` of it and another pointer, a
callee's parameter that another call passes other memory) keeps its atomic add.

Examples
--------
>>> body = "\\n".join([
...     "define weak_odr void @k(ptr %args, ptr %dims, ptr %steps, ptr %data) {", "entry:",
...     "  %a = load ptr, ptr %args, align 8", "  %p1 = getelementptr i8, ptr %args, i64 8",
...     "  %b = load ptr, ptr %p1, align 8", "  %x = load double, ptr %a, align 8",
...     "  store double %x, ptr %b, align 8", "  ret void", "}"])
>>> from pyjlad.ir import parse
>>> print(private_body(parse(body).function("k"), "@k.private", [0]))
define internal void @k.private(ptr %args, ptr %dims, ptr %steps, ptr %data, ptr noalias readonly nocapture %pyjlad.private.0) {
entry:
  %a = getelementptr i8, ptr %pyjlad.private.0, i64 0
  %p1 = getelementptr i8, ptr %args, i64 8
  %b = load ptr, ptr %p1, align 8
  %x = load double, ptr %a, align 8
  store double %x, ptr %b, align 8
  ret void
}
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from .errors import IRParseError
from .ir import Function, Parameter, decode_name, parse
from .ir.instructions import Instruction, parse_instruction, significant
from .ir.lexer import texts_of
from .private_adjoints import argument_pointers
from .private_callees import only_derived, owned_parameters

__all__ = ["BODY_PREFIX", "plain_private_adds", "private_body", "private_parameter"]

#: The start of the name of every body copy that private rows run (``@pyjlad.omp.body.N``).
BODY_PREFIX = "@pyjlad.omp.body."


def private_parameter(slot: int) -> str:
    """The name of the parameter through which :func:`private_body` reads ``args[slot]``."""
    return f"%pyjlad.private.{slot}"


def private_body(function: Function, name: str, slots: Sequence[int]) -> str:
    """An internal copy of gufunc body ``function`` named ``name`` that takes, after its own parameters, the
    row pointer of ``args[j]`` for each ``j`` in ``slots`` (:func:`private_parameter`), and reads it there
    instead of loading it from ``args``."""
    clone = copy.copy(function)
    clone.symbol, clone.linkage = name, ["internal"]
    clone.parameters = [*function.parameters,
                        *(Parameter("ptr", ["noalias", "readonly", "nocapture"], private_parameter(j)) for j in slots)]
    body = list(function.body or ())
    lines = [(k, parse_instruction(line)) for k, line in enumerate(body)]
    loaded = argument_pointers(function, [i for _, i in lines if i is not None])
    for k, ins in lines:
        if ins is not None and ins.result in loaded and loaded[ins.result] in slots:
            body[k] = f"  {ins.result} = getelementptr i8, ptr {private_parameter(loaded[ins.result])}, i64 0"
    clone.body = body
    return clone.render()




#: The derivatives Enzyme makes of a body copy: ``diffe`` and the copy's name (a reverse sweep), or
#: ``diffefwddiffe`` and it (a Hessian-vector product's reverse sweep over the body's forward derivative).
_DERIVATIVE_SYMBOLS = ("@diffe" + BODY_PREFIX[1:], "@diffefwddiffe" + BODY_PREFIX[1:])
#: The derivatives Enzyme makes of pyjlad's LAPACK helpers (:mod:`pyjlad.lapack`), ``@diffepyjlad_lapack_...``.
_LAPACK_PREFIX = "define internal void @diffepyjlad_lapack_"


def plain_private_adds(text: str) -> str:
    """``text`` (Enzyme's output, as IR text) with each atomic ``fadd`` of a body copy's derivative into the
    shadow of one of its private parameters made a load, an add and a store (see the module docstring),
    and every atomic ``fadd`` of the derivatives of pyjlad's LAPACK helpers too: Numba's ``np.linalg``
    calls them only on arrays it has just allocated for the call (its copies of the matrices, which LAPACK
    overwrites; Numba 0.68's ``numba/np/linalg.py``), and they allocate their other arrays themselves, so
    whatever adjoint they add into belongs to the iteration that called them.

    >>> text = "\\n".join([
    ...     "define internal void @diffepyjlad.omp.body.0(ptr %a, ptr %\\"pyjlad.private.1'\\", ptr %s) {",
    ...     "entry:", "  %p = getelementptr double, ptr %\\"pyjlad.private.1'\\", i64 3",
    ...     "  %0 = atomicrmw fadd ptr %p, double 1.0 monotonic, align 8",
    ...     "  %1 = atomicrmw fadd ptr %s, double 1.0 monotonic, align 8", "  ret void", "}", ""])
    >>> print(plain_private_adds(text), end="")
    define internal void @diffepyjlad.omp.body.0(ptr %a, ptr %"pyjlad.private.1'", ptr %s) {
    entry:
      %p = getelementptr double, ptr %"pyjlad.private.1'", i64 3
      %0 = load double, ptr %p, align 8
      %pyjlad.plain.0 = fadd double %0, 1.0
      store double %pyjlad.plain.0, ptr %p, align 8
      %1 = atomicrmw fadd ptr %s, double 1.0 monotonic, align 8
      ret void
    }

    A Hessian-vector product's (``diffefwddiffe``, whose parameters hold the copies, the tangents' copies and
    their shadows, each thread's own):

    >>> product = "\\n".join([
    ...     "define internal void @diffefwddiffepyjlad.omp.body.0(ptr %\\"pyjlad.private.1'2\\") {", "entry:",
    ...     "  %0 = atomicrmw fadd ptr %\\"pyjlad.private.1'2\\", double 1.0 monotonic, align 8", "  ret void", "}", ""])
    >>> "atomicrmw" in plain_private_adds(product)
    False

    The functions it calls, through the pointers it passes them (:mod:`pyjlad.private_callees`):

    >>> callee = "\\n".join([
    ...     "define internal void @diffepyjlad.omp.body.0(ptr %\\"pyjlad.private.1'\\", ptr %s) {", "entry:",
    ...     "  call void @diffehelper(ptr %\\"pyjlad.private.1'\\", ptr %s)", "  ret void", "}",
    ...     "define internal void @diffehelper(ptr %a, ptr %b) {", "entry:",
    ...     "  %0 = atomicrmw fadd ptr %a, double 1.0 monotonic, align 8",
    ...     "  %1 = atomicrmw fadd ptr %b, double 1.0 monotonic, align 8", "  ret void", "}", ""])
    >>> print(plain_private_adds(callee).split("@diffehelper(ptr %a")[1], end="")
    , ptr %b) {
    entry:
      %0 = load double, ptr %a, align 8
      %pyjlad.plain.0 = fadd double %0, 1.0
      store double %pyjlad.plain.0, ptr %a, align 8
      %1 = atomicrmw fadd ptr %b, double 1.0 monotonic, align 8
      ret void
    }

    >>> lapack = "\\n".join(["define internal void @diffepyjlad_lapack_numba_xxgetrf_d(ptr %a) {", "entry:",
    ...                    "  %0 = atomicrmw fadd ptr %a, double 2.0 monotonic, align 8", "  ret void", "}", ""])
    >>> print(plain_private_adds(lapack).splitlines()[2:5])
    ['  %0 = load double, ptr %a, align 8', '  %pyjlad.plain.0 = fadd double %0, 2.0', '  store double %pyjlad.plain.0, ptr %a, align 8']
    """
    if not any(f"define internal void {symbol}" in text for symbol in _DERIVATIVE_SYMBOLS) and _LAPACK_PREFIX not in text:
        return text
    try:
        functions = {f.symbol: f for f in parse(text, strict=False).definitions}
    except IRParseError:
        return text
    roots = {symbol: _private_shadows(f) for symbol, f in functions.items()
             if symbol.startswith(_DERIVATIVE_SYMBOLS) and f.linkage == ["internal"]}
    owned = owned_parameters(text, functions, roots)
    lines = text.split("\n")
    out: list[str] = []
    k = 0
    while k < len(lines):
        symbol = _defined_symbol(lines[k])
        lapack = lines[k].startswith(_LAPACK_PREFIX)
        if symbol not in owned and not lapack:
            out.append(lines[k])
            k += 1
            continue
        end = lines.index("}", k)
        out += _plain_adds(lines[k:end + 1], None if lapack else owned[symbol])
        k = end + 1
    return "\n".join(out)


def _private_shadows(function: Function) -> set[str]:
    """The shadows of a body copy's private parameters among ``function``'s parameters (in a product's
    derivative, the tangents' copies and both shadows)."""
    return {p.name for p in function.parameters
            if p.name and decode_name(p.name).startswith(private_parameter(0)[1:-1]) and "'" in p.name}


def _defined_symbol(line: str) -> str | None:
    """The symbol a ``define`` line defines (``None`` for any other line)."""
    if not line.startswith("define "):
        return None
    symbols = texts_of(line.split("(", 1)[0], "global")
    return symbols[-1] if symbols else None


def _plain_adds(lines: list[str], owned: set[str] | None) -> list[str]:
    """The lines of one function with its atomic adds through pointers derived only from ``owned`` (its
    parameters) plain, or with ``None``, all of them."""
    instructions = [parse_instruction(line) for line in lines[1:-1]]
    private = None if owned is None else only_derived(owned, [i for i in instructions if i is not None])
    body, rewritten = [], 0
    for line, ins in zip(lines[1:-1], instructions):
        plain = _plain_add(ins, private, rewritten) if ins is not None and ins.opcode == "atomicrmw" else None
        rewritten += plain is not None
        body += plain or [line]
    return [lines[0], *body, lines[-1]]


def _plain_add(ins: Instruction, private: set[str] | None, n: int) -> list[str] | None:
    """``atomicrmw fadd ptr P, T V <ordering>, align A`` with ``P`` in ``private`` (any ``P``: ``None``) as a load,
    add and store."""
    words = [t.text for t in significant(list(ins.tokens))]
    try:
        at = words.index("atomicrmw")
        op, kind, pointer, comma, type_, value = words[at + 1:at + 7]
        align = words[words.index("align") + 1]
    except ValueError:
        return None
    if (op, kind, comma) != ("fadd", "ptr", ",") or type_ not in ("double", "float") or (
            private is not None and pointer not in private):
        return None
    old = ins.result or f"%pyjlad.plain.old.{n}"
    new = f"%pyjlad.plain.{n}"
    return [f"  {old} = load {type_}, ptr {pointer}, align {align}", f"  {new} = fadd {type_} {old}, {value}",
            f"  store {type_} {new}, ptr {pointer}, align {align}"]
