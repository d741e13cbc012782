"""``np.linalg.inv`` as one call with derivative rules, not LU loops for Enzyme to differentiate.

Numba's ``np.linalg.inv`` copies the matrix and calls two LAPACK helpers on the copy: ``numba_xxgetrf`` (LU
factors, in place) and ``numba_ez_xxgetri`` (the inverse from them, in place). :mod:`pyjlad.lapack` gives
both as loops Enzyme differentiates, and reverse mode through them is costly: Enzyme keeps what each
elimination step overwrites, in allocations of its own per call. In seed 003's ``remote_stats`` (an 8x8
inverse per voxel) that was most of the gradient's time.

The inverse has derivatives that need only the result ``B = inv(A)``: ``dB = -B dA B`` (forward) and
``dA = -B^T dB B^T`` (reverse). :func:`pyjlad.inverse_calls.inverse_pairs_in` (a pass of
:mod:`pyjlad.portable_pipeline`) makes Numba's pair of calls one call of ``void @pyjlad_inverse.<kind>(ptr %a,
ptr %end)`` (the inverse in place; ``%end`` is ``%a`` plus the order in elements), once a status call has
checked that the matrix factors. :func:`inverse_module` defines it with both rules registered with Enzyme:

* reverse (``__enzyme_register_gradient_``): the augmented forward pass inverts undifferentiated and keeps a
  copy of ``B`` (one ``malloc`` of ``n^2`` elements); the reverse pass overwrites the buffer's adjoint ``dB``
  with ``dA`` (the call overwrote ``A``, so the adjoint of what the buffer held before is ``dA`` alone) and
  frees the copy;
* forward (``__enzyme_register_derivative_``): inverts, then overwrites the tangent ``dA`` with ``dB``. A
  Hessian-vector product differentiates this rule in reverse mode, through the reverse rule and two matrix
  products.

A factorization on its own (``np.linalg.det``) and ``np.linalg.solve`` (``numba_xgesv``) are unchanged.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types

from .inverse_calls import FACTOR, INVERSE, INVERT, KIND_CODES
from .ir.lexer import texts_of
from .lapack import compiled_helper

__all__ = ["inverse_module"]

#: kind letter -> (bytes per element, Numba element type)
_KINDS = {"d": (8, types.float64), "s": (4, types.float32)}


@njit(error_model="numpy", boundscheck=False)
def _sandwich(n, b_ptr, x_ptr, lda, transposed):
    """``X <- -op(B) X op(B)`` with ``op(B) = B^T`` where ``transposed`` (the reverse rule: ``dA`` from ``dB``)
    and ``B`` otherwise (the forward rule: ``dB`` from ``dA``); both column-major with leading dimension
    ``lda``."""
    b = carray(b_ptr, (n, lda))  # b[j, i] is B(i, j)
    x = carray(x_ptr, (n, lda))
    t = np.empty((n, n), dtype=b.dtype)  # t[j, k] is (X op(B))(k, j)
    for j in range(n):
        for k in range(n):
            s = 0.0
            for m in range(n):
                s += x[m, k] * (b[m, j] if transposed else b[j, m])
            t[j, k] = s
    for j in range(n):
        for i in range(n):
            s = 0.0
            for k in range(n):
                s += (b[i, k] if transposed else b[k, i]) * t[j, k]
            x[j, i] = -s
    return 0


def inverse_module(kind: str) -> str:
    """Portable IR defining ``@pyjlad_inverse.<kind>(ptr %a, ptr %end)``, its status function and its derivative
    rules (see the module docstring; ``%end`` is ``%a`` plus the matrix's order in elements).

    The module declares the two LAPACK helpers; their definitions are :func:`pyjlad.lapack.lapack_module`'s,
    linked beside it.
    """
    size, element = _KINDS[kind]
    pointer = types.CPointer(element)
    sandwich_text, sandwich = compiled_helper(_sandwich, (types.int64, pointer, pointer, types.int64, types.int64),
                                              f"pyjlad_lapack_inverse_sandwich_{kind}")
    name, code = f"@{INVERSE}.{kind}", KIND_CODES[kind]
    order, status = f"{name}.order", f"@{INVERSE}.status.{kind}"

    def sandwich_call(b: str, x: str, transposed: int) -> list[str]:
        return ["  %ret = alloca i64, align 8",  # the helper's int64 result (see pyjlad.lapack.compiled_helper)
                "  %exc = alloca ptr, align 8",
                f"  %n = call i64 {order}(ptr %a, ptr %end)",
                f"  %done = call i32 @{sandwich}(ptr %ret, ptr %exc, i64 %n, ptr {b}, ptr {x}, i64 %n, "
                f"i64 {transposed})"]

    declarations = [f"declare i32 @{FACTOR}.{kind}(i8, i64, i64, ptr, i64, ptr)",
                    f"declare i32 @{INVERT}.{kind}(i8, i64, ptr, i64, ptr)", "declare ptr @malloc(i64)",
                    "declare void @free(ptr)", "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"]
    declared = set(texts_of(sandwich_text, "global"))
    return sandwich_text + "\n".join([
        *(line for line in declarations if line.split("@", 1)[1].split("(", 1)[0] not in {d[1:] for d in declared}),
        # the order, from the two pointers; inactive (an integer), and kept out of Enzyme's sight
        f'define linkonce_odr i64 {order}(ptr %a, ptr %end) noinline nounwind readnone "enzyme_inactive" {{',
        "entry:",
        "  %from = ptrtoint ptr %a to i64",
        "  %to = ptrtoint ptr %end to i64",
        "  %bytes = sub i64 %to, %from",
        f"  %n = sdiv exact i64 %bytes, {size}",
        "  ret i64 %n",
        "}",
        # the factorization's status (0, or the first zero pivot), from a copy of the matrix: inactive
        f'define linkonce_odr i32 {status}(ptr %a, ptr %end) noinline nounwind nofree "enzyme_inactive" {{',
        "entry:",
        f"  %n = call i64 {order}(ptr %a, ptr %end)",
        "  %square = mul i64 %n, %n",
        f"  %bytes = mul i64 %square, {size}",
        "  %copy = call ptr @malloc(i64 %bytes)",
        "  call void @llvm.memcpy.p0.p0.i64(ptr %copy, ptr %a, i64 %bytes, i1 false)",
        "  %ipiv = alloca i32, i64 %n, align 4",
        f"  %info = call i32 @{FACTOR}.{kind}(i8 {code}, i64 %n, i64 %n, ptr %copy, i64 %n, ptr %ipiv)",
        "  call void @free(ptr %copy)",
        "  ret i32 %info",
        "}",
        # the inverse, in place (called once the status is 0)
        f"define linkonce_odr void {name}(ptr %a, ptr %end) noinline {{",
        "entry:",
        f"  %n = call i64 {order}(ptr %a, ptr %end)",
        "  %ipiv = alloca i32, i64 %n, align 4",
        f"  %info = call i32 @{FACTOR}.{kind}(i8 {code}, i64 %n, i64 %n, ptr %a, i64 %n, ptr %ipiv)",
        f"  %status = call i32 @{INVERT}.{kind}(i8 {code}, i64 %n, ptr %a, i64 %n, ptr %ipiv)",
        "  ret void",
        "}",
        # Enzyme's rules: each pointer followed by its shadow (the tape last, in the reverse pass)
        f"define linkonce_odr ptr {name}.aug(ptr %a, ptr %da, ptr %end, ptr %dend) {{",
        "entry:",
        f"  call void {name}(ptr %a, ptr %end)",
        f"  %n = call i64 {order}(ptr %a, ptr %end)",
        "  %square = mul i64 %n, %n",
        f"  %bytes = mul i64 %square, {size}",
        "  %tape = call ptr @malloc(i64 %bytes)",
        "  call void @llvm.memcpy.p0.p0.i64(ptr %tape, ptr %a, i64 %bytes, i1 false)",
        "  ret ptr %tape",
        "}",
        f"define linkonce_odr void {name}.rev(ptr %a, ptr %da, ptr %end, ptr %dend, ptr %tape) {{",
        "entry:",
        *sandwich_call("%tape", "%da", 1),
        "  call void @free(ptr %tape)",
        "  ret void",
        "}",
        f"define linkonce_odr void {name}.fwd(ptr %a, ptr %da, ptr %end, ptr %dend) {{",
        "entry:",
        f"  call void {name}(ptr %a, ptr %end)",
        *sandwich_call("%a", "%da", 0),
        "  ret void",
        "}",
        # weak_odr, as pyjlad.special's: llvm-link keeps them
        f"@__enzyme_register_gradient_{INVERSE}.{kind} = weak_odr global [3 x ptr] "
        f"[ptr {name}, ptr {name}.aug, ptr {name}.rev]",
        f"@__enzyme_register_derivative_{INVERSE}.{kind} = weak_odr global [2 x ptr] [ptr {name}, ptr {name}.fwd]",
    ]) + "\n"
