"""x86's atomic flag intrinsics written back as the ``atomicrmw`` and compare they came from.

Numba emits a function's machine code with LLVM's JIT, whose x86 code generator rewrites its module in place
first; pyjlad reads the IR of a function Numba compiled before (the module it exports) after that. LLVM 22's
x86 back end turns an ``atomicrmw`` whose result is only compared (Numba's reference count release: ``%old =
atomicrmw sub ptr %mi, i64 1``, ``icmp eq i64 %old, 1``) into ``@llvm.x86.atomic.sub.cc.i64(ptr, i64, i32
<condition>)``, which returns whether the new value meets the condition (x86's ``lock sub`` then ``sete``). No
other target, no Enzyme rule and no older LLVM knows it: an ``@njit`` function calling ``pyjlad.grad(f)`` that
iterates over an array (``for v in x``) was refused ("target-specific intrinsic", a user-style check,
2026-12-07). Each such call is written back as portable IR, the same operation: the ``atomicrmw`` (``seq_cst``:
x86's ``lock`` prefix orders as strongly), the new value, its compare and the flag. Conditions other than the
four the back end makes (equal to, not equal to, below and not below zero) are left to the refusal.

>>> body = '''define void @f(ptr %mi) {
... entry:
...   %last = tail call i8 @llvm.x86.atomic.sub.cc.i64(ptr nonnull %mi, i64 1, i32 4)
...   ret void
... }'''
>>> print(atomic_flags_as_ir(body)[0])
define void @f(ptr %mi) {
entry:
  %last.pj.old = atomicrmw sub ptr %mi, i64 1 seq_cst
  %last.pj.new = sub i64 %last.pj.old, 1
  %last.pj.flag = icmp eq i64 %last.pj.new, 0
  %last = zext i1 %last.pj.flag to i8
  ret void
}
"""

from __future__ import annotations

from .ir.instructions import valued_call
from .ir.names import decode_name, symbol_for

__all__ = ["atomic_flags_as_ir"]

#: The operations the intrinsics combine with a flag (``@llvm.x86.atomic.<op>.cc.<type>``).
_OPERATIONS = frozenset({"add", "sub", "and", "or", "xor"})
#: x86's condition codes the back end passes -> the ``icmp`` of the new value against zero (checked by running
#: the intrinsics on this machine: ``tests/test_atomic_flags.py``).
_CONDITIONS = {"4": "eq", "5": "ne", "8": "slt", "9": "sge"}


def atomic_flags_as_ir(define: str) -> tuple[str, bool]:
    """``define`` (one function's text) with each x86 atomic flag intrinsic it calls written back as portable IR,
    and whether anything changed."""
    lines = define.split("\n")
    rewritten = [_as_ir(line) if "@llvm.x86.atomic." in line else None for line in lines]
    if not any(rewritten):
        return define, False
    return "\n".join(new or line for new, line in zip(rewritten, lines)), True


def _as_ir(line: str) -> str | None:
    """``line`` as an ``atomicrmw``, its new value, a compare and the flag; ``None`` for any other line."""
    found = valued_call(line)
    if found is None or len(found[1].values) != 3:
        return None
    name, call, parts = found
    condition = call.values[2]
    if len(parts) != 6 or parts[:3] != ["llvm", "x86", "atomic"] or parts[3] not in _OPERATIONS \
            or parts[4] != "cc" or condition not in _CONDITIONS:
        return None
    operation, ty, (address, value) = parts[3], parts[5], call.values[:2]
    old, new, flag = (symbol_for(f"{decode_name(name)}.pj.{part}", "%") for part in ("old", "new", "flag"))
    indent = line[: len(line) - len(line.lstrip())]
    return "\n".join([f"{indent}{old} = atomicrmw {operation} ptr {address}, {ty} {value} seq_cst",
                      f"{indent}{new} = {operation} {ty} {old}, {value}",
                      f"{indent}{flag} = icmp {_CONDITIONS[condition]} {ty} {new}, 0",
                      f"{indent}{name} = zext i1 {flag} to i8"])
