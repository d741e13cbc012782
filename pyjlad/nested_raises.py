"""A derivative called from differentiated code: its function run first, then differentiated without raising exits.

Enzyme v0.0.289 builds a reverse sweep for a loop that can leave by a ``raise`` (Numba's ``ZeroDivisionError``
test before each ``/`` of floats, a user's ``raise`` in a loop): it counts the iterations as they run and starts
the reverse loop from wherever the forward one left. Differentiating that sweep a second time (a Hessian by
``pyjlad.jacobian`` of an ``@njit`` function returning ``pyjlad.grad(f)(x)``, a gradient penalty) crashed inside
Enzyme (an unbounded recursion in ``GradientUtils::unwrapM``: ``sum(1 / x[k]**2)`` in a loop) or built code that
never returned (a Lennard-Jones energy with a minimum image by ``np.round``; a user-style probe, 2026-12-07).

Enzyme takes a branch to a block that ends in ``unreachable`` as never taken. So the nested driver
(:func:`pyjlad.nested`'s modules, linked before Enzyme) first runs the function as it is, in a wrapper Enzyme
takes as inactive; where that run raises, the driver returns its status (the caller sees the function's own
exception, as before). Otherwise it differentiates a copy in which each exit from a loop towards a ``raise``
(a way on from which every path returns a status other than 0) goes to ``unreachable``: that run cannot raise, since it repeats the one
that did not. Functions that may write through an argument (a second run would see what the first wrote) keep
their raising exits, and Enzyme's failure (:class:`~pyjlad.nested.NestedDerivativeError`) where it fails.

>>> text = '''define void @f(ptr %retptr, ptr %excinfo, ptr readonly %x, i64 %n, ptr %pyjlad.status) {
... entry:
...   br label %loop
... loop:
...   %i = phi i64 [ 0, %entry ], [ %j, %next ]
...   %v = load double, ptr %x
...   %zero = fcmp oeq double %v, 0.0
...   br i1 %zero, label %raise, label %next
... next:
...   %j = add i64 %i, 1
...   %done = icmp eq i64 %j, %n
...   br i1 %done, label %out, label %loop
... raise:
...   store ptr @.const.picklebuf.1, ptr %excinfo
...   br label %ret
... out:
...   br label %ret
... ret:
...   %s = phi i32 [ 1, %raise ], [ 0, %out ]
...   store i32 %s, ptr %pyjlad.status
...   ret void
... }'''
>>> function = parse(text, strict=False).definitions[0]
>>> without_raising_loop_exits(function)
True
>>> print("\\n".join(function.body[5:7] + function.body[-6:]))
  %zero = fcmp oeq double %v, 0.0
  br i1 %zero, label %pyjlad.raising.0, label %next
ret:
  %s = phi i32 [ 0, %out ]
  store i32 %s, ptr %pyjlad.status
  ret void
pyjlad.raising.0:
  unreachable
"""

from __future__ import annotations

import copy

from .engines.entry_status import STATUS_SLOT, status_written
from .ir.cfg import ControlFlow, Loop, remove_edge, retargeted, terminator_index
from .ir.instructions import Instruction, parse_instruction
from .ir.items import Function
from .ir.module import parse
from .loop_exit_latches import ends_unreachable, way_out_of

__all__ = ["PRECHECK_SUFFIX", "RAISING_SUFFIX", "checked_first", "loops_left_early", "without_raising_loop_exits"]

#: Suffix of the inactive wrapper that runs the function as it is (the driver calls it before Enzyme's call).
PRECHECK_SUFFIX = ".pyjlad.precheck"
#: Suffix of the function's copy with its raising exits, which that wrapper calls.
RAISING_SUFFIX = ".pyjlad.raising"
#: Blocks that replace a raise (named after a label no Numba module uses).
_PREFIX = "pyjlad.raising."
#: Parameters of Numba's entry (and of its status copy) that it writes by design.
_OWN_SLOTS = frozenset({"%retptr", "%excinfo", STATUS_SLOT})


def without_raising_loop_exits(function: Function) -> bool:
    """``function`` with each of its loops' exits towards a ``raise`` sent to ``unreachable`` (in place): whether
    there was one. What only those exits reached is deleted, their ``phi`` entries dropped."""
    body = function.body or []
    graph = ControlFlow.of(body)
    if not graph.names or graph.names[0] == "":
        return False  # an entry block without a label: no loops
    succeeding = _succeeding_blocks(graph)
    exits = [(inside, outside) for loop in graph.loops() for inside, outside in loop.exits
             if _raising(graph, outside, succeeding)]
    for k, (inside, outside) in enumerate(dict.fromkeys(exits)):
        if inside not in graph.lines or outside not in graph.lines:
            continue  # deleted by an earlier one
        name = f"{_PREFIX}{k}"
        graph.lines[inside] = retargeted(graph.lines[inside], outside, name)
        graph.names.append(name)
        graph.lines[name] = [f"{name}:", "  unreachable"]
        remove_edge(graph, inside, outside)
    if exits:
        function.body = [line for name in graph.names for line in graph.lines[name]]
    return bool(exits)


