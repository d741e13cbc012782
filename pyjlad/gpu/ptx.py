"""The kernel as PTX: Enzyme's output, the generated kernel and libdevice, through LLVM 15's NVPTX backend.

1. Enzyme's output gets libdevice's names for the libm functions its
   derivatives call (``cosh`` for ``tanh``'s derivative becomes ``__nv_cosh``);
2. ``llvm-link`` joins it with the kernel (:func:`pyjlad.gpu.kernel_ir.kernel_module`),
   and then with the libdevice functions it calls (``--only-needed``);
3. ``opt -O3`` for the target, everything but the kernel internal: the driver,
   Numba's function and the body inline into the kernel, and the per-sample
   arrays, whose shapes are constants, become registers;
4. anything still called that has no definition on the device is refused;
5. ``llc`` writes PTX for ``sm_80`` (the default) or ``sm_86``, the newest
   LLVM 15 knows; the CUDA driver compiles it for the GPU it runs on (sm_90 for H100).

:func:`ptxas_report` assembles the PTX with NVIDIA's ``ptxas -v`` (registers,
stack frame, spills): a check, not a step of the launch.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnzymeError, ToolchainError, UnsupportedFunctionError
from ..ir import parse as parse_module
from ..targets.nvptx import device_module
from .kernel_ir import DEVICE_ALLOCATOR, KernelNames, kernel_module
from .layout import Slot
from .sweep import DeviceSweep
from .tools import disassemble, libdevice_path, llvm_tool, ptxas_path, run_tool

__all__ = ["KernelPTX", "kernel_ptx", "device_function_ptx", "ptxas_report", "ARCHES"]

#: The GPU architectures LLVM 15's NVPTX backend can target that pyjlad builds for (Ampere).
ARCHES = ("sm_80", "sm_86")
#: Functions a kernel may call without a definition: CUDA's device-side allocator and printf.
_DEVICE_RUNTIME = {"malloc", "free", "vprintf"}


@dataclass(frozen=True)
class KernelPTX:
    """A kernel's PTX and its entry's name."""

    ptx: str
    kernel: str
    arch: str


def _declared(text: str) -> set[str]:
    """The functions ``text`` declares without defining."""
    return {function.name for function in parse_module(text, strict=False).declarations}


def _refuse_host_calls(text: str, name: str) -> None:
    missing = sorted(f for f in _declared(text) if not f.startswith("llvm.") and f not in _DEVICE_RUNTIME)
    if missing:
        raise UnsupportedFunctionError(
            f"the derivative of {name} calls {', '.join(missing)}, which has no definition on a GPU "
            "(not in libdevice): the device target takes per-sample functions of numbers and small arrays")


def _optimized(files: list[Path], names: KernelNames, arch: str, tmp: Path, what: str) -> bytes:
    """The linked, optimized kernel module (bitcode)."""
    link = llvm_tool("llvm-link")
    run_tool([link, *files, "-o", tmp / "linked.bc"], f"linking {what}")
    run_tool([link, tmp / "linked.bc", "--only-needed", libdevice_path(), "-o", tmp / "libdevice.bc"],
             f"linking libdevice into {what}")
    return run_tool([llvm_tool("opt"), "-mtriple=nvptx64-nvidia-cuda", f"-mcpu={arch}",
                     "-passes=internalize,default<O3>", f"-internalize-public-api-list={names.kernel}",
                     tmp / "libdevice.bc", "-o", "-"], f"optimizing {what}")


def kernel_ptx(sweep: DeviceSweep, slots: tuple[Slot, ...], wrt: tuple[int, ...], names: KernelNames,
               arch: str = "sm_80") -> KernelPTX:
    """The PTX of the batched kernel of ``sweep`` for the layout ``slots``.

    Raises
    ------
    UnsupportedFunctionError
        The derivative calls a function with no device definition.
    ToolchainError
        An unknown ``arch``, or libdevice or an LLVM 15 tool missing.
    EnzymeError
        LLVM failed (with its diagnostics).
    """
    if arch not in ARCHES:
        raise ToolchainError(f"arch={arch!r}: LLVM 15's NVPTX backend builds for {', '.join(ARCHES)} (the "
                             "CUDA driver compiles their PTX for newer GPUs)")
    what = f"the batched kernel of {sweep.exported.name}"
    derivative = device_module(sweep.text, label=sweep.exported.abi.entry)
    with tempfile.TemporaryDirectory(prefix="pyjlad-gpu-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "derivative.ll").write_text(derivative)
        (tmp / "kernel.ll").write_text(kernel_module(sweep.exported.abi, sweep.driver, slots, wrt, names))
        files = [tmp / "derivative.ll", tmp / "kernel.ll"]
        if "pyjlad_zeroed" in _declared(derivative):
            (tmp / "allocator.ll").write_text(DEVICE_ALLOCATOR)
            files.append(tmp / "allocator.ll")
        optimized = _optimized(files, names, arch, tmp, what)
        _refuse_host_calls(disassemble(optimized, what), sweep.exported.name)
        ptx = run_tool([llvm_tool("llc"), "-O3", f"-mcpu={arch}", "-", "-o", "-"], f"compiling {what} to PTX",
                       optimized).decode()
    return KernelPTX(ptx, names.kernel, arch)


def device_function_ptx(sweep: DeviceSweep, wrapper: str, symbol: str, arch: str = "sm_80") -> str:
    """The PTX of a derivative as a device function: ``wrapper`` (an NVPTX module defining ``symbol``, see
    :mod:`pyjlad.gpu.device_fns`) linked with Enzyme's output and libdevice, optimized with everything but
    ``symbol`` internal, compiled by ``llc`` (a ``.visible .func``, no kernel).

    Raises
    ------
    UnsupportedFunctionError, ToolchainError, EnzymeError
        As :func:`kernel_ptx`.
    """
    if arch not in ARCHES:
        raise ToolchainError(f"arch={arch!r}: LLVM 15's NVPTX backend builds for {', '.join(ARCHES)} (the "
                             "CUDA driver compiles their PTX for newer GPUs)")
    what = f"the device derivative of {sweep.exported.name}"
    derivative = device_module(sweep.text, label=sweep.exported.abi.entry)
    with tempfile.TemporaryDirectory(prefix="pyjlad-gpu-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "derivative.ll").write_text(derivative)
        (tmp / "wrapper.ll").write_text(wrapper)
        files = [tmp / "derivative.ll", tmp / "wrapper.ll"]
        if "pyjlad_zeroed" in _declared(derivative):
            (tmp / "allocator.ll").write_text(DEVICE_ALLOCATOR)
            files.append(tmp / "allocator.ll")
        optimized = _optimized(files, KernelNames(symbol, symbol, symbol), arch, tmp, what)
        _refuse_host_calls(disassemble(optimized, what), sweep.exported.name)
        return run_tool([llvm_tool("llc"), "-O3", f"-mcpu={arch}", "-", "-o", "-"], f"compiling {what} to PTX",
                        optimized).decode()


def ptxas_report(ptx: str, arch: str) -> str:
    """``ptxas -v``'s report of assembling ``ptx`` for ``arch`` (``sm_80``, ``sm_90``...).

    Raises
    ------
    ToolchainError
        No ``ptxas`` found.
    EnzymeError
        ``ptxas`` rejected the PTX (its message).
    """
    ptxas = ptxas_path()
    if ptxas is None:
        raise ToolchainError("NVIDIA's ptxas was not found: install the CUDA toolkit (ptxas on PATH) or "
                             "pip install nvidia-cuda-nvcc-cu12")
    with tempfile.TemporaryDirectory(prefix="pyjlad-ptxas-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "k.ptx").write_text(ptx)
        proc = subprocess.run([str(ptxas), f"-arch={arch}", "-v", str(tmp / "k.ptx"), "-o", str(tmp / "k.cubin")],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise EnzymeError(f"ptxas rejected the PTX for {arch}:\n{proc.stderr[-2000:]}", diagnostics=proc.stderr)
    return proc.stderr + proc.stdout
