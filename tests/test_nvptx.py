"""Retargeting to NVPTX (the Julia engine's CUDA.jl path), checked without a GPU.

The retargeted module, and Enzyme's derivative of it, must compile to PTX with
LLVM's NVPTX backend and assemble with NVIDIA's ``ptxas``, inside a kernel that
calls the derivative. No GPU is needed for that; running it needs CUDA.jl.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest
from numba import njit

import pyjlad
from pyjlad.engines.differentiate import PASSES
from pyjlad.engines.driver import ad_driver
from pyjlad.export import export, numba_argtypes
from pyjlad.targets.nvptx import NVPTX_TRIPLE, device_module
from pyjlad.toolchain import locate

_LIBDEVICE = next(iter(sorted(Path("/usr/local").glob("cuda*/nvvm/libdevice/libdevice.10.bc"))), None)
_TOOLS = {"llc-15": shutil.which("llc-15"), "llvm-link-15": shutil.which("llvm-link-15"), "ptxas": shutil.which("ptxas")}
_MISSING = [name for name, path in _TOOLS.items() if path is None] + ([] if _LIBDEVICE else ["libdevice.10.bc"])
needs_cuda_tools = pytest.mark.skipif(bool(_MISSING), reason=f"CUDA/NVPTX tools missing: {', '.join(_MISSING)}")


# (No tanh: this machine's libdevice, from CUDA 13, implements __nv_tanh with an NVVM
# intrinsic newer than the LLVM 15 used here to compile it; Julia's LLVM knows it.)
@njit
def per_sample(x, k):
    return math.sin(x) * math.exp(-k * x) + x ** 2.5 + math.log(1.0 + x * x) + math.sqrt(x) * math.atan(k)


def _kernel(driver_symbol: str) -> str:
    """A one-thread-per-sample kernel calling the reverse sweep: forces the derivative through codegen."""
    return "\n".join([
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "define void @pyjlad_test_kernel(ptr %xs, ptr %ks, ptr %dxs, ptr %dks) {",
        "entry:",
        "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "  %i = zext i32 %tid to i64",
        "  %xp = getelementptr double, ptr %xs, i64 %i",
        "  %kp = getelementptr double, ptr %ks, i64 %i",
        "  %x = load double, ptr %xp",
        "  %k = load double, ptr %kp",
        "  %value = alloca double",
        "  %dret = alloca double",
        "  store double 1.0, ptr %dret",
        "  %exc = alloca ptr",
        "  %dxp = getelementptr double, ptr %dxs, i64 %i",
        "  %dkp = getelementptr double, ptr %dks, i64 %i",
        f"  %s = call i32 @{driver_symbol}(ptr %value, ptr %dret, ptr %exc, ptr %dxp, ptr %dkp, double %x, double %k)",
        "  ret void",
        "}",
        "!nvvm.annotations = !{!0}",
        '!0 = !{ptr @pyjlad_test_kernel, !"kernel", i32 1}',
    ])


def _ptx(module: str, tmp: Path) -> str:
    (tmp / "m.ll").write_text(module)
    # Only the libdevice functions the module calls, as CUDA.jl links them.
    subprocess.run([_TOOLS["llvm-link-15"], str(tmp / "m.ll"), "--only-needed", str(_LIBDEVICE), "-o", str(tmp / "m.bc")],
                   check=True, capture_output=True)
    result = subprocess.run([_TOOLS["llc-15"], "-O2", "-march=nvptx64", "-mcpu=sm_80", str(tmp / "m.bc"),
                             "-o", str(tmp / "m.ptx")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    result = subprocess.run([_TOOLS["ptxas"], "-arch=sm_80", "-v", str(tmp / "m.ptx"), "-o", str(tmp / "m.cubin")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return (tmp / "m.ptx").read_text() + result.stderr


def test_device_module_is_retargeted() -> None:
    exported = export(per_sample, numba_argtypes((0.3, 1.2)))
    text = device_module(exported.module.text, exported.module.external_functions)
    assert f'target triple = "{NVPTX_TRIPLE}"' in text
    assert "@llvm.sin.f64" not in text and "@__nv_sin(" in text and "@__nv_exp(" in text
    assert "x86_64" not in text


@needs_cuda_tools
def test_retargeted_gradient_compiles_to_ptx_and_assembles(tmp_path: Path) -> None:
    exported = export(per_sample, numba_argtypes((0.3, 1.2)))
    device = device_module(exported.module.text, exported.module.external_functions)
    driver = ad_driver(exported.abi, "reverse", ("active", "active"), oom_guard=False)  # no setjmp on a GPU
    # Enzyme differentiates the device module (it knows libdevice's math functions)...
    differentiated = locate().run(driver.module(device), PASSES, what="per_sample", options=("-S",)).decode()
    # ...whose derivative calls (cos from sin) are mapped to libdevice again, then compiled in a kernel.
    kernel_module = device_module(differentiated) + "\n" + _kernel(driver.symbol) + "\n"
    report = _ptx(kernel_module, tmp_path)
    assert ".entry pyjlad_test_kernel" in report
    assert "Compiling entry function 'pyjlad_test_kernel' for 'sm_80'" in report


def test_host_only_functions_are_refused() -> None:
    import numpy as np

    exported = export(njit(lambda x: np.sum(np.sin(x) * x)), numba_argtypes((np.ones(3),)))
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="cannot run on a GPU"):
        device_module(exported.module.text, exported.module.external_functions, name="f")


def test_float_libm_names_are_device_functions() -> None:
    # erff is erf's float version, not "er" + "ff": it maps to libdevice's __nv_erff.
    text = "declare float @erff(float)\ndefine float @g(float %x) {\n  %y = call float @erff(float %x)\n  ret float %y\n}\n"
    out = device_module(text, ("erff",))
    assert "@__nv_erff(" in out and "@erff(" not in out
