"""The frees of loop caches that Enzyme's forward derivative of a reverse sweep drops, put back.

A reverse sweep keeps, for each loop it reverses, caches of the values the reverse loop needs: one block per
value, allocated before the loop (``malloc`` marked ``!enzyme_cache_alloc !K``) and freed together after the
reverse loop (``free`` marked ``!enzyme_cache_free !K``). In the forward derivative of such a sweep (a vector-mode
``hessian``: ``__enzyme_fwddiff`` with ``enzyme_width`` of a function calling ``__enzyme_autodiff``), Enzyme
v0.0.289 keeps the frees of the caches of floats but drops those of the caches of integers and flags (``i1``,
``i8`` elements: which way a branch went in each turn), and those of every cache of a loop LLVM had vectorized
(``np.clip``'s). Every call then lost one block per such cache, per sweep: about 200 bytes a call for the
vector-mode Hessian of ``np.vstack`` of two rows, as much for complex ``np.exp``, 500 for ``np.clip``
(``tests/test_repeated_calls_memory.py``).

:func:`dropped_cache_frees_restored` edits Enzyme's output (before the optimization after it, with
:func:`pyjlad.unread_tape_slots.unread_slots_on_the_stack`). A cache allocation no ``free`` of its function
releases, whose pointer stays in the function (no store of it, no call but one that keeps it to itself: see
:func:`pyjlad.unread_tape_slots.pointer_tapings`), is freed:

* right after a cache allocated in the same block (a cache of the same loop) that is freed, where nothing that
  uses it can run after that ``free``: the block reaching that ``free`` is the one its sibling's freed value came
  from, through ``phi`` nodes mirroring those Enzyme built for the sibling's pointer (``undef`` where the loop
  was not entered);
* otherwise, where it is allocated at most once per call (in a block on no cycle), before each ``ret``, through
  a slot holding its address (null until it is allocated: ``free(NULL)`` does nothing), which ``opt`` promotes
  to registers.

Other shapes are left as Enzyme wrote them.

Examples
--------
>>> body = [
...     "define void @fwddiffe4diffef(i64 %n) {", "entry:",
...     "  %a = tail call noalias nonnull ptr @malloc(i64 %n), !enzyme_cache_alloc !1",
...     "  %b = tail call noalias nonnull ptr @malloc(i64 %n), !enzyme_cache_alloc !2",
...     "  store i1 true, ptr %b, align 1", "  br label %done", "done:",
...     "  %a.1 = phi ptr [ %a, %entry ]", "  %f = load i1, ptr %b, align 1",
...     "  call void @free(ptr nonnull %a.1), !enzyme_cache_free !1", "  ret void", "}", ""]
>>> print(dropped_cache_frees_restored("\\n".join(body)).splitlines()[7:11])
['  %pyjlad.cache.0 = phi ptr [ %b, %entry ]', '  %a.1 = phi ptr [ %a, %entry ]', '  %f = load i1, ptr %b, align 1', \
'  call void @free(ptr nonnull %a.1), !enzyme_cache_free !1']
>>> dropped_cache_frees_restored("\\n".join(body)).splitlines()[11]
'  call void @free(ptr %pyjlad.cache.0)'
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import IRParseError
from .ir import Function, Instruction, parse
from .ir.cfg import ControlFlow, block_label
from .ir.module import parse_instruction
from .unread_tape_slots import derived_pointers, pointer_tapings

__all__ = ["dropped_cache_frees_restored"]

_UNDEFINED = frozenset({"undef", "poison"})
_PREFIX = "%pyjlad.cache."  # the names of the phi nodes added


@dataclass(frozen=True)
class _Cache:
    """A cache allocation: its pointer, metadata id and block."""

    pointer: str
    key: str
    block: str


def dropped_cache_frees_restored(text: str) -> str:
    """``text`` (Enzyme's output, as IR text) with a ``free`` for each cache that lost its own (see the module
    docstring); ``text`` itself where there is none."""
    if "!enzyme_cache_alloc" not in text or "fwddiffe" not in text:
        return text
    try:
        module = parse(text, strict=False)
    except IRParseError:
        return text
    changed = False
    defined = {f.symbol: f for f in module.definitions}
    declared = {f.symbol: f for f in module.functions.values() if f.is_declaration}
    for function in module.definitions:
        if function.body is not None and any("!enzyme_cache_alloc" in line for line in function.body):
            changed |= _restore(function, defined, declared)
    return module.render() if changed else text


def _restore(function: Function, defined: dict[str, Function], declared: dict[str, Function]) -> bool:
    """Add ``function``'s dropped cache frees in place; whether it had any."""
    body = function.body or []
    line_block = _line_blocks(body)
    caches: list[_Cache] = []
    frees: dict[str, tuple[int, str]] = {}  # metadata id -> (line, freed value)
    for k, line in enumerate(body):
        if (allocated := _marked_call(line, "@malloc", "!enzyme_cache_alloc")) is not None:
            ins, key = allocated
            if ins.result is not None:
                caches.append(_Cache(ins.result, key, line_block[k]))
        elif (freed := _marked_call(line, "@free", "!enzyme_cache_free")) is not None:
            ins, key = freed
            values = ins.call().values  # type: ignore[union-attr]  (a call: _marked_call)
            if values and values[0].startswith("%"):
                frees[key] = (k, values[0])
    dropped = [c for c in caches if c.key not in frees]
    if not dropped or any(_PREFIX in line for line in body):  # (edited before: its names are taken)
        return False
    parsed = [(k, ins) for k, ins in enumerate(map(parse_instruction, body)) if ins is not None]
    instructions = [ins for _, ins in parsed]
    defining = {ins.result: (ins, line_block[k]) for k, ins in parsed if ins.result is not None}
    graph = ControlFlow.of(body)
    added_phis: dict[str, list[str]] = {}
    added_frees: dict[int, list[str]] = {}
    before: dict[int, list[str]] = {}  # lines to add before line k (a slot's, for the frees at the returns)
    serial = [0]
    cyclic: set[str] | None = None
    for cache in dropped:
        derived = derived_pointers(cache.pointer, instructions)
        if pointer_tapings(derived, instructions, defined, None, declared) != []:
            continue
        if not _freed_with_a_sibling(cache, caches, frees, derived, defining, parsed, graph, line_block, added_phis,
                                     added_frees, serial):
            cyclic = graph.blocks_on_cycles() if cyclic is None else cyclic
            if cache.block not in cyclic:
                _freed_at_the_returns(cache, body, parsed, before, added_frees, serial)
    if not added_frees:
        return False
    edited: list[str] = []
    for k, line in enumerate(body):
        edited.extend(before.get(k, []))
        edited.append(line)
        label = block_label(line)
        if label is not None and label in added_phis:
            edited.extend(added_phis[label])
        edited.extend(added_frees.get(k, []))
    function.body = edited
    return True


