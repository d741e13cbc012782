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

from dataclasses import dataclass

from ..errors import UnsupportedFunctionError
from ..ir import Line, Module
from ..ir.edit import drop_repeated_declarations, rename_callees
from ..ir.pipeline import Pass, Pipeline
from ..portable import LIBM_FUNCTIONS

__all__ = ["device_module", "NVPTX", "NVPTX_TRIPLE", "NVPTX_DATALAYOUT", "LIBDEVICE_FUNCTIONS"]

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
NVPTX_DATALAYOUT = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"

#: libm functions with a libdevice counterpart ``__nv_<name>`` (float: ``__nv_<name>f``).
LIBDEVICE_FUNCTIONS = LIBM_FUNCTIONS
# LLVM intrinsics NVPTX cannot select in double precision: call libdevice instead.
_INTRINSICS_TO_LIBDEVICE = {"sin": "sin", "cos": "cos", "exp": "exp", "exp2": "exp2", "exp10": "exp10",
                            "log": "log", "log2": "log2", "log10": "log10", "pow": "pow", "powi": "powi"}
_PRECISIONS = {"f64": "", "f32": "f"}


@dataclass(frozen=True)
class DeviceContext:
    """What the passes of :data:`NVPTX` need: the module's external functions, and the function's name for errors."""

    external_functions: tuple[str, ...] = ()
    name: str = "the function"


def refuse_host_only_calls(module: Module, context: DeviceContext) -> Module:
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
    return module


def nvptx_target(module: Module, context: DeviceContext) -> Module:
    """Make the module's target NVPTX's (``nvptx64-nvidia-cuda`` and its data layout)."""
    for item in module.items:
        if isinstance(item, Line) and item.kind == "datalayout":
            item.text = f'target datalayout = "{NVPTX_DATALAYOUT}"'
        elif isinstance(item, Line) and item.kind == "triple":
            item.text = f'target triple = "{NVPTX_TRIPLE}"'
    module.trailing_newline = True
    return module


def libdevice_name(name: str) -> str | None:
    """The libdevice function that replaces function ``name`` on NVPTX, or ``None`` if it stays.

    Examples
    --------
    >>> libdevice_name("llvm.sin.f64"), libdevice_name("llvm.powi.f32.i32"), libdevice_name("erff")
    ('__nv_sin', '__nv_powif', '__nv_erff')
    >>> libdevice_name("llvm.fabs.f64") is None, libdevice_name("pyjlad_f") is None
    (True, True)
    """
    parts = name.split(".")
    if parts[0] == "llvm":
        if (len(parts) in (3, 4) and parts[1] in _INTRINSICS_TO_LIBDEVICE and parts[2] in _PRECISIONS
                and parts[3:] in ([], ["i32"])):
            return f"__nv_{_INTRINSICS_TO_LIBDEVICE[parts[1]]}{_PRECISIONS[parts[2]]}"
        return None
    if name in LIBDEVICE_FUNCTIONS or (name.endswith("f") and name[:-1] in LIBDEVICE_FUNCTIONS):
        return f"__nv_{name}"
    return None


def libdevice_calls(module: Module, context: DeviceContext) -> Module:
    """Call CUDA's libdevice (``__nv_sin``) for libm functions and the intrinsics NVPTX cannot lower in double.

    The NVPTX backend selects no double-precision ``llvm.sin.f64``, ``llvm.pow.f64``...; CUDA.jl links
    libdevice into every kernel that references it. Callees and the declarations' names are renamed
    (:func:`libdevice_name`); the float versions of libm functions (``erff``) get libdevice's (``__nv_erff``).
    """
    return rename_callees(module, libdevice_name)


def dedupe_device_declarations(module: Module, context: DeviceContext) -> Module:
    """Drop repeated declarations: an intrinsic and the libm call it became may now both be declared."""
    return drop_repeated_declarations(module)


#: The passes that retarget a portable module to NVPTX, in order.
NVPTX = Pipeline("nvptx", (
    Pass("refuse-host-only-calls", refuse_host_only_calls, "nothing: a check"),
    Pass("nvptx-target", nvptx_target, "target lines"),
    Pass("libdevice-calls", libdevice_calls, "callees"),
    Pass("dedupe-declarations", dedupe_device_declarations, "declarations"),
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
