"""The Julia engine: Enzyme.jl differentiates the exported IR through ``Base.llvmcall``.

Python exports the portable module and its ABI (:mod:`pyjlad.export`), turns it
into the exact text ``llvmcall`` receives (:func:`llvmcall_module`), and calls the
bundled Julia package ``PyJlad`` (``julia_project/``) through juliacall. Arrays
cross without copies: Julia wraps the NumPy buffers by address
(:func:`array_spec`). The sweep contract is the embedded engine's, so every
transform (``gradient``, ``jvp``, ``vjp``, ``jacobian``, ``autodiff``) works on
either engine.

No Julia can be installed on pyjlad's build machines: there this engine reports
itself unavailable, with the reason, and its tests skip. Everything on the
Python side of the boundary is tested for real.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ..abi import ArrayArg, FunctionABI
from ..errors import EngineUnavailableError, UnsupportedFunctionError
from ..export import ExportedFunction, export, numba_argtypes
from ..memo import cached_for
from ..portable import RUNTIME_CALL_DTOR
from ..rules import is_rule_symbol
from ..toolchain import locate
from .embedded import Sweep, linked_modules, reraise_from_function, resolve_activities

__all__ = ["JuliaEngine", "llvmcall_module", "julia_module_text", "array_spec", "julia_status", "JULIA_PROJECT"]

NAME = "julia"
#: The bundled Julia package.
JULIA_PROJECT = Path(__file__).resolve().parents[2] / "julia_project"

_HOOK_DECLARATION = re.compile(r"^declare void @" + RUNTIME_CALL_DTOR + r"\(ptr\)[^\n]*$", re.MULTILINE)


def llvmcall_module(portable_text: str) -> str:
    """The module text handed to Julia's ``Base.llvmcall``.

    Target lines are removed (Julia sets its own), and the hook to Numba's
    runtime destructor is defined as ``free``: called from Julia, no MemInfo
    with a Numba-runtime destructor can reach it.
    """
    lines = [ln for ln in portable_text.splitlines() if not ln.startswith(("target datalayout", "target triple"))]
    text = "\n".join(lines) + "\n"
    definition = (f"define internal void @{RUNTIME_CALL_DTOR}(ptr %mi) {{\n"
                  "  call void @free(ptr %mi)\n  ret void\n}")
    text, count = _HOOK_DECLARATION.subn(definition, text)
    if count and "declare void @free(ptr)" not in text:
        text += "declare void @free(ptr)\n"
    return text


def array_spec(x: np.ndarray) -> tuple[int, int, str, int, tuple[int, ...], tuple[int, ...]]:
    """How Julia wraps ``x`` without copying: ``(address, length, dtype, offset, shape, strides)``.

    ``address`` is the lowest byte ``x`` touches, ``length`` the number of
    elements from there to the highest, ``offset`` the index of ``x``'s first
    element in that span, and ``strides`` are in elements.

    Raises
    ------
    ValueError
        If a stride is not a whole number of elements.
    """
    itemsize = x.itemsize
    if any(s % itemsize for s in x.strides):
        raise ValueError("array strides must be multiples of the element size to cross to Julia")
    low = sum(min(0, (n - 1) * s) for n, s in zip(x.shape, x.strides)) if x.size else 0
    high = sum(max(0, (n - 1) * s) for n, s in zip(x.shape, x.strides)) if x.size else 0
    address = x.ctypes.data + low
    return (address, (high - low) // itemsize + 1, str(x.dtype), -low // itemsize,
            tuple(int(n) for n in x.shape), tuple(s // itemsize for s in x.strides))


def _julia_executable() -> str | None:
    for candidate in (os.environ.get("PYTHON_JULIAPKG_EXE"), os.environ.get("JULIA"), shutil.which("julia")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def julia_status() -> tuple[bool, str]:
    """Whether the Julia engine can run here, with the reason and the fix if not.

    Importing juliacall installs Julia when none is found, which needs internet
    access; pyjlad only imports it when a Julia executable exists, or when
    ``PYJLAD_JULIA_ALLOW_INSTALL=1`` allows that download.
    """
    if importlib.util.find_spec("juliacall") is None:
        return False, "juliacall is not installed (fix: pip install juliacall; it brings Julia and Enzyme.jl)"
    exe = _julia_executable()
    if exe is None and os.environ.get("PYJLAD_JULIA_ALLOW_INSTALL") != "1":
        return False, ("no Julia executable found (fix: install Julia 1.11+ and put `julia` on PATH, or set "
                       "PYJLAD_JULIA_ALLOW_INSTALL=1 to let juliacall download it)")
    return True, f"juliacall with {exe or 'a Julia juliacall installs'}; Julia project {JULIA_PROJECT}"


_lock = threading.Lock()
_module: dict[str, Any] = {}


def _pyjlad_julia() -> Any:
    """The ``PyJlad`` Julia module, loaded through juliacall once."""
    ok, detail = julia_status()
    if not ok:
        raise EngineUnavailableError(f"the Julia engine cannot run here: {detail}")
    with _lock:
        if "PyJlad" not in _module:
            from juliacall import Main as jl  # noqa: PLC0415 - deliberately lazy

            jl.seval("import PyJlad")
            _module["PyJlad"] = jl.PyJlad
    return _module["PyJlad"]


def julia_module_text(exported: Any) -> str:
    """The complete module of ``exported`` as ``llvmcall`` takes it (pyjlad's LAPACK loops linked in).

    Raises
    ------
    UnsupportedFunctionError
        If the function calls a :func:`pyjlad.custom_derivative` (its rules
        are registered for the embedded engine's Enzyme only).
    """
    if any(is_rule_symbol(name) for name in exported.module.external_functions):
        raise UnsupportedFunctionError(
            f"{exported.name} calls a pyjlad.custom_derivative; its rules are applied by the embedded "
            "engine only: use engine='embedded', or write the rule with Enzyme.jl's EnzymeRules in Julia"
        )
    text = exported.enzyme_module.text
    extra = linked_modules(exported)
    if extra:
        text = locate().link([text, *extra], what=exported.name, text=True).decode()
    return llvmcall_module(text)


def zero_shadow_constants(abi: FunctionABI, activities: tuple[str, ...], args: tuple[Any, ...],
                          shadows: tuple[Any, ...]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    """Activities and shadows with every constant ``aliased`` array made ``Duplicated`` with a zero shadow.

    Enzyme.jl, like Enzyme, would shadow such an array with itself (see
    :mod:`pyjlad.aliasing`); the embedded engine's driver does the same in LLVM.
    """
    remaining = iter(shadows)
    new_activities: list[str] = []
    new_shadows: list[Any] = []
    for index, (act, arg) in enumerate(zip(activities, abi.args)):
        if act == "const" and isinstance(arg, ArrayArg) and arg.aliased:
            new_activities.append("dup")
            new_shadows.append(np.zeros_like(args[index]))
            continue
        new_activities.append(act)
        if act in ("dup", "dupnoneed"):
            new_shadows.append(next(remaining))
    return tuple(new_activities), tuple(new_shadows)


class JuliaCompiled:
    """A sweep run by Enzyme.jl; the same call contract as the embedded engine's."""

    def __init__(self, func: Any, sweep: Sweep) -> None:
        self.func = func
        self.sweep = sweep

    def _loaded(self, args: tuple[Any, ...]) -> tuple[Any, tuple[str, ...], ExportedFunction]:
        exported = export(self.func, numba_argtypes(args))
        activities = resolve_activities(exported, self.sweep)
        jl = _pyjlad_julia()

        def load() -> Any:
            return jl.load_exported(julia_module_text(exported), exported.abi.to_dict())

        return cached_for(exported, ("julia",), load), activities, exported

    def __call__(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float = 1.0):
        function, activities, exported = self._loaded(args)
        jl = _pyjlad_julia()
        if self.sweep.kind == "hvp":
            aliased = any(isinstance(a, ArrayArg) and a.aliased for a in exported.abi.args)
            return self._hvp(jl, function, args, shadows, aliased)
        activities, shadows = zero_shadow_constants(exported.abi, activities, args, shadows)
        # Tuples convert to Julia Tuples of converted elements (lists would stay Python objects).
        jargs = tuple(jl.numba_array(*array_spec(a)) if isinstance(a, np.ndarray) else a for a in args)
        jshadows = tuple(jl.numba_array(*array_spec(s)) if isinstance(s, np.ndarray) else s for s in shadows)
        try:
            value, dret, adjoints = jl.sweep(function, self.sweep.mode, tuple(activities), jargs, jshadows, seed)
        except Exception:  # noqa: BLE001 - a Julia error: let the function's own exception surface
            reraise_from_function(self.func, args)
            raise
        return float(value), float(dret), tuple(float(a) for a in adjoints)


    def _hvp(self, jl: Any, function: Any, args: tuple[Any, ...], shadows: tuple[Any, ...], aliased: bool):
        """Forward over reverse in Enzyme.jl; fills the H @ v buffer (``shadows[2]``) like the embedded engine.

        With ``aliased`` arrays (see :mod:`pyjlad.aliasing`) Enzyme.jl runs with runtime activity.
        """
        tangent, _, result = shadows
        wrt = self.sweep.wrt
        jargs = tuple(jl.numba_array(*array_spec(a)) if isinstance(a, np.ndarray) else a for a in args)
        x = args[wrt]
        if isinstance(x, np.ndarray):
            v = jl.numba_array(*array_spec(tangent))
            out = jl.hvp_exported(function, jargs, wrt + 1, v, runtime_activity=aliased)
            result[...] = np.asarray(out.buffer)[out.offset:out.offset + 1].reshape(()) if x.ndim == 0 else \
                np.lib.stride_tricks.as_strided(np.asarray(out.buffer)[out.offset:], shape=x.shape,
                                                strides=[s * x.itemsize for s in out.strides])
        else:
            result[0] = float(jl.hvp_exported(function, jargs, wrt + 1, float(tangent), runtime_activity=aliased))
        return 0.0, 0.0, ()


class JuliaEngine:
    """Engine facade for Enzyme.jl."""

    name = NAME

    def status(self) -> tuple[bool, str]:
        """Whether this engine can run here, with details or the fix."""
        return julia_status()

    def compile(self, func: Any, sweep: Sweep) -> JuliaCompiled:
        """A sweep of ``func`` run by Enzyme.jl."""
        return JuliaCompiled(func, sweep)

    def reverse(self, func: Any, wrt: tuple[int, ...]):
        """The reverse-mode value-and-gradient callable of ``func``."""
        from .embedded import ReverseGradient

        return ReverseGradient(func, wrt, compile=JuliaCompiled)
