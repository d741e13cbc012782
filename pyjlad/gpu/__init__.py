"""Per-sample gradients on NVIDIA GPUs: a generated CUDA kernel around Enzyme's reverse sweep.

>>> import pyjlad.gpu  # needs no CUDA package: cuda-core is imported when a kernel is launched
>>> sorted(n for n in pyjlad.gpu.__all__)
['BatchedGradient', 'DeviceArray', 'DeviceDerivative', 'cuda_status', 'device_grad', 'device_jvp', 'vmap_grad', 'vmap_value_and_grad']

The parts, one job each: :mod:`.layout` (where a batch's arguments lie),
:mod:`.sweep` (Enzyme's sweep of the NVPTX module), :mod:`.kernel_ir` (the
generated per-sample body, kernel and CPU loop), :mod:`.ptx` (LLVM 15 to PTX,
libdevice linked), :mod:`.host` (the same body compiled for the CPU),
:mod:`.launch` (cuda-core), :mod:`.driver_check` (is there a GPU),
:mod:`.batched` (the public callables), :mod:`.device_fns` (derivatives of
device functions as device functions for ``@cuda.jit`` kernels), :mod:`.tools`
(the programs used).
"""

from __future__ import annotations

from typing import Any

from .batched import BatchedGradient, vmap_grad, vmap_value_and_grad
from .device_fns import DeviceDerivative, device_grad, device_jvp
from .driver_check import cuda_status

__all__ = ["BatchedGradient", "DeviceArray", "DeviceDerivative", "cuda_status", "device_grad", "device_jvp",
           "vmap_grad", "vmap_value_and_grad"]


def __getattr__(name: str) -> Any:
    if name == "DeviceArray":  # defined beside the launcher; importing it imports no CUDA package
        from .launch import DeviceArray

        return DeviceArray
    raise AttributeError(f"module 'pyjlad.gpu' has no attribute {name!r}")
