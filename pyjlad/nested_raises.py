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
(:func:`pyjlad.loop_caches.raises`) goes to ``unreachable``: that run cannot raise, since it repeats the one
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

from .ir.cfg import ControlFlow, remove_edge, retargeted
from .ir.items import Function
from .ir.module import parse
from .loop_caches import raises
from .loop_exit_latches import way_out_of

__all__ = ["PRECHECK_SUFFIX", "RAISING_SUFFIX", "checked_first", "without_raising_loop_exits"]

#: Suffix of the inactive wrapper that runs the function as it is (the driver calls it before Enzyme's call).
PRECHECK_SUFFIX = ".pyjlad.precheck"
#: Suffix of the function's copy with its raising exits, which that wrapper calls.
RAISING_SUFFIX = ".pyjlad.raising"
#: Blocks that replace a raise (named after a label no Numba module uses).
_PREFIX = "pyjlad.raising."
#: Parameters of Numba's entry (and of its status copy) that it writes by design.
_OWN_SLOTS = frozenset({"%retptr", "%excinfo", "%pyjlad.status"})


def without_raising_loop_exits(function: Function) -> bool:
    """``function`` with each of its loops' exits towards a ``raise`` sent to ``unreachable`` (in place): whether
    there was one. What only those exits reached is deleted, their ``phi`` entries dropped."""
    body = function.body or []
    graph = ControlFlow.of(body)
    if not graph.names or graph.names[0] == "":
        return False  # an entry block without a label: no loops
    exits = [(inside, outside) for loop in graph.loops() for inside, outside in loop.exits
             if _raising(graph, outside)]
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


def _raising(graph: ControlFlow, block: str) -> bool:
    """Whether ``block`` raises, or is where a way out towards a ``raise`` goes inside the loop it leaves
    (:mod:`pyjlad.loop_exit_latches`: the way out is taken at the loop's latch)."""
    leave = way_out_of(block)
    return raises(graph, block) or (leave is not None and leave in graph.lines and raises(graph, leave))


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


def _called(wrapper: Function) -> str | None:
    """The one function the status wrapper calls (``@<entry>.pyjlad.status`` or ``@<entry>``), not Enzyme's
    type hints."""
    callees = {call.callee for call in (i.call() for i in wrapper.instructions() if i.opcode == "call")
               if call is not None and not call.callee.startswith("@__enzyme_")}
    return callees.pop() if len(callees) == 1 else None


def _writes_arguments(function: Function) -> bool:
    """Whether ``function`` may write through a pointer argument other than Numba's own slots: one LLVM did not
    mark ``readonly`` (or ``readnone``) that the body uses (an array's unused ``meminfo`` often has no mark)."""
    unmarked = {p.name for p in function.parameters
                if p.type.startswith("ptr") and p.name not in _OWN_SLOTS and not p.readonly}
    return bool(unmarked) and any(t.kind == "local" and t.text in unmarked
                                  for instruction in function.instructions() for t in instruction.tokens)


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
