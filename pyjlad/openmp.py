"""Where LLVM's OpenMP runtime is, for derivatives of Numba's parallel loops (:mod:`pyjlad.openmp_loops`).

Enzyme differentiates OpenMP parallel loops written against LLVM's runtime interface
(``__kmpc_fork_call``, ``__kmpc_for_static_init_8``). Numba's own OpenMP threading layer links GNU's
``libgomp``, which does not export those, so the derivative needs LLVM's ``libomp``: Debian's
``libomp5-15`` (installed by ``scripts/setup.sh``), found without configuration by
:func:`libomp_path` and loaded into the process, for the JIT to resolve, by :func:`load_libomp`.

Enzyme's atomic adds into adjoints whose alignment it does not know (the reverse of a copy, ``w.copy()``
in a ``prange`` body: ``atomicrmw fadd ... align 1``) are compiled into calls of GNU's ``libatomic``
(``__atomic_compare_exchange``); :func:`load_libatomic` loads it for the JIT (without it, the JIT
stopped the whole process: "Symbol not found").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

__all__ = ["CANDIDATES", "JIT_SYMBOLS", "libomp_path", "load_libatomic", "load_libomp"]

#: The runtime's functions a parallel derivative calls (the pass's and Enzyme's), bound to LLVM's library
#: explicitly: GNU's ``libgomp``, loaded by Numba's ``omp`` threading layer, exports the ``omp_*`` ones too,
#: and its ``omp_get_thread_num`` knows nothing of LLVM's threads (every thread would be thread 0).
JIT_SYMBOLS = (
    "__kmpc_fork_call", "__kmpc_for_static_init_8", "__kmpc_for_static_fini", "__kmpc_global_thread_num",
    "omp_get_thread_num", "omp_get_max_threads", "omp_get_num_threads", "omp_set_num_threads", "omp_in_parallel",
)

#: Where Debian's ``libomp5-15`` (first) and any ``libomp5`` put LLVM's OpenMP runtime.
CANDIDATES = (
    "/usr/lib/llvm-15/lib/libomp.so.5",
    "/usr/lib/x86_64-linux-gnu/libomp.so.5",
    "/usr/lib/aarch64-linux-gnu/libomp.so.5",
)


def libomp_path() -> str | None:
    """The path of LLVM's OpenMP runtime, or None if none is installed.

    Examples
    --------
    >>> path = libomp_path()
    >>> path is None or "libomp" in path
    True
    """
    return _installed(CANDIDATES, "omp")


def _installed(candidates: tuple[str, ...], name: str) -> str | None:
    """The first of ``candidates`` that exists, else where the system's loader finds ``lib<name>``, else None."""
    return next((p for p in candidates if os.path.exists(p)), None) or ctypes.util.find_library(name) or None


@functools.cache
def load_libomp() -> str | None:
    """Load LLVM's OpenMP runtime into the process for the JIT (once); its path, or None if it is missing.

    Examples
    --------
    >>> load_libomp() == load_libomp()
    True
    """
    path = libomp_path()
    if path is None:
        return None
    import llvmlite.binding as llvm

    # LLVM's runtime keeps idle workers spinning for 200 ms after each parallel loop, taking the cores
    # from Numba's own threads (GNU's runtime) and from the user's code; parked at once (0 ms), every
    # parallel loop waits for the kernel to wake them: a 2-thread gradient of an 8x8 heat step took 630 us
    # instead of 34 us, and Numba's own parallel loops, which run on this runtime once it is loaded first
    # (it exports GNU's entry points), 210 us instead of 7 us. So they spin 1 ms, unless the user chose
    # otherwise. Read when the runtime starts (its first parallel loop).
    os.environ.setdefault("KMP_BLOCKTIME", "1")
    if not _loaded_for_jit(path):
        return None
    library = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    for name in JIT_SYMBOLS:  # ahead of GNU's libgomp (Numba's "omp" threading layer) exporting the same omp_*
        llvm.add_symbol(name, ctypes.cast(getattr(library, name), ctypes.c_void_p).value)
    return path


#: Where Debian's ``libatomic1`` puts GNU's atomic-operations library.
LIBATOMIC_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libatomic.so.1",
    "/usr/lib/aarch64-linux-gnu/libatomic.so.1",
)


@functools.cache
def load_libatomic() -> str | None:
    """Load GNU's ``libatomic`` into the process for the JIT (once); its path, or None if it is missing.

    Examples
    --------
    >>> load_libatomic() == load_libatomic()
    True
    """
    path = _installed(LIBATOMIC_CANDIDATES, "atomic")
    return path if path is not None and _loaded_for_jit(path) else None


def _loaded_for_jit(path: str) -> bool:
    """Whether the library at ``path`` could be loaded into the process, where the JIT resolves symbols."""
    import llvmlite.binding as llvm

    try:
        llvm.load_library_permanently(path)
    except RuntimeError:
        return False
    return True
