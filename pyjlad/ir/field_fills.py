"""Zero fills of a stack struct's leading fields written as one store per field (:func:`fills_as_field_stores`).

Numba builds array structs on the stack (``{ ptr, ptr, i64, i64, ptr, [n x i64], [n x i64] }``: meminfo, parent,
size, item size, data, shape, strides) and zeroes the first two fields with a 16-byte ``llvm.memset``, for instance
where ``np.max`` views a column ``X[:, j]`` as a 1-D array. Where nothing reads those fields back, Enzyme v0.0.289
cannot type the fill ("Cannot deduce type of memset"); the derivative then needed loose types, and one such
derivative (``np.std(X) + np.var(X[:, 1])`` plus the column maxima built by a list comprehension, a user-style
probe of 2026-12-06) failed pyjlad's check and was refused. The struct's own field types say what the bytes are:
a store of ``ptr null``, ``i64 0`` or ``double 0.0`` per field writes the same memory, typed.

Only a fill of zeros, of a constant length covering whole leading fields of scalar type, directly at an
``alloca`` of a literal (not packed) struct, is rewritten; anything else is left as it is.
"""

from __future__ import annotations

from .instructions import Instruction, parse_instruction, significant
from .module import Module
from .value_types import element_types, type_written_at

__all__ = ["fills_as_field_stores"]

_MEMSET = "@llvm.memset.p0.i64"
#: Scalar field types: size in bytes (also their alignment in a literal struct) and the zero of the type.
_SCALARS = {"ptr": (8, "null"), "i64": (8, "0"), "i32": (4, "0"), "i16": (2, "0"), "i8": (1, "0"),
            "double": (8, "0.0"), "float": (4, "0.0")}
#: The prefix of the values this rewrite adds (one per field after the first).
_FIELD = "%pyjlad.field"


def fills_as_field_stores(module: Module) -> Module | None:
    """``module`` with each zero ``llvm.memset`` of a stack struct's leading fields made one store per field, or
    None where there is none (the module unchanged).

    Examples
    --------
    >>> from pyjlad.ir import parse
    >>> m = parse("define void @f() {\\n"
    ...           "  %a = alloca { ptr, ptr, i64, ptr }, align 8\\n"
    ...           "  call void @llvm.memset.p0.i64(ptr align 8 %a, i8 0, i64 16, i1 false)\\n"
    ...           "  ret void\\n}\\n")
    >>> print("\\n".join(fills_as_field_stores(m).definitions[0].body[1:4]))
      store ptr null, ptr %a, align 8
      %pyjlad.field.2 = getelementptr inbounds { ptr, ptr, i64, ptr }, ptr %a, i32 0, i32 1
      store ptr null, ptr %pyjlad.field.2, align 8
    >>> fills_as_field_stores(parse("define void @g(ptr %p) {\\n"
    ...     "  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 16, i1 false)\\n  ret void\\n}\\n")) is None
    True
    """
    changed = False
    for function in module.definitions:
        body = function.body or []
        if not any(_MEMSET in line for line in body):
            continue
        structs = {i.result: t for i in map(parse_instruction, body) if i is not None and (t := _allocated(i))}
        rewritten: list[str] = []
        for line in body:
            stores = _field_stores(line, structs, len(rewritten)) if _MEMSET in line else None
            rewritten.extend(stores if stores is not None else [line])
            changed = changed or stores is not None
        function.body[:] = rewritten
    return module if changed else None


def _allocated(instruction: Instruction) -> str | None:
    """The literal struct type an ``alloca`` allocates (one of them: no count), or None."""
    if instruction.opcode != "alloca" or instruction.result is None:
        return None
    tokens = significant(instruction.tokens)
    start = next(k + 1 for k, t in enumerate(tokens) if t.text == "alloca")
    written = type_written_at(tokens, start)
    if written is None or not written[0].startswith("{"):
        return None
    struct, after = written
    if after + 1 < len(tokens) and tokens[after].text == "," and tokens[after + 1].text not in ("align", "addrspace"):
        return None  # a count follows: an array of structs
    return struct


def _field_stores(line: str, structs: dict[str, str], serial: int) -> list[str] | None:
    """The stores replacing the fill on ``line``, or None where it is not a fill this module rewrites."""
    instruction = parse_instruction(line)
    call = instruction.call() if instruction is not None else None
    if call is None or call.callee != _MEMSET or len(call.values) != 4 or instruction.result:
        return None
    destination, value, length, volatile = call.values
    struct = structs.get(destination)
    if struct is None or value != "0" or volatile != "false" or not length.isdigit():
        return None
    fields = _leading_fields(struct, int(length))
    if not fields:
        return None
    indent = line[: len(line) - len(line.lstrip())]
    stores = []
    for index, (kind, zero, size) in enumerate(fields):
        pointer = destination
        if index:
            pointer = f"{_FIELD}.{serial + len(stores)}"
            stores.append(f"{indent}{pointer} = getelementptr inbounds {struct}, ptr {destination}, i32 0, i32 {index}")
        stores.append(f"{indent}store {kind} {zero}, ptr {pointer}, align {size}")
    return stores


def _leading_fields(struct: str, length: int) -> list[tuple[str, str, int]] | None:
    """``(type, zero, size)`` of the fields of ``struct`` that the first ``length`` bytes cover exactly, or None
    where they do not (a field cut, padding, a field that is not a scalar)."""
    elements = element_types(struct)
    if elements is None:
        return None
    fields, offset = [], 0
    for kind in elements:
        if offset == length:
            break
        if kind not in _SCALARS:
            return None
        size, zero = _SCALARS[kind]
        if offset % size or offset + size > length:
            return None
        fields.append((kind, zero, size))
        offset += size
    return fields if offset == length else None