def _freed_with_a_sibling(cache: _Cache, caches: list[_Cache], frees: dict[str, tuple[int, str]], derived: set[str],
                          defining: dict[str, tuple[Instruction, str]], parsed: list[tuple[int, Instruction]],
                          graph: ControlFlow, line_block: list[str], added_phis: dict[str, list[str]],
                          added_frees: dict[int, list[str]], serial: list[int]) -> bool:
    """Add the free of ``cache`` after the free of a cache allocated in its block, where nothing uses it after
    that; whether there was one."""
    for sibling in (c for c in caches if c.block == cache.block and c.key in frees):
        at, freed = frees[sibling.key]
        phis: dict[str, list[str]] = {}
        value = _mirrored(freed, sibling.pointer, cache.pointer, defining, phis, {}, serial)
        if value is None or _used_after(at, derived, parsed, graph, line_block):
            continue
        for block_name, lines in phis.items():
            added_phis.setdefault(block_name, []).extend(lines)
        added_frees.setdefault(at, []).append(f"  call void @free(ptr {value})")
        return True
    return False


def _freed_at_the_returns(cache: _Cache, body: list[str], parsed: list[tuple[int, Instruction]],
                          before: dict[int, list[str]], added_frees: dict[int, list[str]], serial: list[int]) -> None:
    """Free ``cache`` (allocated at most once per call) before each ``ret`` of its function, through a slot holding
    its address (null until it is allocated; ``opt`` promotes it to registers)."""
    slot = f"{_PREFIX}slot.{serial[0]}"
    serial[0] += 1
    labels = [k for k, line in enumerate(body) if block_label(line) is not None]
    entry = labels[0] + 1 if labels and labels[0] == 0 else 0
    before.setdefault(entry, []).extend([f"  {slot} = alloca ptr, align 8", f"  store ptr null, ptr {slot}, align 8"])
    allocated = next(k for k, ins in parsed if ins.result == cache.pointer)
    added_frees.setdefault(allocated, []).append(f"  store ptr {cache.pointer}, ptr {slot}, align 8")
    for k, ins in parsed:
        if ins.opcode == "ret":
            freed = f"{_PREFIX}{serial[0]}"
            serial[0] += 1
            before.setdefault(k, []).extend([f"  {freed} = load ptr, ptr {slot}, align 8",
                                             f"  call void @free(ptr {freed})"])


