"""Numba's entry, made to store its status through a pointer: the status is never a differentiable value.

The drivers (:mod:`pyjlad.engines.driver`) call this copy of the entry; see :func:`status_by_pointer`.
"""

from __future__ import annotations

from ..errors import IRError
from ..ir.instructions import Instruction
from ..ir.lexer import split_top_level
from ..ir.module import Function, Module, parse, parse_instruction

__all__ = ["STATUS_ENTRY_SUFFIX", "STATUS_SLOT", "VALUE_ENTRY_SUFFIX", "result_by_value", "status_by_pointer",
           "status_written"]

#: Suffix of the entry's copy that stores its status through a pointer (:func:`status_by_pointer`).
STATUS_ENTRY_SUFFIX = ".pyjlad.status"
#: Suffix of the entry's copy that returns its result and stores its status (:func:`result_by_value`).
VALUE_ENTRY_SUFFIX = ".pyjlad.value"
#: The parameter through which those copies store the status.
STATUS_SLOT = "%pyjlad.status"
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
            f"ptr noalias nocapture writeonly {STATUS_SLOT}){attrs}{{"]
    for line in function.body or ():
        copy += _status_stored(line) or [line]
    copy.append("}")
    return module_text + "\n" + "\n".join(copy) + "\n"


def result_by_value(module_text: str, entry: str, result_type: str, slot_hint: str = "") -> str:
    r"""``module_text`` with an internal copy of ``entry`` that returns its result and stores its status.

    The copy, ``<result_type> @<entry>.pyjlad.value(<entry's parameters but the first>, ptr %pyjlad.status)``,
    writes the result to a slot of its own (Numba's ``%retptr``, now an ``alloca``) and returns what the slot
    holds where the entry returned its status, which it stores as :func:`status_by_pointer`'s copy does.
    ``slot_hint``, an instruction naming ``%retptr``, follows the slot's ``alloca``: Enzyme's type analysis
    needs the slot typed as the status wrapper types Numba's pointer (without it, a parallel loop's
    reduction, zeroed by a ``memset`` and summed into the result, could not be typed).

    For the forward sweep a Hessian-vector product differentiates in reverse
    (:func:`pyjlad.engines.hvp_driver.hvp_driver`): Enzyme's forward derivative of the entry stores the
    result's tangent through the shadow of ``%retptr``, a parameter it gives no ``noalias``, after every read
    of the inputs, so the reverse sweep could not tell it from the inputs and kept a copy of every value read.
    The shadow of a slot of the function's own is one too, which no input can be.

    Examples
    --------
    >>> text = "\n".join(["define i32 @f(ptr noalias %retptr, ptr %excinfo, double %x) {",
    ...                   "entry:", "  store double %x, ptr %retptr, align 8", "  ret i32 0", "}"])
    >>> print(result_by_value(text, "f", "double")[len(text):])  # doctest: +NORMALIZE_WHITESPACE
    define internal double @f.pyjlad.value(ptr %excinfo, double %x, ptr noalias nocapture writeonly %pyjlad.status) {
    entry:
      %retptr = alloca double, align 8
      store double 0.000000e+00, ptr %retptr, align 8
      store double %x, ptr %retptr, align 8
      store i32 0, ptr %pyjlad.status, align 4
      %pyjlad.result.0 = load double, ptr %retptr, align 8
      ret double %pyjlad.result.0
    }
    """
    module = parse(module_text, strict=False)
    function = _definition(module, entry)
    slot, *rest = function.parameters
    if slot.name != "%retptr" or slot.type != "ptr" or function.body is None:
        raise IRError(f"{entry} does not take Numba's result pointer %retptr first")
    params = ", ".join([*(p.render() for p in rest), *(["..."] if function.varargs else [])])
    copy = [f"define internal {result_type} @{entry}{VALUE_ENTRY_SUFFIX}({params}{', ' if params else ''}"
            "ptr noalias nocapture writeonly %pyjlad.status) {"]
    first = next(k for k, line in enumerate(function.body) if parse_instruction(line) is not None)
    copy += function.body[:first]
    copy += [f"  %retptr = alloca {result_type}, align 8", *([f"  {slot_hint}"] if slot_hint else []),
             f"  store {result_type} 0.000000e+00, ptr %retptr, align 8"]
    returns = 0
    for line in function.body[first:]:
        stored = _status_stored(line)
        if stored is None:
            copy.append(line)
            continue
        *status, _ = stored
        result = f"%pyjlad.result.{returns}"
        returns += 1
        copy += [*status, f"  {result} = load {result_type}, ptr %retptr, align 8", f"  ret {result_type} {result}"]
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


def status_written(instruction: Instruction) -> str | None:
    """The status an instruction gives back: ``<v>`` of ``ret i32 <v>`` or of ``store i32 <v>, ptr
    %pyjlad.status`` (an entry's or its copies'); ``""`` for any other ``ret`` (a status not known); ``None`` for
    any other instruction.

    >>> [status_written(parse_instruction(line)) for line in
    ...  ("  ret i32 1", "  store i32 %s, ptr %pyjlad.status", "  ret void", "  store i32 0, ptr %p")]
    ['1', '%s', '', None]
    """
    if instruction.opcode not in ("ret", "store"):
        return None
    parts = ["".join(t.text for t in part).split() for part in split_top_level(instruction.after_opcode())]
    if instruction.opcode == "ret":
        return parts[0][1] if parts and len(parts[0]) == 2 and parts[0][0] == "i32" else ""
    if len(parts) >= 2 and parts[1][:2] == ["ptr", STATUS_SLOT]:
        return parts[0][1] if len(parts[0]) == 2 else ""
    return None


def _status_stored(line: str) -> list[str] | None:
    """``ret i32 <v>`` as ``store i32 <v>, ptr %pyjlad.status`` and ``ret void``; ``None`` for other lines."""
    instruction = parse_instruction(line)
    if instruction is None or instruction.opcode != "ret" or not status_written(instruction):
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
    return [f"{indent}store i32 {tokens[value].text}, ptr {STATUS_SLOT}, align 4", f"{indent}ret void{rest}"]


#: Enzyme's type tree of a pointer to floats at every offset (``__enzyme_double`` states one
#: element; loads at run-time offsets need the whole array typed).
