"""Which parameters of the callees of a parallel loop body's derivative point only into a thread's own adjoints.

:func:`pyjlad.private_bodies.plain_private_adds` makes the atomic adds of a body copy's derivative plain
where they go into the shadow of one of its private parameters (memory only the thread that runs the copy
touches: its copy of a shared array, or elements of an array only its own iterations read). Enzyme
differentiates the functions the body calls as functions of their own (Numba's compiled function of the
loop's body, which its gufunc wrapper calls, and pyjlad's loop forms of BLAS, which ``w @ x[i]`` calls:
:mod:`pyjlad.blas_loops`), and their adds into the same adjoints, through the callee's own parameters,
stayed atomic: on x86 a compare-and-swap loop per add. A softmax classifier's ``w @ x[i]`` (10x32 weights)
made two of them per weight per sample, 40% of its parallel gradient's time on one thread.

:func:`owned_parameters` follows those shadows through the calls: a parameter of a callee is *owned* when
the callee is an internal function (Enzyme's derivatives are) that the module uses only by calling it
directly, every such call is in a function already known to own some of its pointers, and every one of
them passes, in that position, a pointer derived only from owned pointers (a ``getelementptr`` or cast of
one, or a ``phi``/``select`` of owned ones: :func:`only_derived`). Owned is the least fixed point from the
roots (the body derivatives' private shadows): a callee with one call from anywhere else, or whose address
is taken, owns nothing.

That a callee reached through an owned pointer touches only what the pointer designates is what Numba's
compiled code does with the arrays it is passed (their shapes bound every index), the assumption the body's
own adds already rest on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from .ir import Function
from .ir.instructions import Call, Instruction
from .ir.lexer import texts_of

__all__ = ["derivative_call", "only_derived", "owned_parameters"]

_MOVES = ("getelementptr", "bitcast", "addrspacecast", "phi", "select")
#: Enzyme's derivative requests (and pyjlad's named copies of them, such as ``__enzyme_fwddiff_pyjlad_omp``).
_DERIVATIVE_REQUESTS = ("@__enzyme_fwddiff", "@__enzyme_autodiff")
#: Activities of an argument followed by its shadow; of one alone; options that take no value.
_SHADOWED = frozenset({"@enzyme_dup", "@enzyme_dupnoneed"})
_UNSHADOWED = frozenset({"@enzyme_const", "@enzyme_out"})
_OPTIONS = frozenset({"@enzyme_runtime_activity"})


def only_derived(roots: Iterable[str], instructions: Iterable[Instruction]) -> set[str]:
    """The pointers derived from ``roots`` alone: ``roots``, ``getelementptr``s and casts of them, and ``phi``s
    and ``select``s all of whose pointers are (the largest such set).

    >>> from pyjlad.ir import parse
    >>> f = parse('''define void @f(ptr %a, ptr %b, i1 %c) {
    ... entry:
    ...   %p = getelementptr double, ptr %a, i64 1
    ...   %q = select i1 %c, ptr %p, ptr %a
    ...   %r = select i1 %c, ptr %p, ptr %b
    ...   ret void
    ... }''').function("f")
    >>> sorted(only_derived({"%a"}, f.instructions()))
    ['%a', '%p', '%q']
    """
    steps = [i for i in instructions if i.result is not None and i.opcode in _MOVES]
    derived = set(roots) | {i.result for i in steps}
    changed = True
    while changed:
        changed = False
        for ins in steps:
            if ins.result not in derived:
                continue
            if ins.opcode == "phi":
                sources = [v for v, _ in ins.phi_incoming()]
            elif ins.opcode == "select":
                sources = ins.operands()[-2:] if len(ins.operands()) == 3 else ["?"]
            else:
                sources = ins.operands()[:1]
            if not sources or any(s not in derived for s in sources):
                derived.discard(ins.result)
                changed = True
    return derived


def owned_parameters(text: str, functions: Mapping[str, Function],
                     roots: Mapping[str, set[str]], *, through_derivatives: bool = False) -> dict[str, set[str]]:
    """The owned pointer parameters of each function that has some (see the module docstring).

    Parameters
    ----------
    text : str
        The whole module's text (a function used other than by direct calls, in a global's initializer
        among others, owns nothing).
    functions : mapping of str to Function
        The module's definitions by symbol (``@name``).
    roots : mapping of str to set of str
        The functions whose owned parameters are given (the body derivatives' private shadows).
    through_derivatives : bool
        Count a request for a function's derivative (``__enzyme_fwddiff(ptr @f, ...)``, before Enzyme runs) as a
        call of it with the primal arguments (:func:`derivative_call`).

    Returns
    -------
    dict of str to set of str
        ``roots`` and each callee reached from them with at least one owned parameter (its names).

    Examples
    --------
    >>> from pyjlad.ir import parse
    >>> text = '''define internal void @root(ptr %own, ptr %shared) {
    ... entry:
    ...   %p = getelementptr double, ptr %own, i64 2
    ...   call void @helper(ptr %p, ptr %shared)
    ...   call void @elsewhere(ptr %p)
    ...   ret void
    ... }
    ... define internal void @helper(ptr %a, ptr %b) {
    ... entry:
    ...   ret void
    ... }
    ... define internal void @elsewhere(ptr %a) {
    ... entry:
    ...   ret void
    ... }
    ... define void @other(ptr %x) {
    ... entry:
    ...   call void @elsewhere(ptr %x)
    ...   ret void
    ... }'''
    >>> functions = {f.symbol: f for f in parse(text).definitions}
    >>> owned_parameters(text, functions, {"@root": {"%own"}})
    {'@root': {'%own'}, '@helper': {'%a'}}
    """
    instructions = {symbol: list(f.instructions()) for symbol, f in functions.items()}
    sites: dict[str, list[tuple[str, list[str]]]] = {}
    for caller, body in instructions.items():
        for ins in body:
            call = ins.call()
            if call is not None and through_derivatives:
                call = derivative_call(call) or call
            if call is not None and call.callee in functions:
                sites.setdefault(call.callee, []).append((caller, call.values))
    uses = Counter(texts_of(text, "global"))
    candidates = [symbol for symbol, calls in sites.items()
                  if symbol not in roots and functions[symbol].is_internal and uses[symbol] == 1 + len(calls)]
    owned = {symbol: set(names) for symbol, names in roots.items()}
    while True:  # grows: each round's derived pointers include the last round's
        derived = {symbol: only_derived(names, instructions[symbol]) for symbol, names in owned.items()}
        changed = False
        for callee in candidates:
            calls = sites[callee]
            if any(caller not in derived for caller, _ in calls):  # (owned since this round began: the next)
                continue
            names = {p.name for k, p in enumerate(functions[callee].parameters)
                     if p.name and p.type == "ptr"
                     and all(k < len(values) and values[k] in derived[caller] for caller, values in calls)}
            if names and names != owned.get(callee):
                owned[callee] = names
                changed = True
        if not changed:
            return owned


def derivative_call(call: Call) -> Call | None:
    """A request for a function's derivative (``__enzyme_fwddiff``/``__enzyme_autodiff`` and pyjlad's named
    variants) as the call of that function it differentiates, with the primal arguments; ``None`` for any other
    call, or one whose arguments are not each named by an activity (``enzyme_dup``, ``enzyme_const``, ...).

    >>> from pyjlad.ir.instructions import parse_instruction
    >>> line = ("call void (...) @__enzyme_fwddiff(ptr @f, ptr @enzyme_runtime_activity, ptr @enzyme_dup, ptr %a, "
    ...         "ptr %da, ptr @enzyme_const, i64 %n)")
    >>> request = derivative_call(parse_instruction(line).call())
    >>> request.callee, request.values
    ('@f', ['%a', '%n'])
    """
    values = call.values
    if not call.callee.startswith(_DERIVATIVE_REQUESTS) or not values:
        return None
    primal: list[str] = []
    k = 1
    while k < len(values):
        if values[k] in _OPTIONS:
            k += 1
            continue
        width = 3 if values[k] in _SHADOWED else 2 if values[k] in _UNSHADOWED else 0
        if not width or k + width > len(values):
            return None  # (an argument without an activity, or an option with a value such as a width)
        primal.append(call.arguments[k + 1])
        k += width
    return Call(values[0], primal)
