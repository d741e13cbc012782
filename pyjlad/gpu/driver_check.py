"""Is there a CUDA driver and a GPU? Asked of the driver itself (``libcuda``), with no CUDA package.

:func:`cuda_status` loads the driver library with :mod:`ctypes` and calls
``cuInit`` and ``cuDeviceGetCount``: the GPU tests skip with its reason, and
the launcher reports it before importing any CUDA package.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["cuda_status"]

_LIBRARIES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")


def _load_driver() -> ctypes.CDLL | None:
    for name in (*_LIBRARIES, ctypes.util.find_library("cuda")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.cache
def cuda_status() -> tuple[bool, str]:
    """``(True, description)`` when the CUDA driver loads and sees a GPU, else ``(False, the reason)``."""
    driver = _load_driver()
    if driver is None:
        return False, "no CUDA driver: libcuda.so.1 cannot be loaded (no NVIDIA driver installed)"
    status = driver.cuInit(0)
    if status != 0:
        return False, f"the CUDA driver does not start: cuInit returned error {status} (no usable GPU?)"
    count = ctypes.c_int(0)
    status = driver.cuDeviceGetCount(ctypes.byref(count))
    if status != 0 or count.value == 0:
        return False, f"no CUDA device: cuDeviceGetCount gave {count.value} (error {status})"
    version = ctypes.c_int(0)
    driver.cuDriverGetVersion(ctypes.byref(version))
    return True, f"{count.value} CUDA device(s), driver API {version.value // 1000}.{version.value % 1000 // 10}"
