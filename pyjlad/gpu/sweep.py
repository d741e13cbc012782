"""Enzyme's reverse sweep of one sample's function, differentiated for the GPU.

The function is exported for one sample's argument types
(:func:`pyjlad.export.export`), the module Enzyme differentiates is retargeted to
NVPTX (:func:`pyjlad.targets.nvptx.device_module`: libm calls become libdevice's
``__nv_*``, host-only calls are refused), the reverse driver is appended
(:func:`pyjlad.engines.driver.ad_driver`, without the out-of-memory guard:
there is no ``setjmp`` on a GPU) and ``opt-15`` with the Enzyme plugin runs it
(:func:`pyjlad.engines.differentiate.run_enzyme`, with its retries). The output,
kept on disk like the embedded engine's, is the one module both the kernel
(:mod:`pyjlad.gpu.ptx`) and its CPU check (:mod:`pyjlad.gpu.host`) are built from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from numba import types as nbtypes

from .. import cache
from ..activity import Activity
from ..engines.base import check_result, resolve_activities
from ..engines.differentiate import PASSES, _special_source_hash, enzyme_input_key, run_enzyme
from ..engines.driver import Driver, ad_driver
from ..export import ExportedFunction, export
from ..memo import cached_for
from ..objcheck import check_llvm_module
from ..portable import RUNTIME_CALL_DTOR
from ..sweep import Sweep
from ..targets.nvptx import device_module
from ..toolchain import locate
from .tools import disassemble

__all__ = ["DeviceSweep", "device_sweep"]

#: 2: blocks in dominance order before Enzyme (pyjlad.block_order); 3: scoped alias metadata (pyjlad.memory_scopes)
_FORMAT = "pyjlad-gpu-sweep/3"
#: Called only where Numba's reference counting releases an array (``NRT_decref`` when a count reaches
#: zero, :mod:`pyjlad.runtime`'s ``nrt.ll``). The kernel's arrays have no meminfo (null), for which
#: ``NRT_decref`` returns at once, so these calls are dead code once the kernel is optimized; they are
#: not refused here, and :mod:`pyjlad.gpu.ptx` refuses any call left after optimization.
_RELEASE_ONLY = frozenset({"free", RUNTIME_CALL_DTOR})


@dataclass(frozen=True)
class DeviceSweep:
    """Enzyme's reverse sweep of one function for one sample's argument types.

    Attributes
    ----------
    exported : ExportedFunction
        The function as exported (its ABI, its Numba dispatcher for re-raising).
    driver : Driver
        How to call the sweep (``driver.symbol``).
    activities : tuple of Activity
        Per argument.
    text : str
        Enzyme's output, LLVM 15 IR text for NVPTX; libm names Enzyme added for
        derivatives (``cosh`` of ``tanh``) are still libm's.
    """

    exported: ExportedFunction
    driver: Driver
    activities: tuple[Activity, ...]
    text: str


def _activities(wrt: tuple[int, ...], nargs: int) -> tuple[Activity, ...]:
    return tuple(Activity.DIFF if k in wrt else Activity.CONST for k in range(nargs))


def _build(func: Any, argtypes: tuple[nbtypes.Type, ...], wrt: tuple[int, ...], mode: str = "reverse") -> DeviceSweep:
    exported = export(func, argtypes)
    sweep = Sweep("ad", mode, _activities(wrt, len(argtypes)), scalar_result=True)
    activities = resolve_activities(exported, sweep)
    check_result(exported, sweep)
    enzyme_input = exported.enzyme_module
    external = tuple(f for f in enzyme_input.external_functions if f not in _RELEASE_ONLY)
    device = device_module(enzyme_input.text, external, name=exported.name,
                           label=exported.abi.entry)
    driver = ad_driver(exported.abi, mode, activities, oom_guard=False, salt=exported.module.text)
    toolchain = locate()
    key = cache.cache_key(_FORMAT, PASSES, enzyme_input_key(), _special_source_hash(), toolchain.identity,
                          exported.module.text, driver.text)
    bitcode = cache.get_or_build(key, lambda: run_enzyme(exported, driver.module(device)),
                                 check=check_llvm_module)
    return DeviceSweep(exported, driver, activities, disassemble(bitcode, f"the derivative of {exported.name}"))


def device_sweep(func: Any, argtypes: tuple[nbtypes.Type, ...], wrt: tuple[int, ...],
                 mode: str = "reverse") -> DeviceSweep:
    """The :class:`DeviceSweep` of ``func`` for one sample's ``argtypes``, differentiated with respect to ``wrt``
    (remembered per function, types, ``wrt`` and ``mode``; Enzyme's output also on disk).

    ``mode`` is ``"reverse"`` (adjoints; the batched kernels and :func:`pyjlad.gpu.device_grad`) or
    ``"forward"`` (tangents; :func:`pyjlad.gpu.device_jvp`).

    Raises
    ------
    UnsupportedFunctionError
        The function calls something with no device counterpart (Numba's
        allocating runtime, BLAS, LAPACK, custom rules, printing), ``wrt``
        names an integer argument, or the result is not a real number.
    EnzymeError
        Enzyme failed (with its diagnostics).
    """
    key = ("gpu-sweep", argtypes, wrt) if mode == "reverse" else ("gpu-sweep", argtypes, wrt, mode)
    return cached_for(func, key, lambda: _build(func, argtypes, wrt, mode))
