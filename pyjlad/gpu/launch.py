"""Loading and launching a kernel's PTX with ``cuda-core`` (NVIDIA's ``cuda.core``), imported on first use.

:class:`CudaRunner` holds the current device and a stream of its own; it
loads PTX (the driver compiles it for the GPU), allocates device memory,
copies NumPy arrays to and from the device (``cuda.bindings``' ``cuMemcpy``)
and launches a kernel with one thread per sample (blocks of
:data:`THREADS_PER_BLOCK`, at most :data:`BLOCKS_PER_SM` blocks per
multiprocessor; the kernel's grid-stride loop covers the rest).

Run on an NVIDIA H200 with cuda-core 1.2.0 (``tests/test_gpu_run.py``, through
``tools/gpu_check/``); on machines without a GPU only the driver check runs.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..errors import EngineUnavailableError, MissingDependencyError
from .driver_check import cuda_status

__all__ = ["CudaRunner", "runner", "DeviceArray", "THREADS_PER_BLOCK", "BLOCKS_PER_SM"]

THREADS_PER_BLOCK = 128
BLOCKS_PER_SM = 32
#: CUDA's device heap (``malloc`` in kernels), for kernels whose derivative keeps a tape there (Enzyme caches
#: the values of loops with a data-dependent trip count): raised from CUDA's 8 MiB default before such a
#: kernel is first loaded (the driver allows it only before a kernel using ``malloc`` has run).
DEVICE_HEAP_BYTES = 512 << 20


def _cuda_core() -> tuple[Any, Any]:
    """``cuda.core`` and ``cuda.bindings.driver``, or a clear error."""
    try:
        import cuda.core as core
        from cuda.bindings import driver
    except ImportError as exc:
        raise MissingDependencyError(
            f"pyjlad.gpu launches kernels with cuda-core: pip install 'cuda-core[cu12]' (or [cu13]) ({exc})"
        ) from None
    return core, driver


def _check(result: Any, what: str) -> Any:
    """The values after a ``cuda.bindings`` call's status, or an EngineUnavailableError (a RuntimeError) naming it."""
    status, *rest = result if isinstance(result, tuple) else (result,)
    if int(status) != 0:
        raise EngineUnavailableError(f"CUDA {what} failed: {status!r}")
    return rest[0] if len(rest) == 1 else rest


class DeviceArray:
    """A result in device memory: any ``__cuda_array_interface__`` consumer takes it without a copy
    (``cupy.asarray``, ``torch.as_tensor(..., device="cuda")``, ``numba.cuda.as_cuda_array``).

    Attributes
    ----------
    shape : tuple of int
    dtype : numpy.dtype
    """

    def __init__(self, buffer: Any, shape: tuple[int, ...], dtype: np.dtype, owner: CudaRunner) -> None:
        self._buffer = buffer  # owns the memory
        self._owner = owner
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)

    @property
    def address(self) -> int:
        return int(self._buffer.handle)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.address, False), "version": 3,
                "strides": None, "stream": None}

    def copy_to_host(self) -> np.ndarray:
        """The contents as a new NumPy array."""
        out = np.empty(self.shape, self.dtype)
        self._owner.copy_to_host(out, self.address)
        return out

    def __repr__(self) -> str:
        return f"<pyjlad.gpu.DeviceArray shape={self.shape} dtype={self.dtype}>"


class CudaRunner:
    """The current CUDA device, a stream, and the kernels loaded on it."""

    def __init__(self) -> None:
        ok, reason = cuda_status()
        if not ok:
            raise EngineUnavailableError(f"pyjlad.gpu needs an NVIDIA GPU: {reason}")
        core, driver = _cuda_core()
        self._core, self._driver = core, driver
        self.device = core.Device()
        self.device.set_current()
        self.stream = self.device.create_stream()
        self.compute_capability = tuple(self.device.compute_capability)
        self._kernels: dict[tuple[str, str], Any] = {}
        self._heap_set = False

    @property
    def arch(self) -> str:
        """The PTX target for this GPU: sm_86 for Ampere's 8.6-8.9, else sm_80 (the driver JIT-compiles it)."""
        major, minor = self.compute_capability[:2]
        if major < 8:
            raise EngineUnavailableError(f"pyjlad.gpu builds PTX for sm_80 and newer; this GPU is sm_{major}{minor}")
        return "sm_86" if major == 8 and minor >= 6 else "sm_80"

    def kernel(self, ptx: str, name: str) -> Any:
        """The kernel ``name`` of ``ptx``, loaded once."""
        key = (ptx, name)
        if key not in self._kernels:
            if "malloc" in ptx and not self._heap_set:
                limit = self._driver.CUlimit.CU_LIMIT_MALLOC_HEAP_SIZE
                _check(self._driver.cuCtxSetLimit(limit, DEVICE_HEAP_BYTES), "setting the device heap size")
                self._heap_set = True
            code = self._core.ObjectCode.from_ptx(ptx.encode(), name=name)
            self._kernels[key] = code.get_kernel(name)
        return self._kernels[key]

    def allocate(self, shape: tuple[int, ...], dtype: Any) -> DeviceArray:
        """A new device array (uninitialized)."""
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)
        return DeviceArray(self.device.allocate(nbytes, stream=self.stream), shape, dtype, self)

    def to_device(self, array: np.ndarray) -> DeviceArray:
        """A device copy of ``array`` (C order)."""
        array = np.ascontiguousarray(array)
        out = self.allocate(array.shape, array.dtype)
        self.stream.sync()  # the allocation is ordered on the stream; the copy below is synchronous
        if array.nbytes:
            _check(self._driver.cuMemcpyHtoD(out.address, array.ctypes.data, array.nbytes), "copy to the device")
        return out

    def copy_to_host(self, out: np.ndarray, address: int) -> None:
        """Copy ``out.nbytes`` bytes at device ``address`` into the C-contiguous ``out``."""
        self.stream.sync()
        if out.nbytes:
            _check(self._driver.cuMemcpyDtoH(out.ctypes.data, address, out.nbytes), "copy to the host")

    def wait_for(self, interface: dict[str, Any]) -> None:
        """Wait for the stream an input's ``__cuda_array_interface__`` names (its producer's work)."""
        stream = interface.get("stream")
        if stream is not None:
            _check(self._driver.cuStreamSynchronize(self._driver.CUstream(int(stream))), "stream synchronize")

    def launch(self, kernel: Any, n: int, params: list[Any]) -> None:
        """Launch ``kernel(n, *params)`` over ``n`` samples and wait for it.

        ``params`` are addresses (Python ints, passed as pointers) and NumPy
        scalars (passed by value with their type).
        """
        sms = self.device.properties.multiprocessor_count
        blocks = max(1, min(-(-n // THREADS_PER_BLOCK), sms * BLOCKS_PER_SM))
        config = self._core.LaunchConfig(grid=blocks, block=THREADS_PER_BLOCK)
        self._core.launch(self.stream, config, kernel, np.int64(n), *params)
        self.stream.sync()


@functools.cache
def runner() -> CudaRunner:
    """The process's :class:`CudaRunner` (made on first use)."""
    return CudaRunner()
