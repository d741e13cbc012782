"""Which arrays a parallel loop's body reads only near its own row, and how near: a stencil's halo.

A stencil step (``out[i] = u[i] + k * (u[i - 1] - 2 * u[i] + u[i + 1])`` in a ``prange``) reads each
element of ``u`` from three neighbouring iterations. In the parallel reverse sweep Enzyme adds into
``u``'s adjoint atomically (neighbouring threads share the elements at the edges of their rows), three
contended-or-not compare-and-swap loops per cell, and keeps what the body read on the tape. Knowing the
halo, the loop's rows are split: those reading only their own chunk's elements add plainly, the chunk's
edges atomically, in a second parallel loop (:mod:`pyjlad.openmp_tasks`); or, for an array of other
strides than C or F order, a thread reads a private copy of just the rows it needs
(:func:`pyjlad.private_adjoints.private_copy` with a halo): its own rows, ``lo`` below and ``hi`` above.
:func:`row_offsets` finds the arrays for which that is sound: every read of them in the loop's body is a subscript whose first component is the
loop's index plus a constant (``u[i]``, ``u[i - 1]``, ``u[i + 2, j]``, ``u[i, :]``), and they are used
in no other way but ``.shape``-like attributes.

Examples
--------
>>> from numba import njit, prange
>>> import numpy as np
>>> from pyjlad.private_adjoints import recording_loop_layouts
>>> @njit(parallel=True)
... def step(u, out):
...     for i in prange(1, u.shape[0] - 1):
...         out[i] = u[i - 1] - 2.0 * u[i] + u[i + 1]
>>> layouts = {}
>>> with recording_loop_layouts(layouts):
...     step(np.zeros(5), np.zeros(5))
>>> [a.halo for layout in layouts.values() for a in layout.candidates]
[(1, 1)]
"""

from __future__ import annotations

import operator

__all__ = ["own_elements", "row_offsets"]


def row_offsets(parfor: object) -> dict[str, tuple[int, int]]:
    """For the body of ``parfor`` (a Numba ``Parfor`` of one loop, before lowering renames its index):
    each variable read only at ``[index + c, ...]`` (and through attributes), mapped to ``(below, above)``,
    the most rows it reads below and above the iteration's own (``u[i - 1]`` and ``u[i + 2]``: ``(1, 2)``;
    ``u[i]`` only: ``(0, 0)``). Empty for a loop of more than one dimension, or of a step other than 1 (whose
    schedule might not hold the index's values: Numba 0.68 refuses such a ``prange``)."""
    from numba.core import ir

    if len(parfor.loop_nests) != 1 or not (type(parfor.loop_nests[0].step) is int and parfor.loop_nests[0].step == 1):
        return {}
    statements = [s for block in parfor.loop_body.values() for s in block.body]
    defined: dict[str, list[object]] = {}
    for s in statements:
        if isinstance(s, ir.Assign):
            defined.setdefault(s.target.name, []).append(s.value)
    offsets = {parfor.index_var.name: 0, parfor.loop_nests[0].index_variable.name: 0}

    def constant(name: str) -> int | None:
        values = defined.get(name, [])
        if len(values) == 1 and isinstance(values[0], ir.Const) and type(values[0].value) is int:
            return values[0].value
        return None

    def offset(name: str, depth: int = 0) -> int | None:
        """``c`` where ``name`` is the loop's index plus the constant ``c`` in every iteration."""
        if name in offsets:
            return offsets[name]
        values = defined.get(name, [])
        if depth > 16 or len(values) != 1:
            return None
        value = values[0]
        if isinstance(value, ir.Var):
            return offset(value.name, depth + 1)
        if not isinstance(value, ir.Expr) or value.op != "binop" or value.fn not in (operator.add, operator.sub):
            return None
        left, right = value.lhs.name, value.rhs.name
        base, c = offset(left, depth + 1), constant(right)
        if base is not None and c is not None:
            return base + c if value.fn is operator.add else base - c
        base, c = offset(right, depth + 1), constant(left)
        if base is not None and c is not None and value.fn is operator.add:
            return base + c
        return None

    def first_offset(subscript: str) -> int | None:
        values = defined.get(subscript, [])
        if len(values) == 1 and isinstance(values[0], ir.Expr) and values[0].op == "build_tuple":
            return offset(values[0].items[0].name) if values[0].items else None
        return offset(subscript)

    subscripts, others = _subscripts(statements)
    reads = {array: [first_offset(s) for s in subs] for array, subs in subscripts.items() if array not in others}
    return {name: (max(0, -min(cs)), max(0, max(cs))) for name, cs in reads.items() if None not in cs}


def own_elements(parfor: object) -> frozenset[str]:
    """The variables the body of ``parfor`` (a Numba ``Parfor``) reads only at the iteration's own index, and
    uses in no other way but ``.shape``-like attributes: ``x[i]`` (also ``x[i, j]``, ``x[i, :]``: its row) in
    a loop of one dimension, ``x[i, j]`` (every loop index, in order) in a loop nest, as Numba's array
    expressions read their operands. Each element is then read by one iteration only, so the adds into its
    adjoint need no atomics. Empty unless every loop starts at a non-negative integer constant with a step
    of 1: no index of such a loop is negative, so none wraps around to another iteration's element.
    (Whether the array's own elements overlap each other, or those of another array, is for the caller.)

    >>> from numba import njit
    >>> import numpy as np
    >>> from pyjlad.private_adjoints import recording_loop_layouts
    >>> layouts = {}
    >>> with recording_loop_layouts(layouts):
    ...     _ = njit(parallel=True)(lambda a, b: np.sum(a * b))(np.ones((3, 4)), np.ones((3, 4)))
    >>> sorted(a.index for layout in layouts.values() for a in layout.candidates if a.in_place)
    [1, 2]
    """
    from numba.core import ir

    nests = parfor.loop_nests
    if not nests or any(type(n.start) is not int or n.start < 0 or type(n.step) is not int or n.step != 1
                        for n in nests):
        return frozenset()
    if len(nests) == 1:
        return frozenset(name for name, halo in row_offsets(parfor).items() if halo == (0, 0))
    indices = [n.index_variable.name for n in nests]
    statements = [s for block in parfor.loop_body.values() for s in block.body]
    tuples = {s.target.name for s in statements if isinstance(s, ir.Assign) and isinstance(s.value, ir.Expr)
              and s.value.op == "build_tuple" and [v.name for v in s.value.items[:len(indices)]] == indices}
    subscripts, others = _subscripts(statements)
    return frozenset(array for array, subs in subscripts.items()
                     if array not in others and all(s in tuples for s in subs))


def _subscripts(statements: list) -> tuple[dict[str, list[str]], set[str]]:
    """For the statements of a loop's body: each variable's subscripts (``x[s]``: the name of ``s``, in order),
    and the variables used in any other way than subscripted or through an attribute (``x.shape``)."""
    from numba.core import ir

    subscripts: dict[str, list[str]] = {}
    others: set[str] = set()
    for s in statements:
        used = {v.name for v in s.list_vars()}
        value = s.value if isinstance(s, ir.Assign) else None  # (getattr: a Numba Expr raises KeyError)
        if isinstance(s, ir.Assign) and isinstance(value, ir.Expr) and value.op in ("getattr", "getitem"):
            used.discard(value.value.name)
            if value.op == "getitem":
                subscripts.setdefault(value.value.name, []).append(value.index.name)
        others |= used
    return subscripts, others
