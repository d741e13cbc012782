"""Which array arguments' memory Numba's code mixes with other memory.

Enzyme gives a constant (``enzyme_const``) pointer no shadow of its own. When
the function selects between that pointer and other memory, in a ``phi`` or a
``select``, Enzyme has to shadow the merged pointer, and the constant side of it
is shadowed by the constant pointer itself: reverse mode then adds adjoints
into the user's constant array (data loss) and forward mode reads its values as
tangents. Numba emits exactly that for an overlap-safe copy: ``y[:] = c``
selects between ``c``'s data and a temporary copy of it, and
``np.linalg.solve`` copies ``b`` that way.

This module finds those arguments in the exported module, so that the engines
can give them a zero shadow when they are constant (see
:attr:`pyjlad.abi.ArrayArg.aliased`). The analysis follows each float array's
data pointer through ``getelementptr``/``bitcast``/``phi``/``select``/
``freeze`` and into calls to functions defined in the module; a ``phi`` or
``select`` that merges a tracked pointer with anything else (another argument,
a temporary, a loaded pointer, a global) marks every argument involved.
Merges with ``null``, ``undef`` and ``poison`` do not count. The graph is
:func:`pyjlad.ir.analysis.pointer_flow`, read from the structured module.
"""

from __future__ import annotations

from collections.abc import Mapping

from .ir import Module, analysis, parse

__all__ = ["mixed_pointer_arguments"]


def mixed_pointer_arguments(module: Module | str, entry: str, roots: Mapping[str, int]) -> frozenset[int]:
    """The arguments whose data pointer ``entry`` merges with other memory.

    Parameters
    ----------
    module : Module or str
        The module (parsed, or its LLVM IR text).
    entry : str
        The function whose parameters are traced (no ``@``).
    roots : mapping of str to int
        ``entry``'s parameter names (``%arg.x.4``) to trace, each with the
        argument index it stands for.

    Returns
    -------
    frozenset of int
        Argument indices whose pointer meets another pointer in a ``phi`` or
        ``select``.

    Examples
    --------
    >>> lines = ["define void @f(ptr %a, ptr %b, i1 %c) {", "  %p = select i1 %c, ptr %a, ptr %b", "  ret void", "}"]
    >>> text = "\\n".join(lines)
    >>> sorted(mixed_pointer_arguments(text, "f", {"%a": 0}))
    [0]
    >>> sorted(mixed_pointer_arguments(text, "f", {"%a": 0, "%b": 1}))
    [0, 1]
    """
    if not roots:
        return frozenset()
    return analysis.mixed_pointer_arguments(parse(module) if isinstance(module, str) else module, entry, roots)