def _raising(graph: ControlFlow, block: str, succeeding: set[str]) -> bool:
    """Whether every way on from ``block`` ends in a failing status (:func:`_fails`), or ``block`` is where such a
    way out goes inside the loop it leaves (:mod:`pyjlad.loop_exit_latches`: the way out is taken at the loop's
    latch, from ``pyjlad.latch.N.leave.K``)."""
    leave = way_out_of(block)
    start = leave if leave is not None and leave in graph.lines else block
    return _fails(graph, start, succeeding)


def _fails(graph: ControlFlow, block: str, succeeding: set[str]) -> bool:
    """Whether no path from ``block`` reaches a block of ``succeeding``: it can only return a status that is not 0
    (the function raised) or end in ``unreachable``. Whatever stores Numba's exception information on the way
    (a ``raise`` with values computed at run time allocates first; an exception caught by ``try``/``except``
    returns 0 after it) counts only by the status it leads to."""
    seen, todo = {block}, [block]
    while todo:
        here = todo.pop()
        if here in succeeding:
            return False
        for onward in graph.succ.get(here, ()):
            if onward not in seen:
                seen.add(onward)
                todo.append(onward)
    return True


def _succeeding_blocks(graph: ControlFlow) -> set[str]:
    """The blocks from which the function goes on to return status 0 (or a status not known here).

    A block whose ``ret`` returns anything but a constant status, or whose store into ``%pyjlad.status`` is not of
    a constant: the block itself, or, for a ``phi`` of the statuses, each block an entry that is not a non-zero
    constant comes from. A ``ret i32 0`` or a store of 0 succeeds; a constant other than 0 fails."""
    found: set[str] = set()
    for name, lines in graph.lines.items():
        phis: dict[str, list[tuple[str, str]]] = {}
        stored = False
        for line in lines:
            instruction = parse_instruction(line)
            if instruction is None:
                continue
            if instruction.opcode == "phi" and instruction.result is not None:
                phis[instruction.result] = [(v, b.removeprefix("%")) for v, b in instruction.phi_incoming()]
                continue
            status = status_written(instruction)
            if status is None or (status == "" and instruction.opcode == "ret" and stored):
                continue  # (the ``ret void`` after the status store)
            stored = stored or instruction.opcode == "store"
            if status in phis:
                found |= {source for value, source in phis[status] if not _failing(value)}
            elif not _failing(status):
                found.add(name)
    return found


def _failing(value: str) -> bool:
    """Whether ``value`` is a constant status other than 0."""
    return value.lstrip("-").isdigit() and int(value) != 0


def checked_first(module_text: str, driver: str, primal: str) -> str:
    """``module_text`` (a driver's module: :meth:`pyjlad.engines.driver.Driver.module`) in which the driver
    ``driver`` runs the function first and differentiates it without its raising loop exits (see the module's
    description); ``module_text`` itself where the function has none or may write through an argument.

    ``primal`` is the wrapper the driver passes to Enzyme (``<entry>_status_<digest>``).
    """
    module = parse(module_text, strict=False)
    functions = module.functions
    wrapper = functions.get(f"@{primal}")
    callee = _called(wrapper) if wrapper is not None else None
    target = functions.get(callee or "")
    if target is None or target.body is None or _writes_arguments(target):
        return module_text
    raising = copy.deepcopy(target)
    if not without_raising_loop_exits(target):
        return module_text
    raising.symbol = f"@{target.name}{RAISING_SUFFIX}"
    raising.linkage = ["internal"]
    check = copy.deepcopy(wrapper)
    check.symbol = f"@{primal}{PRECHECK_SUFFIX}"
    check.body = [line.replace(f"{callee}(", f"{raising.symbol}(") for line in check.body or []
                  if "@__enzyme_" not in line]  # Enzyme's type hints: nothing to type in an inactive call
    check.attributes = ['"enzyme_inactive"']
    _run_first(functions[f"@{driver}"], check)
    module.items += [raising, check]
    return module.render()


