"""Fills whose length may be zero made conditional, so that Enzyme never meets a ``memset`` of zero bytes.

Enzyme v0.0.289 aborts the process it runs in (``Assertion `size != 0' failed`` in
``AdjointGenerator::visitMemSetCommon``) when a function it differentiates in reverse mode holds a
``memset`` whose length is the constant 0. Numba writes none, but Enzyme's own simplification can make one:
NumPy's ``A @ v`` zeroes its output when a dimension is zero (``if m == 0 or n == 0: memset(out, 0, 8 * n)``),
and in the forward derivative Enzyme builds of such code, its simplification threaded the ``n == 0`` test
into the fill, leaving ``memset(out', 0, 0)``. A Hessian-vector product differentiates that forward
derivative again in reverse mode, and stopped there: the Hessian of an implicit-Euler loss (Newton steps with
``np.linalg.solve``, ``A @ v``, ``np.diag(v**2)``) could not be built at all.

:func:`guard_empty_fills` writes each ``memset`` whose length is not a constant inside a branch taken only when
the length is not zero, so no simplification can leave a fill of zero bytes behind: where the length folds
to 0, the branch folds with it::

    %pyjlad.fill.0.empty = icmp eq i64 %n, 0
    br i1 %pyjlad.fill.0.empty, label %pyjlad.fill.0.done, label %pyjlad.fill.0.do
  pyjlad.fill.0.do:
    call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)
    br label %pyjlad.fill.0.done
  pyjlad.fill.0.done:

A fill of zero bytes does nothing, so the function computes what it did. A fill of a constant length (never
0 in Numba's code) is left alone, as is one in an entry block without a label (no name to branch back to,
and never the conditional code whose tests fold a length to 0).
"""

from __future__ import annotations

from .ir.cfg import split_blocks
from .ir.instructions import parse_instruction
from .ir.module import Module

__all__ = ["guard_empty_fills"]

_MEMSET = "@llvm.memset."
_PREFIX = "pyjlad.fill."


def _guarded(line: str, length: str, length_type: str, name: str) -> list[str]:
    """The lines that replace the fill ``line``; the last opens block ``<name>.done``."""
    return [f"  %{name}.empty = icmp eq {length_type} {length}, 0",
            f"  br i1 %{name}.empty, label %{name}.done, label %{name}.do",
            f"{name}.do:",
            line,
            f"  br label %{name}.done",
            f"{name}.done:"]


def _variable_length(line: str) -> tuple[str, str] | None:
    """``(length, its type)`` of a ``memset`` call whose length is a local value; ``None`` for any other line."""
    instruction = parse_instruction(line) if _MEMSET in line else None
    call = instruction.call() if instruction is not None and instruction.opcode == "call" else None
    if call is None or not call.callee.startswith(_MEMSET) or len(call.arguments) < 3:
        return None
    length = call.values[2]
    if not length.startswith("%"):
        return None
    return length, call.arguments[2].split()[0]


def guarded_body(body: list[str], first: int = 0) -> tuple[list[str], int]:
    """``body`` with each fill of a variable length guarded (see the module's docstring), and how many were.

    Parameters
    ----------
    body : list of str
        A function's body lines (block labels included).
    first : int
        The number the first guard's blocks are named with (``pyjlad.fill.<first>.do``).

    Returns
    -------
    (list of str, int)
        The new body (``body`` itself when nothing was guarded) and the number of fills guarded.

    Examples
    --------
    >>> body = ["entry:", "  br label %fill", "fill:", "  %n = shl i64 %k, 3",
    ...         "  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)", "  br label %next",
    ...         "next:", "  %q = phi ptr [ %p, %fill ], [ null, %entry ]", "  ret void"]
    >>> new, count = guarded_body(body)
    >>> for line in new[2:]: print(line)
    fill:
      %n = shl i64 %k, 3
      %pyjlad.fill.0.empty = icmp eq i64 %n, 0
      br i1 %pyjlad.fill.0.empty, label %pyjlad.fill.0.done, label %pyjlad.fill.0.do
    pyjlad.fill.0.do:
      call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)
      br label %pyjlad.fill.0.done
    pyjlad.fill.0.done:
      br label %next
    next:
      %q = phi ptr [ %p, %pyjlad.fill.0.done ], [ null, %entry ]
      ret void
    """
    def expand(line: str, count: int) -> list[str] | None:
        fill = _variable_length(line)
        return _guarded(line, *fill, f"{_PREFIX}{first + count}") if fill is not None else None

    return split_blocks(body, expand)


def guard_empty_fills(module: Module) -> Module:
    r"""``module`` with every ``memset`` of a variable length in a branch taken only when that length is not zero
    (see the module's docstring); ``module`` itself, changed in place.

    Examples
    --------
    >>> from pyjlad.ir.module import parse
    >>> m = parse("define void @f(ptr %p, i64 %n) {\nentry:\n"
    ...           "  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)\n"
    ...           "  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 16, i1 false)\n  ret void\n}\n")
    >>> print(guard_empty_fills(m).render(), end="")
    define void @f(ptr %p, i64 %n) {
    entry:
      %pyjlad.fill.0.empty = icmp eq i64 %n, 0
      br i1 %pyjlad.fill.0.empty, label %pyjlad.fill.0.done, label %pyjlad.fill.0.do
    pyjlad.fill.0.do:
      call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %n, i1 false)
      br label %pyjlad.fill.0.done
    pyjlad.fill.0.done:
      call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 16, i1 false)
      ret void
    }
    """
    count = 0
    for function in module.definitions:
        body = function.body or []
        if not any(_MEMSET in line for line in body):
            continue
        function.body, guarded = guarded_body(body, count)
        count += guarded
    return module
