"""Retarget a portable module to NVPTX, for GPU kernels (CUDA.jl's ``llvmcall``).

A per-sample function of scalars (and arrays it only reads and writes) runs on
the device once its host-only parts are replaced: the target lines become
NVPTX's, and libm calls and the LLVM math intrinsics the NVPTX backend cannot
lower in double precision call CUDA's libdevice (``__nv_sin``, ...), which
CUDA.jl links into every kernel that references it. Calls that have no device
counterpart (Numba's allocating runtime, BLAS, LAPACK, custom rules) are
refused with the reason.

:func:`device_module` gives the text; ``python -m pyjlad export --target nvptx``
writes it for Julia. The tests compile it, and Enzyme's derivative of it, to
PTX with ``llc`` and assemble that with ``ptxas``: no GPU needed.
"""

from __future__ import annotations

import re

from .errors import UnsupportedFunctionError
from .portable import LIBM_FUNCTIONS, dedupe_declarations

__all__ = ["device_module", "NVPTX_TRIPLE", "NVPTX_DATALAYOUT", "LIBDEVICE_FUNCTIONS"]

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
NVPTX_DATALAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"

#: libm functions with a libdevice counterpart ``__nv_<name>`` (float: ``__nv_<name>f``).
LIBDEVICE_FUNCTIONS = LIBM_FUNCTIONS
# LLVM intrinsics NVPTX cannot select in double precision: call libdevice instead.
_INTRINSICS_TO_LIBDEVICE = {"sin": "sin", "cos": "cos", "exp": "exp", "exp2": "exp2", "exp10": "exp10",
                            "log": "log", "log2": "log2", "log10": "log10", "pow": "pow", "powi": "powi"}
_INTRINSIC_RE = re.compile(r"@llvm\.(" + "|".join(_INTRINSICS_TO_LIBDEVICE) + r")\.(f64|f32)(?:\.i32)?\b")
_LIBM_RE = re.compile(r"@(" + "|".join(sorted(LIBDEVICE_FUNCTIONS, key=len, reverse=True)) + r")(f?)(?=\()")


def device_module(text: str, external_functions: tuple[str, ...] = (), *, name: str = "the function") -> str:
    """``text`` (a portable module) retargeted to NVPTX.

    Parameters
    ----------
    text : str
        A portable module (:attr:`pyjlad.portable.PortableModule.text`).
    external_functions : tuple of str
        Its external functions (:attr:`pyjlad.portable.PortableModule.external_functions`).
    name : str
        The function's name, for error messages.

    Raises
    ------
    UnsupportedFunctionError
        If the module calls something with no device counterpart.
    """
    host_only = [
        f for f in external_functions
        if not f.startswith("llvm.") and f not in LIBDEVICE_FUNCTIONS
        and not (f.endswith("f") and f[:-1] in LIBDEVICE_FUNCTIONS)  # float versions: erff, sinf, ...
    ]
    if host_only:
        raise UnsupportedFunctionError(
            f"{name} calls {', '.join(sorted(host_only))}, which cannot run on a GPU: the device target "
            "takes per-sample functions of scalars and existing arrays (no temporary arrays, BLAS/LAPACK, "
            "custom rules or printing)"
        )
    out = []
    for line in text.splitlines():
        if line.startswith("target datalayout"):
            line = f'target datalayout = "{NVPTX_DATALAYOUT}"'
        elif line.startswith("target triple"):
            line = f'target triple = "{NVPTX_TRIPLE}"'
        else:
            line = _INTRINSIC_RE.sub(lambda m: f"@__nv_{_INTRINSICS_TO_LIBDEVICE[m.group(1)]}"
                                     + ("f" if m.group(2) == "f32" else ""), line)
            line = _LIBM_RE.sub(lambda m: f"@__nv_{m.group(1)}{m.group(2)}", line)
        out.append(line)
    # An intrinsic and the libm call it became may now both be declared.
    return dedupe_declarations("\n".join(out) + "\n")