def loops_left_early(module_text: str, primal: str) -> list[tuple[str, str]]:
    """``(function, loop header)`` of each loop, in the function the wrapper ``primal`` differentiates and the
    functions it calls, that has two or more ways out not ending in ``unreachable`` (after
    :func:`checked_first`: a ``break``, a ``return`` in the loop, an exception ``try``/``except`` catches, or a
    raise in a function that writes an argument) and a trip count not bounded by a constant.

    Enzyme v0.0.289 differentiates the reverse sweep of such a loop a second time into code that never returns
    (a ``break`` before the loop's work, a caught exception) or, silently, into a wrong derivative (a ``break``
    after it, a Newton iteration stopped by its tolerance: found while checking the first, 2026-12-07), and
    fails on others. A loop whose latch tests its counter against a constant (``for it in range(50)``, left by
    ``break``) was differentiated right where tried (``tests/test_nested_early_exits.py``) and is not listed.

    >>> text = "\\n".join([
    ...     "define void @f(ptr %x, i64 %n, ptr %pyjlad.status) {", "entry:", "  br label %loop", "loop:",
    ...     "  %i = phi i64 [ 0, %entry ], [ %j, %next ]", "  %v = load double, ptr %x",
    ...     "  %big = fcmp ogt double %v, 2.5", "  br i1 %big, label %out, label %next", "next:",
    ...     "  %j = add i64 %i, 1", "  %done = icmp eq i64 %j, %n", "  br i1 %done, label %out, label %loop",
    ...     "out:", "  store i32 0, ptr %pyjlad.status", "  ret void", "}",
    ...     "define void @w(ptr %x, i64 %n, ptr %s) {", "entry:", "  call void @f(ptr %x, i64 %n, ptr %s)",
    ...     "  ret void", "}"])
    >>> loops_left_early(text, "w")
    [('f', 'loop')]
    >>> loops_left_early(text.replace("icmp eq i64 %j, %n", "icmp eq i64 %j, 50"), "w")
    []
    """
    functions = parse(module_text, strict=False).functions
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    todo = [f"@{primal}"]
    while todo:
        symbol = todo.pop()
        function = functions.get(symbol)
        if symbol in seen or function is None or not function.body:
            continue
        seen.add(symbol)
        todo += [call.callee for call in (i.call() for i in function.instructions() if i.opcode == "call")
                 if call is not None]
        graph = ControlFlow.of(function.body)
        if not graph.names or graph.names[0] == "":
            continue  # an entry block without a label: no loops
        found += [(function.name, loop.header) for loop in graph.loops()
                  if len([1 for _, outside in loop.exits if not ends_unreachable(graph, outside)]) > 1
                  and not _counted_to_a_constant(graph, loop)]
    return found


def _counted_to_a_constant(graph: ControlFlow, loop: Loop) -> bool:
    """Whether ``loop`` has one latch, which leaves the loop on an ``icmp`` (made there) of a value with an
    integer constant: a trip count bounded by a constant."""
    latches = [block for block in loop.blocks if loop.header in graph.succ[block]]
    if len(latches) != 1 or all(onward in loop.blocks for onward in graph.succ[latches[0]]):
        return False
    lines = graph.lines[latches[0]]
    branch = parse_instruction(lines[terminator_index(lines)])
    tested = branch.operands()[:1] if branch is not None and branch.opcode == "br" else []
    compares = [i for i in map(parse_instruction, lines) if i is not None and i.opcode == "icmp" and i.result in tested]
    return any(t.kind == "word" and t.text.lstrip("-").isdigit() for c in compares for t in c.tokens)


def _called(wrapper: Function) -> str | None:
    """The one function the status wrapper calls (``@<entry>.pyjlad.status`` or ``@<entry>``), not Enzyme's
    type hints."""
    callees = {call.callee for call in (i.call() for i in wrapper.instructions() if i.opcode == "call")
               if call is not None and not call.callee.startswith("@__enzyme_")}
    return callees.pop() if len(callees) == 1 else None


def _writes_arguments(function: Function) -> bool:
    """Whether ``function`` may write through a pointer argument other than Numba's own slots: one LLVM did not
    mark ``readonly`` (or ``readnone``) that the body uses but to count references (an array's ``meminfo``)."""
    unmarked = {p.name for p in function.parameters
                if p.type.startswith("ptr") and p.name not in _OWN_SLOTS and not p.readonly}
    return bool(unmarked) and any(t.kind == "local" and t.text in unmarked
                                  for instruction in function.instructions() if not _counts_references(instruction)
                                  for t in instruction.tokens)


def _counts_references(instruction: Instruction) -> bool:
    """Whether ``instruction`` calls Numba's reference counting (``NRT_incref``/``NRT_decref``, pyjlad's copies
    too): a run that raises or returns leaves an array's count as it found it."""
    call = instruction.call() if instruction.opcode == "call" else None
    return call is not None and call.callee.startswith(("@NRT_incref", "@NRT_decref"))


def _run_first(driver: Function, check: Function) -> None:
    """The ``driver``'s body made to call ``check`` (the inactive run) after its status slot is zeroed, returning
    that run's status where it is not 0."""
    body = driver.body or []
    zeroed = body.index("  store i32 0, ptr %status, align 4")
    args = ", ".join(f"{p.type} {p.name}" for p in check.parameters[3:])
    slot = next(line.split("=", 1)[1].strip() for line in body if line.startswith("  %ret = alloca "))
    driver.body = [
        *body[:zeroed + 1],
        f"  %pyjlad.precheck.ret = {slot}",
        f"  call void {check.symbol}(ptr %pyjlad.precheck.ret, ptr %status, ptr %excinfo"
        f"{', ' if args else ''}{args})",
        "  %pyjlad.precheck.status = load i32, ptr %status, align 4",
        "  %pyjlad.precheck.raised = icmp ne i32 %pyjlad.precheck.status, 0",
        "  br i1 %pyjlad.precheck.raised, label %pyjlad.precheck.raise, label %pyjlad.precheck.passed",
        "pyjlad.precheck.raise:",
        "  ret i32 %pyjlad.precheck.status",
        "pyjlad.precheck.passed:",
        *body[zeroed + 1:],
    ]
