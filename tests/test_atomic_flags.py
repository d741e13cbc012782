"""x86's atomic flag intrinsics written back as portable IR (:mod:`pyjlad.atomic_flags`): the same operation.

The oracle is the intrinsic itself, run by LLVM's JIT on this machine: each rewritten function must leave the
same value in memory and return the same flag as the original for every operation, condition and operand tried.
End to end, ``tests/test_nested_early_exits.py`` differentiates an ``@njit`` function that calls
``pyjlad.grad(f)`` of a loop over ``for v in x``, whose module Numba compiled holds such an intrinsic (refused as
"target-specific" until 2026-12-07).
"""

from __future__ import annotations

import ctypes
import itertools

import llvmlite.binding as llvm
import pytest

from pyjlad.atomic_flags import atomic_flags_as_ir

OPERATIONS = ["add", "sub", "and", "or", "xor"]
#: x86's condition codes LLVM's back end passes: equal, not equal, sign, no sign.
CONDITIONS = [4, 5, 8, 9]
VALUES = [0, 1, 2, -1, -5, 7, 2**62, -(2**63), 2**63 - 1]


def _function(name: str, operation: str, condition: int, width: int) -> str:
    return (f"define i64 @{name}(ptr %p, i{width} %v) {{\n"
            f"entry:\n"
            f"  %flag = call i8 @llvm.x86.atomic.{operation}.cc.i{width}(ptr %p, i{width} %v, i32 {condition})\n"
            f"  %wide = zext i8 %flag to i64\n"
            f"  ret i64 %wide\n"
            f"}}")


@pytest.fixture(scope="module")
def engine():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    pieces, declared = [], set()
    for width, operation, condition in itertools.product((64, 32), OPERATIONS, CONDITIONS):
        declaration = f"declare i8 @llvm.x86.atomic.{operation}.cc.i{width}(ptr, i{width}, i32 immarg)"
        if declaration not in declared:
            declared.add(declaration)
            pieces.append(declaration)
        original = _function(f"original_{operation}_{condition}_{width}", operation, condition, width)
        rewritten, changed = atomic_flags_as_ir(original.replace("original_", "portable_"))
        assert changed and "@llvm.x86" not in rewritten
        pieces += [original, rewritten]
    module = llvm.parse_assembly("\n".join(pieces))
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine()
    jit = llvm.create_mcjit_compiler(module, machine)
    jit.finalize_object()
    return jit


@pytest.mark.parametrize("width", [64, 32])
@pytest.mark.parametrize("condition", CONDITIONS)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_portable_form_leaves_the_same_value_and_flag_as_the_intrinsic(engine, operation: str, condition: int,
                                                                         width: int) -> None:
    cell_type = ctypes.c_int64 if width == 64 else ctypes.c_int32
    signature = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, cell_type)
    original, portable = (signature(engine.get_function_address(f"{kind}_{operation}_{condition}_{width}"))
                          for kind in ("original", "portable"))
    for start, operand in itertools.product(VALUES, [1, 0, -1, 3, 2**30]):
        cells = [cell_type(start), cell_type(start)]
        flags = [fn(ctypes.addressof(cell), operand) for fn, cell in zip((original, portable), cells)]
        assert flags[0] == flags[1] and cells[0].value == cells[1].value, (start, operand)


def test_other_conditions_and_calls_are_left_alone() -> None:
    unknown = "  %f = call i8 @llvm.x86.atomic.sub.cc.i64(ptr %p, i64 1, i32 12)"  # x86's "less": not made
    other = "  %g = call i64 @llvm.x86.rdtsc()"
    assert atomic_flags_as_ir(f"{unknown}\n{other}") == (f"{unknown}\n{other}", False)
