"""The programs and files a GPU kernel is built with: LLVM 15's tools, CUDA's libdevice and ``ptxas``.

LLVM 15 is the LLVM Enzyme runs in (``opt-15``); its ``llvm-link``, ``opt`` and
``llc`` (the NVPTX backend) sit beside it. libdevice (``libdevice.10.bc``, CUDA's
math library as LLVM bitcode) comes from a CUDA toolkit or from the
``nvidia-cuda-nvcc`` wheels on PyPI; ``ptxas`` (used only to check PTX: the CUDA
driver compiles PTX itself when a kernel is loaded) likewise.

Looked up in this order: the CUDA toolkit of the ``ptxas`` on ``PATH``;
``/usr/local/cuda*``; the ``nvidia`` wheels' directories on ``sys.path``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from .. import config
from ..errors import EnzymeError, ToolchainError
from ..toolchain import locate

__all__ = ["llvm_tool", "run_tool", "libdevice_path", "ptxas_path", "disassemble"]


def llvm_tool(name: str) -> Path:
    """LLVM 15's ``name`` (``llc``, ``llvm-link``, ``llvm-dis``, ``opt``), beside the ``opt`` Enzyme runs in."""
    opt = locate().opt
    path = opt.with_name(opt.name.replace("opt", name)) if name != "opt" else opt
    if not path.exists():
        found = shutil.which(f"{name}-15")
        if found is None:
            raise ToolchainError(f"LLVM 15's {name} is not installed (looked for {path} and {name}-15 on PATH); "
                                 "on Debian: apt-get install llvm-15")
        path = Path(found)
    return path


def run_tool(command: list[str | Path], what: str, data: bytes | None = None) -> bytes:
    """Run one of the tools; its standard output, or an :class:`EnzymeError` with its diagnostics."""
    try:
        proc = subprocess.run([str(c) for c in command], input=data, capture_output=True,
                              timeout=config.opt_timeout_s())
    except subprocess.TimeoutExpired:
        raise EnzymeError(f"{Path(str(command[0])).name} did not finish {what} within "
                          f"{config.opt_timeout_s():.0f} s (raise PYJLAD_OPT_TIMEOUT to wait longer)") from None
    except OSError as exc:
        raise ToolchainError(f"cannot run {command[0]}: {exc}") from None
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace")
        how = f"crashed (signal {-proc.returncode})" if proc.returncode < 0 else f"failed (exit {proc.returncode})"
        raise EnzymeError(f"{Path(str(command[0])).name} {how} while {what}:\n{stderr[-2000:]}", diagnostics=stderr)
    return proc.stdout


def disassemble(bitcode: bytes, what: str) -> str:
    """LLVM 15 bitcode as IR text."""
    return run_tool([llvm_tool("llvm-dis"), "-", "-o", "-"], f"disassembling {what}", bitcode).decode()


def _cuda_roots() -> Iterator[Path]:
    on_path = shutil.which("ptxas")
    if on_path:
        yield Path(on_path).resolve().parent.parent
    yield Path("/usr/local/cuda")
    yield from sorted(Path("/usr/local").glob("cuda-*"), reverse=True)
    # The nvidia-cuda-nvcc wheels: nvidia/cuda_nvcc (CUDA 12) and nvidia/cu13 (CUDA 13) on sys.path.
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        if base.is_dir():
            yield from (base / sub for sub in ("cuda_nvcc", "cu13", "cu12"))


def libdevice_path() -> Path:
    """CUDA's ``libdevice.10.bc``.

    Raises
    ------
    ToolchainError
        If none is found, saying where it was looked for and how to get one.
    """
    for root in _cuda_roots():
        candidate = root / "nvvm" / "libdevice" / "libdevice.10.bc"
        if candidate.is_file():
            return candidate
    raise ToolchainError("CUDA's libdevice (libdevice.10.bc) was not found: install the CUDA toolkit (ptxas on "
                         "PATH, or under /usr/local/cuda), or pip install nvidia-cuda-nvcc-cu12")


def ptxas_path() -> Path | None:
    """NVIDIA's ``ptxas``, or ``None`` (it only checks PTX; the CUDA driver compiles PTX when loading it)."""
    found = shutil.which("ptxas")
    if found:
        return Path(found)
    for root in _cuda_roots():
        if (root / "bin" / "ptxas").is_file():
            return root / "bin" / "ptxas"
    return None
