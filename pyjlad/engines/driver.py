"""Enzyme driver modules: the LLVM code that calls ``__enzyme_autodiff`` on an entry.

Enzyme's LLVM-level interface is a call to an undefined function
``__enzyme_autodiff(fn, args...)`` in which each argument may be preceded by
the address of a marker global naming its activity:

================  ===========================================================
marker            meaning
================  ===========================================================
``enzyme_const``  not differentiated
``enzyme_out``    a scalar whose adjoint Enzyme returns (one struct field each)
``enzyme_dup``    a pointer followed by its shadow; adjoints accumulate there
================  ===========================================================

Numba's entry returns an ``i32`` status. A status must never be treated as a
differentiable value (the failure of seed 001), so the driver wraps the entry
in a ``void`` function that stores the status through a constant pointer, and
differentiates the wrapper. The result pointer ``retptr`` is ``enzyme_dup``
with a shadow seeded to 1, so one reverse sweep computes both the value and
the gradient.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..abi import ArrayArg, FunctionABI, ScalarArg

__all__ = ["ReverseDriver", "reverse_driver"]


@dataclass(frozen=True)
class ReverseDriver:
    """A reverse-mode driver module and how to call it.

    The driver's signature is::

        i32 symbol(ptr value_out, ptr excinfo, ptr grad_out_0, ..., params..., ptr shadow_0, ...)

    with one ``grad_out`` per differentiated float scalar (in ``wrt`` order)
    and one ``shadow`` per differentiated array (in ``wrt`` order); it returns
    Numba's status.

    Attributes
    ----------
    text : str
        LLVM IR of the driver (to be appended to the portable module).
    symbol : str
        The driver function's name.
    scalar_wrt : tuple of int
        Indices of the differentiated scalar arguments.
    array_wrt : tuple of int
        Indices of the differentiated array arguments.
    """

    text: str
    symbol: str
    scalar_wrt: tuple[int, ...]
    array_wrt: tuple[int, ...]


def reverse_driver(abi: FunctionABI, wrt: tuple[int, ...]) -> ReverseDriver:
    """Build the reverse-mode driver for ``abi`` differentiating arguments ``wrt``.

    ``wrt`` must name differentiable arguments only (checked by the caller).
    Enzyme returns the adjoints of ``enzyme_out`` scalars in parameter order,
    so ``wrt`` is used sorted.
    """
    wrt = tuple(sorted(set(wrt)))
    scalar_wrt = tuple(i for i in wrt if isinstance(abi.args[i], ScalarArg))
    array_wrt = tuple(i for i in wrt if isinstance(abi.args[i], ArrayArg))
    digest = hashlib.sha256(f"{abi.to_dict()}|{wrt}".encode()).hexdigest()[:12]
    symbol = f"{abi.entry}_grad_{digest}"
    primal = f"{abi.entry}_status_{digest}"
    res_ty = abi.result.llvm_type
    params = abi.params()
    names = [f"%p{k}" for k in range(len(params))]
    typed_params = ", ".join(f"{ty} {name}" for (_, _, ty), name in zip(params, names))
    typed_params_sep = (", " + typed_params) if typed_params else ""
    plain_args = ", ".join(f"{ty} {name}" for (_, _, ty), name in zip(params, names))
    plain_args_sep = (", " + plain_args) if plain_args else ""

    out_types = [abi.args[i].llvm_type for i in scalar_wrt]  # type: ignore[union-attr]
    if not out_types:
        ad_ret = "void"
    elif len(out_types) == 1:
        ad_ret = out_types[0]
    else:
        ad_ret = "{ " + ", ".join(out_types) + " }"

    shadow_names = {i: f"%shadow{i}" for i in array_wrt}
    ad_args = [
        f"ptr @{primal}",
        "ptr @enzyme_dup", "ptr %ret", "ptr %dret",
        "ptr @enzyme_const", "ptr %status",
        "ptr @enzyme_const", "ptr %excinfo",
    ]
    for (index, role, ty), name in zip(params, names):
        if role == "value" and index in scalar_wrt:
            ad_args += ["ptr @enzyme_out", f"{ty} {name}"]
        elif role == "data" and index in array_wrt:
            ad_args += ["ptr @enzyme_dup", f"{ty} {name}", f"ptr {shadow_names[index]}"]
        else:
            ad_args += ["ptr @enzyme_const", f"{ty} {name}"]

    grad_out_params = "".join(f", ptr %gout{i}" for i in scalar_wrt)
    shadow_params = "".join(f", ptr {shadow_names[i]}" for i in array_wrt)
    lines = [
        "@enzyme_dup = external global i32",
        "@enzyme_const = external global i32",
        "@enzyme_out = external global i32",
        "",
        f"declare {ad_ret} @__enzyme_autodiff(...)",
        "",
        f"define internal void @{primal}(ptr %retptr, ptr %status, ptr %excinfo{typed_params_sep}) {{",
        "entry:",
        f"  %s = call i32 @{abi.entry}(ptr %retptr, ptr %excinfo{plain_args_sep})",
        "  store i32 %s, ptr %status, align 4",
        "  ret void",
        "}",
        "",
        f"define i32 @{symbol}(ptr %value_out, ptr %excinfo{grad_out_params}{typed_params_sep}{shadow_params}) {{",
        "entry:",
        f"  %ret = alloca {res_ty}, align 8",
        f"  %dret = alloca {res_ty}, align 8",
        "  %status = alloca i32, align 4",
        f"  store {res_ty} 0.000000e+00, ptr %ret, align 8",
        f"  store {res_ty} 1.000000e+00, ptr %dret, align 8",
        "  store i32 0, ptr %status, align 4",
    ]
    call = f"call {ad_ret} (...) @__enzyme_autodiff({', '.join(ad_args)})"
    if ad_ret == "void":
        lines.append(f"  {call}")
    else:
        lines.append(f"  %g = {call}")
    for k, i in enumerate(scalar_wrt):
        ty = out_types[k]
        if len(out_types) == 1:
            lines.append(f"  store {ty} %g, ptr %gout{i}, align 8")
        else:
            lines.append(f"  %g{k} = extractvalue {ad_ret} %g, {k}")
            lines.append(f"  store {ty} %g{k}, ptr %gout{i}, align 8")
    lines += [
        f"  %value = load {res_ty}, ptr %ret, align 8",
        f"  store {res_ty} %value, ptr %value_out, align 8",
        "  %st = load i32, ptr %status, align 4",
        "  ret i32 %st",
        "}",
    ]
    return ReverseDriver(text="\n".join(lines) + "\n", symbol=symbol, scalar_wrt=scalar_wrt, array_wrt=array_wrt)
