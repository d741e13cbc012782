"""One line describing the machine a benchmark ran on, for the headers of RESULTS.md's sections.

The sessions that measure these benchmarks run on machines of one kind but not one model:
``platform.processor()`` says only ``x86_64`` and ``/proc/cpuinfo``'s model name can be a bare
"Intel(R) Xeon(R) Processor", while the figures depend on the CPU's model and its vector
extensions (the derivatives are optimized for the CPU they run on; NumPy and JAX pick kernels
by it). So the line names the model name, family and model numbers, and the widest vector
extension.

>>> describe().count(",") >= 2
True
"""

from __future__ import annotations

import os
import platform


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def _vector_extension(flags: set[str]) -> str:
    for flag, name in (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"), ("asimd", "NEON")):
        if flag in flags:
            return name
    return "no AVX"


def describe() -> str:
    """``"x86_64, 2 logical CPUs, <model name> (family F, model M), AVX-512"`` for this machine."""
    info = _cpuinfo()
    parts = [platform.machine(), f"{os.cpu_count()} logical CPUs"]
    if "model name" in info:
        numbers = f" (family {info['cpu family']}, model {info['model']})" if "cpu family" in info else ""
        parts.append(info["model name"] + numbers)
    if "flags" in info or "Features" in info:
        parts.append(_vector_extension(set((info.get("flags") or info.get("Features", "")).split())))
    return ", ".join(parts)


if __name__ == "__main__":
    print(describe())
