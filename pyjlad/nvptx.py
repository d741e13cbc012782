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
from dataclasses import dataclass

from .errors import UnsupportedFunctionError
from .ir.pipeline import Pass, Pipeline
from .portable import LIBM_FUNCTIONS, dedupe_declarations

__all__ = ["device_module", "NVPTX", "NVPTX_TRIPLE", "NVPTX_DATALAYOUT", "LIBDEVICE_FUNCTIONS"]

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
NVPTX_DATALAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"

#: libm functions with a libdevice counterpart ``__nv_<name>`` (float: ``__nv_<name>f``).
LIBDEVICE_FUNCTIONS = LIBM_FUNCTIONS
# LLVM intrinsics NVPTX cannot select in double precision: call libdevice instead.
_INTRINSICS_TO_LIBDEVICE = {"sin": "sin", "cos": "cos", "exp": "exp", "exp2": "exp2", "exp10": "exp10",
                            "log": "log", "log2": "log2", "log10": "log10", "pow": "pow", "powi": "powi"}
_INTRINSIC_RE = re.compile(r"@llvm\.(" + "|".join(_INTRINSICS_TO_LIBDEVICE) + r")\.(f64|f32)(?:\.i32)?\b")
_LIBM_RE = re.compile(r"@(" + "|".join(sorted(LIBDEVICE_FUNCTIONS, key=len, reverse=True)) + r")(f?)(?=\()")


@dataclass(frozen=True)
class DeviceContext:
    """What the passes of :data:`NVPTX` need: the module's external functions, and the function's name for errors."""

    external_functions: tuple[str, ...] = ()
    name: str = "the function"


def refuse_host_only_calls(text: str, context: DeviceContext) -> str:
    """Refuse calls with no device counterpart (Numba's allocating runtime, BLAS, LAPACK, custom rules, printing).

    Raises
    ------
    UnsupportedFunctionError
        Naming the calls.
    """
    host_only = [
        f for f in context.external_functions
        if not f.startswith("llvm.") and f not in LIBDEVICE_FUNCTIONS
        and not (f.endswith("f") and f[:-1] in LIBDEVICE_FUNCTIONS)  # float versions: erff, sinf, ...
    ]
    if host_only:
        raise UnsupportedFunctionError(
            f"{context.name} calls {', '.join(sorted(host_only))}, which cannot run on a GPU: the device target "
            "takes per-sample functions of scalars and existing arrays (no temporary arrays, BLAS/LAPACK, "
            "custom rules or printing)"
        )
    return text


def _is_target_line(line: str) -> bool:
    return line.startswith(("target datalayout", "target triple"))


def nvptx_target(text: str, context: DeviceContext) -> str:
    """Make the module's target NVPTX's (``nvptx64-nvidia-cuda`` and its data layout)."""
    out = []
    for line in text.splitlines():
        if line.startswith("target datalayout"):
            line = f'target datalayout = "{NVPTX_DATALAYOUT}"'
        elif line.startswith("target triple"):
            line = f'target triple = "{NVPTX_TRIPLE}"'
        out.append(line)
    return "\n".join(out) + "\n"


def libdevice_calls(text: str, context: DeviceContext) -> str:
    """Call CUDA's libdevice (``__nv_sin``) for libm functions and the intrinsics NVPTX cannot lower in double.

    The NVPTX backend selects no double-precision ``llvm.sin.f64``, ``llvm.pow.f64``...; CUDA.jl links
    libdevice into every kernel that references it.
    """
    out = []
    for line in text.splitlines():
        if not _is_target_line(line):
            line = _INTRINSIC_RE.sub(lambda m: f"@__nv_{_INTRINSICS_TO_LIBDEVICE[m.group(1)]}"
                                     + ("f" if m.group(2) == "f32" else ""), line)
            line = _LIBM_RE.sub(lambda m: f"@__nv_{m.group(1)}{m.group(2)}", line)
        out.append(line)
    return "\n".join(out) + "\n"


def dedupe_device_declarations(text: str, context: DeviceContext) -> str:
    """Drop repeated declarations: an intrinsic and the libm call it became may now both be declared."""
    return dedupe_declarations(text)


#: The passes that retarget a portable module to NVPTX, in order.
NVPTX = Pipeline("nvptx", (
    Pass("refuse-host-only-calls", refuse_host_only_calls, "nothing: a check", form="text"),
    Pass("nvptx-target", nvptx_target, "target lines", form="text"),
    Pass("libdevice-calls", libdevice_calls, "callees", form="text"),
    Pass("dedupe-declarations", dedupe_device_declarations, "declarations", form="text"),
))


def device_module(text: str, external_functions: tuple[str, ...] = (), *, name: str = "the function",
                  label: str = "device") -> str:
    """``text`` (a portable module) retargeted to NVPTX by the passes of :data:`NVPTX`.

    Parameters
    ----------
    text : str
        A portable module (:attr:`pyjlad.portable.PortableModule.text`).
    external_functions : tuple of str
        Its external functions (:attr:`pyjlad.portable.PortableModule.external_functions`).
    name : str
        The function's name, for error messages.
    label : str
        The directory of its dumps (``PYJLAD_DUMP_IR``): the entry's name.

    Raises
    ------
    UnsupportedFunctionError
        If the module calls something with no device counterpart.
    """
    return NVPTX.run(text, DeviceContext(tuple(external_functions), name), label=label)