def _marked_call(line: str, callee: str, mark: str) -> tuple[Instruction, str] | None:
    """(instruction, metadata id) of a call of ``callee`` carrying ``mark`` (``!enzyme_cache_alloc !7``); None for
    any other line."""
    if mark not in line or callee + "(" not in line:
        return None
    ins = parse_instruction(line)
    call = ins.call() if ins is not None else None
    if call is None or call.callee != callee:
        return None
    key = line.split(mark, 1)[1].split(",", 1)[0].split()
    return (ins, key[0]) if ins is not None and key and key[0].startswith("!") else None


def _line_blocks(body: list[str]) -> list[str]:
    """The block of each line of ``body`` (the entry block's name where it has no label: ``""``)."""
    names, block = [], ""
    for line in body:
        label = block_label(line)
        block = label if label is not None else block
        names.append(block)
    return names


def _mirrored(value: str, sibling: str, pointer: str, defining: dict[str, tuple[Instruction, str]],
              phis: dict[str, list[str]], memo: dict[str, str], serial: list[int]) -> str | None:
    """What ``pointer`` is where ``value`` is ``sibling`` (``undef`` where it is undefined), through the ``phi``
    nodes that carry ``sibling`` (``defining``: each value's instruction and block): each mirrored by a new
    ``phi`` added to ``phis`` (block -> lines); None where ``value`` is computed otherwise."""
    if value == sibling:
        return pointer
    if value in _UNDEFINED:
        return "undef"
    if value in memo:
        return memo[value]
    ins, home = defining.get(value, (None, ""))
    if ins is None or ins.opcode != "phi":
        return None
    name = memo[value] = f"{_PREFIX}{serial[0]}"
    serial[0] += 1
    incoming = []
    for source, block in ins.phi_incoming():
        mirrored = _mirrored(source, sibling, pointer, defining, phis, memo, serial)
        if mirrored is None:
            return None
        incoming.append(f"[ {mirrored}, {block} ]")
    phis.setdefault(home, []).append(f"  {name} = phi ptr {', '.join(incoming)}")
    return name


def _used_after(at: int, derived: set[str], parsed: list[tuple[int, Instruction]], graph: ControlFlow,
                line_block: list[str]) -> bool:
    """Whether a line using a pointer of ``derived`` may run after line ``at`` (later in its block, or in a block
    reachable from it)."""
    start = line_block[at]
    reachable: set[str] = set()
    todo = list(graph.succ.get(start, []))
    while todo:
        block = todo.pop()
        if block not in reachable:
            reachable.add(block)
            todo += graph.succ.get(block, [])
    return any((line_block[k] in reachable or (line_block[k] == start and k > at)) and set(ins.operands()) & derived
               for k, ins in parsed)
