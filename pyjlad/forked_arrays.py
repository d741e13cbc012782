"""Which of a function's arrays of pointers each of its OpenMP tasks receives, directly or through a pack.

A parallel loop's fork passes its task the arrays of pointers the function built (Numba's gufunc ``args``,
``dims``, ``steps``) in one of two shapes:

* directly: ``call void (...) @__kmpc_fork_call(ptr @loc, i32 N, ptr @task, ptr %args, ...)`` in the function;
* packed, where pyjlad registers the fork's forward derivative (:func:`pyjlad.openmp_tasks.forward_fork`,
  for ``jvp`` and Hessian-vector products): the function stores the arrays into a ``pack`` (an ``alloca`` of
  pointers) and calls ``@pyjlad.omp.fork.N(ptr %pack)``, which loads them back and forks the task; the
  derivative registered for it, ``@pyjlad.omp.fork.N.fwd(ptr %pack, ptr %dpack)``, which Enzyme calls in
  its place, forks the task's forward form with the same arrays (and their shadows, from ``%dpack``).

:func:`forked_arrays` finds, for each task, which parameter receives which ``alloca`` of the function, in
both shapes, so :mod:`pyjlad.invariant_reads` can trace what the task loads from them. A pack counts only
where nothing else can see or change it: the pack used by nothing but stores at constant offsets (each
slot stored once) and calls of one fork function, that function internal, called by this function alone
(its registered derivative aside), and loading from its pack parameter only.

Examples
--------
>>> from pyjlad.ir import parse
>>> module = parse('''define i32 @f(ptr %x) {
... entry:
...   %args = alloca [1 x ptr], align 8
...   %pack = alloca [2 x ptr], align 8
...   store ptr %x, ptr %args, align 8
...   store ptr %args, ptr %pack, align 8
...   %dims.at = getelementptr inbounds ptr, ptr %pack, i64 1
...   store ptr null, ptr %dims.at, align 8
...   call void @fork(ptr %pack)
...   ret i32 0
... }
... define internal void @fork(ptr %p) {
... entry:
...   %args = load ptr, ptr %p, align 8
...   %at = getelementptr inbounds ptr, ptr %p, i64 1
...   %dims = load ptr, ptr %at, align 8
...   call void (ptr, i32, ptr, ...) @__kmpc_fork_call(ptr @loc, i32 2, ptr @task, ptr %args, ptr %dims)
...   ret void
... }
... define internal void @task(ptr %gtid, ptr %btid, ptr %args, ptr %dims) {
... entry:
...   ret void
... }''')
>>> found = forked_arrays(module, module.function("f"))
>>> found.tasks, sorted(line.strip() for line in found.packed)
({'@task': [(2, '%args')]}, ['store ptr %args, ptr %pack, align 8', 'store ptr null, ptr %dims.at, align 8'])
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from .ir import Function, Module
from .ir.instructions import Instruction
from .ir.lexer import split_top_level, texts_of, words
from .ir.value_types import SCALAR_BYTES

__all__ = ["FORK", "HARMLESS_CALLS", "ForkedArrays", "constant_offsets", "forked_arrays", "stored_value"]

FORK = "@__kmpc_fork_call"
#: Bytes of the types a constant ``getelementptr`` into an array of pointers or sizes steps over.
#: Calls that touch no memory through a pointer they are given.
HARMLESS_CALLS = ("@llvm.lifetime.", "@llvm.assume")
_REGISTRATION = "@__enzyme_register_derivative_"


@dataclasses.dataclass(frozen=True)
class ForkedArrays:
    """What :func:`forked_arrays` found.

    Attributes
    ----------
    tasks : dict of str to list of (int, str)
        Each task forked only by the forks found (its symbol named nowhere else), with the positions of its
        parameters that receive one of the function's ``alloca``\\ s and that ``alloca``'s name.
    packed : set of str
        The function's stores into those packs (their text): an ``alloca``'s address stored there goes only to
        the fork, so it does not escape.
    """

    tasks: dict[str, list[tuple[int, str]]]
    packed: set[str]


def forked_arrays(module: Module, function: Function) -> ForkedArrays:
    """The tasks ``function`` forks, directly or through a pack, and the ``alloca``\\ s each receives (see the
    module docstring)."""
    instructions = list(function.instructions())
    functions = {f.symbol: f for f in module.definitions}
    allocas = {i.result for i in instructions if i.opcode == "alloca" and i.result}
    uses = Counter(texts_of(module.render(), "global"))
    sites: list[tuple[str, list[tuple[int, str]]]] = []
    packed: set[str] = set()
    for ins in instructions:
        call = ins.call()
        if call is None:
            continue
        if call.callee == FORK and len(call.values) > 2:
            sites.append((call.values[2], [(2 + p, v) for p, v in enumerate(call.values[3:])]))
        elif call.callee in functions and call.values[:1] and call.values[0] in allocas:
            pack = _pack(instructions, call.values[0], call.callee)
            derivatives = _registered(module, call.callee)
            calls = sum(c.callee == call.callee for c in function.calls())
            if pack is None or not functions[call.callee].is_internal or (
                    uses[call.callee] != 1 + calls + len(derivatives)):  # (its definition, these calls, registrations)
                continue  # (a fork function some other code calls too: its pack may hold anything there)
            stored, stores = pack
            for fork in (call.callee, *derivatives):
                site = _unpacked_fork(functions.get(fork), stored)
                if site is not None:
                    sites.append(site)
                    packed |= stores
    forked = Counter(task for task, _ in sites)
    tasks: dict[str, list[tuple[int, str]]] = {}
    for task, passed in sites:
        if task in functions and uses[task] == 1 + forked[task]:
            tasks.setdefault(task, []).extend((k, v) for k, v in passed if v in allocas)
    return ForkedArrays(tasks, packed)


def _registered(module: Module, symbol: str) -> list[str]:
    """The functions registered as ``symbol``'s derivative (``@__enzyme_register_derivative_...`` globals)."""
    found = []
    for name, variable in module.globals.items():
        named = texts_of(variable.value, "global")
        if name.startswith(_REGISTRATION) and named[:1] == [symbol]:
            found.extend(named[1:])
    return found


