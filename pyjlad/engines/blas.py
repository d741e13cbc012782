"""BLAS for differentiated code: resolves the CBLAS calls Enzyme's rules emit.

The portable module computes ``np.dot`` and ``@`` with CBLAS calls
(:mod:`pyjlad.portable`), and Enzyme's derivatives of those are CBLAS calls
again (``cblas_dgemm``, ``cblas_daxpy``, ``cblas_dger``...), plus one that no
CBLAS library exports: ``cblas_dlascl`` (LAPACK's ``dlascl`` with a layout
argument), provided here as a small shim over LAPACK.

All of them resolve to the OpenBLAS that SciPy's wheel bundles (its symbols
carry a ``scipy_`` prefix), the same library Numba's own ``np.dot`` reaches
through ``scipy.linalg.cython_blas``, so gradients of matrix code run at BLAS
speed in the process's existing BLAS.
"""

from __future__ import annotations

import ctypes
import re
import threading
from pathlib import Path

import llvmlite.binding as llvm

from .. import runtime
from ..errors import ToolchainError

__all__ = ["resolve_blas_symbols", "BLAS_NAME"]

BLAS_NAME = re.compile(r"^(cblas_[sd][a-z0-9]+|[sd][a-z0-9]+_)$")



def _shim_ir() -> str:
    """``cblas_dlascl`` and ``cblas_slascl`` over LAPACK's ``?lascl_`` (pyjlad/runtime/lascl.ll)."""
    return runtime.source("lascl.ll")


_lock = threading.Lock()
_state: dict[str, object] = {}


def _openblas() -> ctypes.CDLL:
    lib = _state.get("openblas")
    if lib is None:
        try:
            import scipy  # noqa: F401
            import scipy.linalg.cython_blas  # noqa: F401  (loads the library)
        except ImportError as exc:
            raise ToolchainError(
                "differentiating np.dot / @ needs SciPy (Numba's own linear algebra uses it): "
                "pip install scipy"
            ) from exc
        libs = sorted((Path(scipy.__file__).parent.parent / "scipy.libs").glob("libscipy_openblas*.so*"))
        if not libs:
            raise ToolchainError(
                "SciPy's bundled OpenBLAS (scipy.libs/libscipy_openblas*.so) was not found; "
                "install SciPy from its PyPI wheel"
            )
        lib = _state["openblas"] = ctypes.CDLL(str(libs[0]))
    return lib  # type: ignore[return-value]


def _address(lib: ctypes.CDLL, name: str) -> int | None:
    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _install_shims(lib: ctypes.CDLL) -> None:
    from numba.core.registry import cpu_target

    for p in "ds":
        address = _address(lib, f"scipy_{p}lascl_")
        if address is None:
            raise ToolchainError(f"SciPy's OpenBLAS does not export {p}lascl_")
        llvm.add_symbol(f"pyjlad_lapack_{p}lascl_", address)
    library = cpu_target.target_context.codegen().create_library("pyjlad_blas_shims")
    module = llvm.parse_assembly(_shim_ir())
    library.add_llvm_module(module)
    library.finalize()
    for p in "ds":
        llvm.add_symbol(f"cblas_{p}lascl", library.get_pointer_to_function(f"cblas_{p}lascl"))
    _state["shims"] = library  # keep the compiled code alive


def resolve_blas_symbols(names: list[str]) -> None:
    """Make the BLAS functions among ``names`` resolvable by the JIT.

    Raises
    ------
    ToolchainError
        If a BLAS function is needed and SciPy's OpenBLAS cannot provide it.
    """
    wanted = [n for n in names if BLAS_NAME.match(n)]
    if not wanted:
        return
    with _lock:
        lib = _openblas()
        if "shims" not in _state:
            _install_shims(lib)
        resolved = _state.setdefault("resolved", set())
        for name in wanted:
            if name in resolved or name in ("cblas_dlascl", "cblas_slascl"):
                continue
            address = _address(lib, "scipy_" + name)
            if address is None:
                raise ToolchainError(f"the gradient calls {name}, which SciPy's OpenBLAS does not export")
            llvm.add_symbol(name, address)
            resolved.add(name)  # type: ignore[union-attr]
