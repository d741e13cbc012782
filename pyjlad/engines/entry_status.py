"""Numba's entry, made to store its status through a pointer: the status is never a differentiable value.

The drivers (:mod:`pyjlad.engines.driver`) call this copy of the entry; see :func:`status_by_pointer`.
"""

from __future__ import annotations

from ..errors import IRError
from ..ir.module import Function, Module, parse, parse_instruction

__all__ = ["STATUS_ENTRY_SUFFIX", "status_by_pointer"]

#: Suffix of the entry's copy that stores its status through a pointer (:func:`status_by_pointer`).
STATUS_ENTRY_SUFFIX = ".pyjlad.status"
_READS_ONLY = frozenset({"readnone", "readonly"})


def status_by_pointer(module_text: str, entry: str) -> str:
    """``module_text`` with an internal copy of ``entry`` that stores its status instead of returning it.

    The copy, ``void @<entry>.pyjlad.status(<entry's parameters>, ptr %status)``,
    stores the ``i32`` each ``ret`` returned through its last parameter. The
    driver's wrapper differentiates a call to it in Enzyme's combined mode
    (noalias slots), and there Enzyme mishandles a returned status: where it
    runs a call of the function (a reference-count release on one error path)
    forward and backward together in the reverse sweep, it moves the store of
    the function's return value that follows the call into that reverse code,
    even when the return block is the one every other path reaches. The
    status of the other paths is then never written, and the optimizer takes
    the one that is for all: an N-body integrator whose only such release is on
    its division-by-zero path reported that error on every call. A status
    stored in memory is an ordinary store, which Enzyme keeps where it is. The
    original entry stays (a recursive function calls it).
    """
    module = parse(module_text, strict=False)
    function = _definition(module, entry)
    attrs = "".join(" " + a for a in function.attributes) + " "
    if _READS_ONLY & set(_function_attributes(module, function)):
        attrs = ""  # it would write memory now
    params = ", ".join([*(p.render() for p in function.parameters), *(["..."] if function.varargs else [])])
    copy = [f"define internal void @{entry}{STATUS_ENTRY_SUFFIX}({params}, "
            f"ptr noalias nocapture writeonly %pyjlad.status){attrs}{{"]
    for line in function.body or ():
        copy += _status_stored(line) or [line]
    copy.append("}")
    return module_text + "\n" + "\n".join(copy) + "\n"


def _definition(module: Module, entry: str) -> Function:
    """The first definition whose symbol is ``@entry`` (as written)."""
    found = next((f for f in module.definitions if f.symbol == "@" + entry), None)
    if found is None:
        raise IRError(f"no definition of {entry} in the module")
    return found


def _function_attributes(module: Module, function: Function) -> list[str]:
    """The attributes after ``function``'s parameter list, those of the groups (``#N``) it names included."""
    groups = module.attribute_groups
    return [*function.attributes,
            *(a for ref in function.attribute_group_refs if ref in groups for a in groups[ref].attributes)]


def _status_stored(line: str) -> list[str] | None:
    """``ret i32 <v>`` as ``store i32 <v>, ptr %pyjlad.status`` and ``ret void``; ``None`` for other lines."""
    instruction = parse_instruction(line)
    if instruction is None or instruction.opcode != "ret" or instruction.result is not None:
        return None
    tokens = instruction.tokens
    significant = [k for k, t in enumerate(tokens) if t.kind not in ("ws", "comment")]
    if len(significant) < 3 or tokens[significant[1]].text != "i32" or significant[0] + 4 != significant[2]:
        return None
    ret, value = significant[0], significant[2]
    if not (tokens[ret + 1].text == " " and tokens[ret + 3].text == " "):
        return None  # written ``ret i32 <v>`` with single spaces
    indent = "".join(t.text for t in tokens[:ret])
    rest = "".join(t.text for t in tokens[value + 1:])
    return [f"{indent}store i32 {tokens[value].text}, ptr %pyjlad.status, align 4", f"{indent}ret void{rest}"]


#: Enzyme's type tree of a pointer to floats at every offset (``__enzyme_double`` states one
#: element; loads at run-time offsets need the whole array typed).