def _pack(instructions: list[Instruction], pack: str, callee: str) -> tuple[dict[int, str], set[str]] | None:
    """The values stored into each byte offset of the function's ``pack`` and the stores' texts; ``None``
    unless ``pack`` is used only by stores at constant offsets (each slot once) and calls of ``callee`` with
    the pack as their one argument."""
    offsets = constant_offsets(instructions, pack)
    if offsets is None:
        return None
    stored: dict[int, list[str]] = {}
    stores: set[str] = set()
    for ins in instructions:
        if ins.result in offsets or not any(v in offsets for v in ins.operands()):
            continue  # (an offset into it, or unrelated)
        call = ins.call()
        value = stored_value(ins) if ins.opcode == "store" else None
        if value is not None and ins.address() in offsets and value not in offsets:
            stored.setdefault(offsets[ins.address() or ""], []).append(value)
            stores.add(ins.text)
        elif not (call is not None and ((call.callee == callee and call.values == [pack])
                                        or call.callee.startswith(HARMLESS_CALLS))):
            return None
    if any(len(values) != 1 for values in stored.values()):
        return None
    return {offset: values[0] for offset, values in stored.items()}, stores


def _unpacked_fork(fork: Function | None, stored: dict[int, str]) -> tuple[str, list[tuple[int, str]]] | None:
    """The task ``fork`` forks and, for each of its parameters, the function's value that reaches it through the
    pack (``fork``'s first parameter, only ever loaded from); ``None`` if ``fork`` forks no task or more than one,
    uses its pack otherwise, or uses what it loads from it for anything but the fork."""
    if fork is None or not fork.parameters or not fork.parameters[0].name:
        return None
    instructions = list(fork.instructions())
    offsets = constant_offsets(instructions, fork.parameters[0].name)
    if offsets is None:
        return None
    loaded: dict[str, int] = {}
    for ins in instructions:
        if ins.result in offsets or not any(v in offsets for v in ins.operands()):
            continue
        if ins.opcode != "load" or ins.address() not in offsets or not ins.result:
            return None
        loaded[ins.result] = offsets[ins.address() or ""]
    calls = [c for c in fork.calls() if c.callee == FORK and len(c.values) > 2]
    if len(calls) != 1 or any(ins.call() != calls[0] and any(v in loaded for v in ins.operands())
                              for ins in instructions):
        return None  # (an array of pointers passed on elsewhere too: it may be written there)
    passed = [(2 + p, stored[loaded[v]]) for p, v in enumerate(calls[0].values[3:])
              if v in loaded and loaded[v] in stored]
    return calls[0].values[2], passed


def constant_offsets(instructions: list[Instruction], base: str) -> dict[str, int] | None:
    """``base`` and the pointers ``getelementptr`` derives from it at constant byte offsets; ``None`` if one
    derived pointer's offset is not a constant."""
    offsets = {base: 0}
    for ins in instructions:
        if ins.opcode != "getelementptr" or not ins.result:
            continue
        operands = ins.operands()
        if not operands or operands[0] not in offsets:
            continue
        step = _constant_step(ins)
        if step is None:
            return None
        offsets[ins.result] = offsets[operands[0]] + step
    return offsets


def _constant_step(ins: Instruction) -> int | None:
    """The byte offset a ``getelementptr`` with constant indices adds (one index over a scalar type, or
    ``0, k`` into an array type ``[n x T]``); ``None`` for any other."""
    parts = [words(part) for part in split_top_level(ins.after_opcode())]
    if len(parts) < 3:
        return None
    type_words = [w for w in parts[0] if w not in ("inbounds", "nuw", "nusw")]
    indices = []
    for part in parts[2:]:
        if len(part) != 2 or not part[1].lstrip("-").isdigit():
            return None
        indices.append(int(part[1]))
    if len(type_words) == 1 and type_words[0] in SCALAR_BYTES and len(indices) == 1:
        return indices[0] * SCALAR_BYTES[type_words[0]]
    array = type_words[0].strip("[]").split() if len(type_words) == 1 else []
    if len(array) == 3 and array[1] == "x" and array[2] in SCALAR_BYTES and len(indices) == 2 and indices[0] == 0:
        return indices[1] * SCALAR_BYTES[array[2]]  # ([n x T], ptr %a, i64 0, i64 k)
    return None


def stored_value(ins: Instruction) -> str | None:
    """The value a plain ``store`` stores."""
    parts = [words(part) for part in split_top_level(ins.after_opcode())]
    return parts[0][-1] if parts and parts[0] else None
