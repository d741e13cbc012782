"""Arrays a ``prange`` body writes at an element other iterations may write too: a race, in the function too.

Numba's ``prange`` needs its iterations independent, but for reductions into a scalar or a whole array
(``s += ...``, ``h += ...``). A body that writes ``out[i % 4] += ...`` (or ``out[idx[i]] = ...``,
``out[0] = ...``) into an array from outside the loop lets two iterations on two threads read and write
the same element. The function itself may still give the right number (its read-modify-write takes a few
instructions), but the reverse sweep of that write reads the element's adjoint, sets it to zero and adds
back into it: a longer window, and a gradient wrong in about one run in ten on 2 threads (8 elements, 200
runs). :func:`shared_writes` finds such writes in a parfor's body, so that the derivative is built from the
serial copy instead, with a warning that names the array (:mod:`pyjlad.parallel_derivatives`).

A write is at an element of its iteration's own where its index is the loop's index, that plus or minus
or times a value from outside the loop, a copy of such an index, or a tuple with such a component
(``out[i, j]``, ``out[i, :]``); an array the body allocates itself is its iteration's own.

Examples
--------
>>> from numba import njit, prange
>>> import numpy as np
>>> from pyjlad.private_adjoints import recording_loop_layouts
>>> @njit(parallel=True)
... def bins(x, out):
...     for i in prange(x.shape[0]):
...         out[i % 4] += x[i]
>>> layouts = {}
>>> with recording_loop_layouts(layouts):
...     bins(np.ones(8), np.zeros(4))
>>> [layout.shared_writes for layout in layouts.values()]
[('out',)]
"""

from __future__ import annotations

import operator
from typing import Any

__all__ = ["shared_writes"]

#: Binary operators that keep an index distinct per iteration when one operand is the iteration's and the
#: other the same in every iteration (a nonzero one, for ``*``: not checked, as ``out[0 * i]`` is not written).
_DISTINCT_OPS = (operator.add, operator.sub, operator.mul, operator.iadd, operator.isub)


def shared_writes(parfor: Any) -> frozenset[str]:
    """The names of the arrays from outside ``parfor`` (a Numba ``Parfor``) that its body writes at an index
    other iterations may write too (see the module's docstring)."""
    from numba.core import ir

    statements = [s for block in parfor.loop_body.values() for s in block.body]
    defined: dict[str, list[Any]] = {}
    for s in statements:
        if isinstance(s, ir.Assign):
            defined.setdefault(s.target.name, []).append(s.value)
    for name in _nested_definitions(statements, ir):  # (an array expression's result: allocated in the body)
        defined.setdefault(name, []).append(None)
    own = {parfor.index_var.name} | {nest.index_variable.name for nest in parfor.loop_nests}
    changed = True
    while changed:
        changed = False
        for var, values in defined.items():
            if var in own or len(values) != 1:
                continue
            if _distinct(values[0], own, defined, ir):
                own.add(var)
                changed = True
    found: set[str] = set()
    for s in statements:
        if isinstance(s, ir.SetItem):
            target, index = s.target.name, s.index.name
        elif isinstance(s, ir.StaticSetItem):
            target, index = s.target.name, None
        else:
            continue
        if target in defined or (index is not None and index in own):
            continue  # the body's own array, or an element of the iteration's own
        found.add(target)
    return frozenset(found)


def _nested_definitions(statements: list[Any], ir: Any) -> set[str]:
    """The variables the nested parfors among ``statements`` (array expressions, ``np.zeros``) assign, at any
    depth: arrays the body allocates."""
    found: set[str] = set()
    for s in statements:
        if hasattr(s, "loop_body") and hasattr(s, "init_block"):
            inner = list(s.init_block.body) + [t for block in s.loop_body.values() for t in block.body]
            found |= {t.target.name for t in inner if isinstance(t, ir.Assign)} | _nested_definitions(inner, ir)
    return found


def _distinct(value: Any, own: set[str], defined: dict[str, list[Any]], ir: Any) -> bool:
    """Whether ``value`` (the one definition of a body variable) is distinct per iteration: a copy of such a
    variable, one of them combined with a loop-invariant value by ``+``, ``-`` or ``*``, or a tuple holding one."""
    if isinstance(value, ir.Var):
        return value.name in own
    if not isinstance(value, ir.Expr):
        return False
    if value.op in ("binop", "inplace_binop") and value.fn in _DISTINCT_OPS:
        names = (value.lhs.name, value.rhs.name)
        return any(n in own for n in names) and all(n in own or n not in defined or _constant(defined[n], ir)
                                                     for n in names)
    if value.op == "cast":
        return value.value.name in own
    if value.op == "build_tuple":
        return any(item.name in own for item in value.items)
    return False


def _constant(values: list[Any], ir: Any) -> bool:
    return len(values) == 1 and isinstance(values[0], (ir.Const, ir.Global, ir.FreeVar))

