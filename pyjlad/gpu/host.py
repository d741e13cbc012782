"""The kernel's body compiled for the CPU: the executable check of the generated code without a GPU.

The same Enzyme output the kernel is built from (:class:`~pyjlad.gpu.sweep.DeviceSweep`)
gets the host's target lines and libm's names back for libdevice's
(``__nv_tanh`` -> ``tanh``), and the same body
(:func:`pyjlad.gpu.kernel_ir.body_module`) runs in a plain loop over the
samples (:func:`pyjlad.gpu.kernel_ir.host_loop_module`). The module is compiled
as the embedded engine compiles its derivatives (Numba's pipeline in a child
process, :func:`pyjlad.engines.objects.load_library`) and called through
``ctypes`` with the addresses of NumPy arrays laid out as the kernel's are.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from .. import cache
from ..ir import Line, Module
from ..ir import parse as parse_module
from ..ir.edit import drop_repeated_declarations, rename_callees
from ..toolchain import locate
from .kernel_ir import KernelNames, host_loop_module, loop_params
from .layout import Slot
from .sweep import DeviceSweep

__all__ = ["HostLoop", "host_loop", "libm_name"]

_FORMAT = "pyjlad-gpu-host-loop/1"
_CTYPES = {"ptr": ctypes.c_void_p, "double": ctypes.c_double, "float": ctypes.c_float, "i64": ctypes.c_int64,
           "i32": ctypes.c_int32, "i8": ctypes.c_int8}
#: libdevice functions that came from LLVM intrinsics with no libm function (see pyjlad.targets.nvptx).
_INTRINSICS = {"__nv_powi": "llvm.powi.f64.i32", "__nv_powif": "llvm.powi.f32.i32"}


def libm_name(name: str) -> str | None:
    """The CPU function for libdevice's ``name`` (``__nv_tanh`` -> ``tanh``), or ``None`` for any other name.

    Examples
    --------
    >>> libm_name("__nv_tanh"), libm_name("__nv_erff"), libm_name("__nv_powi"), libm_name("cosh")
    ('tanh', 'erff', 'llvm.powi.f64.i32', None)
    """
    if not name.startswith("__nv_"):
        return None
    return _INTRINSICS.get(name, name[len("__nv_"):])


def _target_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("target datalayout", "target triple"))]


def host_module(text: str, target_lines: list[str]) -> str:
    """``text`` (Enzyme's output for NVPTX) for the CPU: ``target_lines`` and libm's names."""
    module: Module = parse_module(text)
    lines = {line.split()[1]: line for line in target_lines}
    for item in module.items:
        if isinstance(item, Line) and item.kind in ("datalayout", "triple") and item.kind in lines:
            item.text = lines[item.kind]
    return drop_repeated_declarations(rename_callees(module, libm_name)).render()


class HostLoop:
    """The CPU-compiled loop over the samples; call it with ``n`` and the loop's parameters (see
    :func:`pyjlad.gpu.kernel_ir.loop_params`): addresses for pointers, numbers for values."""

    def __init__(self, library: Any, names: KernelNames, types: Sequence[str]) -> None:
        self._library = library  # keeps the machine code alive
        prototype = ctypes.CFUNCTYPE(None, ctypes.c_int64, *(_CTYPES[t] for t in types))
        self._function = prototype(library.get_pointer_to_function(names.host))
        self._types = tuple(types)

    def __call__(self, n: int, values: Sequence[Any]) -> None:
        self._function(n, *(_CTYPES[t](v) for t, v in zip(self._types, values)))


def host_loop(sweep: DeviceSweep, slots: tuple[Slot, ...], wrt: tuple[int, ...], names: KernelNames) -> HostLoop:
    """Compile the CPU loop over the samples of ``sweep`` for the layout ``slots``.

    Raises
    ------
    EnzymeError
        LLVM failed on the module (in a child process; with its diagnostics).
    """
    from ..engines.objects import load_library  # the embedded engine's loader (registers its runtime symbols)

    abi = sweep.exported.abi
    targets = _target_lines(sweep.exported.enzyme_module.text)
    derivative = host_module(sweep.text, targets)
    loop = host_loop_module(abi, sweep.driver, slots, wrt, names, targets)
    key = cache.cache_key(_FORMAT, derivative, loop)
    library = load_library(key, lambda: locate().link([derivative, loop], what=sweep.exported.name),
                           names.host, f"the CPU loop of the batched gradient of {sweep.exported.name}")
    return HostLoop(library, names, [t for t, _ in loop_params(slots, abi, wrt)])
