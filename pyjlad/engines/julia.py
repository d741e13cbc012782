"""The Julia engine: Enzyme.jl differentiates the exported IR through ``Base.llvmcall``.

Python exports the portable module and its ABI (:mod:`pyjlad.export`), turns it
into the exact text ``llvmcall`` receives (the ``llvmcall`` target,
:func:`pyjlad.targets.llvmcall.julia_module_text`), and calls the bundled Julia
package ``PyJlad`` (``pyjlad/julia_project/``, shipped in the wheel) through
juliacall. What crosses the boundary is plain data (:mod:`pyjlad.engines.julia_boundary`):
the module text and the ABI as JSON strings, Python scalars, and arrays by
address, whose shadows have exactly their primal's layout. The sweep contract is
the embedded engine's, so every transform works on either engine.

The engine needs Julia 1.12 or later: ``Ptr`` is an LLVM ``ptr`` in ``llvmcall``
only from 1.12 (JuliaLang/julia#53687), and Julia 1.11's typed-pointer context
cannot parse the opaque-pointer IR pyjlad exports (JuliaLang/julia#54188).

No Julia can be installed on pyjlad's build machines: there this engine reports
itself unavailable, with the reason, and its tests skip. It has never executed.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import config
from ..abi import ArrayArg
from ..activity import Activity
from ..errors import EngineUnavailableError
from ..export import ExportedFunction, export, numba_argtypes
from ..export_compile import plain_function_dispatcher
from ..frozen_globals import recompile_if_changed
from ..memo import cached_for
from ..random_draws import REPLAYING, before_run
from ..targets.llvmcall import julia_module_text
from .base import Sweep, reraise_from_function, resolve_activities
from .julia_boundary import (
    abi_json,
    array_spec,
    julia_scalar,
    shadow_like,
    shadow_twin,
    to_julia,
    zero_shadow_constants,
)

__all__ = ["JuliaEngine", "julia_module_text", "array_spec", "julia_status", "JULIA_PROJECT", "MIN_JULIA",
           "MIN_OPENSSL", "openssl_conflict", "abi_json", "julia_scalar", "shadow_like", "shadow_twin",
           "zero_shadow_constants", "juliacall_environment", "JULIACALL_SETTINGS"]

NAME = "julia"
#: The bundled Julia package (package data; ``juliapkg.json`` points at it).
JULIA_PROJECT = Path(__file__).resolve().parents[1] / "julia_project"
#: The oldest Julia whose ``llvmcall`` takes opaque-pointer IR with ``Ptr`` as ``ptr``.
MIN_JULIA = (1, 12)


def _julia_executable() -> str | None:
    for candidate in (os.environ.get("PYTHON_JULIAPKG_EXE"), os.environ.get("JULIA"), shutil.which("julia")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def parse_julia_version(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` from ``julia --version`` output (``julia version 1.12.1``), or None."""
    match = re.search(r"julia version (\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


_probed: dict[str, tuple[int, int] | None] = {}


def _julia_version(exe: str) -> tuple[int, int] | None:
    """The version of the Julia at ``exe``, asked once per process in a subprocess (never in-process)."""
    if exe not in _probed:
        try:
            out = subprocess.run([exe, "--startup-file=no", "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        _probed[exe] = parse_julia_version(out)
    return _probed[exe]


MIN_OPENSSL = (3, 5)


def openssl_conflict(version: tuple[int, ...]) -> str | None:
    """Why juliacall cannot pair this Python with Julia 1.12+, or ``None``.

    juliacall's installer (juliapkg) keeps Julia's OpenSSL no newer than
    Python's, so that one process loads one ``libssl``; Julia 1.12 brings
    OpenSSL 3.5, so with an older Python OpenSSL juliapkg restricts Julia to
    1.11 or older, which the engine cannot use, and resolution fails.

    Parameters
    ----------
    version
        The OpenSSL version Python is linked against, as ``ssl.OPENSSL_VERSION_INFO``
        gives it (OpenSSL 3.0.19 is ``(3, 0, 0, 19, 0)``).

    Examples
    --------
    >>> openssl_conflict((3, 5, 0, 0, 0)) is None
    True
    >>> "OpenSSL 3.0.19" in openssl_conflict((3, 0, 0, 19, 0))
    True
    """
    if tuple(version[:2]) >= MIN_OPENSSL:
        return None
    patch = version[3] if version[0] >= 3 else version[2]  # OpenSSL 3 numbers its patch where 1.x had letters
    found = f"{version[0]}.{version[1]}.{patch}"
    need = ".".join(map(str, MIN_OPENSSL))
    return (f"this Python is linked against OpenSSL {found}; juliacall pairs Julia 1.12+ (which the engine needs) "
            f"only with a Python linked against OpenSSL {need}+ (fix: use a Python built with OpenSSL {need} or "
            "newer, e.g. from conda-forge or python-build-standalone)")


_lock = threading.RLock()   # every juliacall call: Julia must not be entered from two Python threads at once
_module: dict[str, Any] = {}


def julia_status() -> tuple[bool, str]:
    """Whether the Julia engine can run here, with the reason and the fix if not.

    Importing juliacall installs Julia when none is found, which needs internet
    access; pyjlad only imports it when a Julia executable exists, or when
    ``PYJLAD_JULIA_ALLOW_INSTALL=1`` allows that download. A failed
    ``import PyJlad`` is remembered and reported here (``pyjlad doctor``).
    """
    need = ".".join(map(str, MIN_JULIA))
    conflict = openssl_conflict(ssl.OPENSSL_VERSION_INFO)
    if conflict is not None:
        return False, conflict
    if importlib.util.find_spec("juliacall") is None:
        return False, "juliacall is not installed (fix: pip install juliacall; it brings Julia and Enzyme.jl)"
    if "error" in _module:
        return False, f"loading the PyJlad Julia package failed: {_module['error']}"
    exe = _julia_executable()
    if exe is None:
        if not config.julia_allow_install():
            return False, (f"no Julia executable found (fix: install Julia {need}+ and put `julia` on PATH, or set "
                           "PYJLAD_JULIA_ALLOW_INSTALL=1 to let juliacall download it)")
    else:
        version = _julia_version(exe)
        if version is None or version < MIN_JULIA:
            found = "an unknown version" if version is None else ".".join(map(str, version))
            return False, (f"{exe} is Julia {found}; the Julia engine needs Julia {need}+ "
                           f"(fix: install Julia {need}+ and point PYTHON_JULIAPKG_EXE at it)")
    return True, f"juliacall with {exe or 'a Julia juliacall installs'}; Julia project {JULIA_PROJECT}"


#: juliacall's settings pyjlad needs, each applied before juliacall starts Julia unless the user chose it
#: (environment variable or ``-X juliacall-...`` option; PythonCall.jl pysrc/juliacall/__init__.py, option()).
#: HANDLE_SIGNALS: juliacall starts Julia with ``--handle-signals=no`` unless told otherwise, but Julia stops
#: threads for its GC by making them fault on a protected page, which only its own handler survives; pyjlad
#: enters Julia from whichever Python thread calls it (Julia adopts each as a thread of its own), the case
#: PythonCall's docs (docs/src/juliacall.md, "Caveat: Signal handling") say needs ``yes``. The price, per the
#: same docs: Ctrl-C during a Julia call does not raise KeyboardInterrupt.
JULIACALL_SETTINGS = {"handle_signals": "yes"}


def juliacall_environment(environ: Mapping[str, str], xoptions: Mapping[str, Any]) -> dict[str, str]:
    """The ``PYTHON_JULIACALL_*`` variables to set before importing juliacall: those the user left unset.

    Examples
    --------
    >>> juliacall_environment({}, {})
    {'PYTHON_JULIACALL_HANDLE_SIGNALS': 'yes'}
    >>> juliacall_environment({"PYTHON_JULIACALL_HANDLE_SIGNALS": "no"}, {})
    {}
    >>> juliacall_environment({}, {"juliacall-handle-signals": "no"})
    {}
    """
    out = {}
    for name, value in JULIACALL_SETTINGS.items():
        key = "PYTHON_JULIACALL_" + name.upper()
        if key not in environ and "juliacall-" + name.replace("_", "-") not in xoptions:
            out[key] = value
    return out


def _start_failure(exc: BaseException, juliacall_was_first: bool) -> str:
    """Why ``import PyJlad`` failed, with the known fix when Julia could not start after numba."""
    why = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if not juliacall_was_first and re.search(r"GLIBCXX|did not start properly|libstdc\+\+", str(exc)):
        why += (" (numba, imported by pyjlad, loaded this system's libstdc++ before Julia's; fix: `import juliacall` "
                "before `import pyjlad`, or use a Python whose libstdc++ is as new as Julia's, e.g. conda's; "
                "PythonCall.jl docs/src/faq.md)")
    return why


def _pyjlad_julia() -> Any:
    """The ``PyJlad`` Julia module, loaded through juliacall once; a failure is cached, not retried."""
    with _lock:
        ok, detail = julia_status()
        if not ok or "error" in _module:
            raise EngineUnavailableError(f"the Julia engine cannot run here: {_module.get('error', detail)}")
        if "PyJlad" not in _module:
            juliacall_was_first = "juliacall" in sys.modules   # then Julia already runs with the user's settings
            if not juliacall_was_first:
                os.environ.update(juliacall_environment(os.environ, sys._xoptions))
            try:
                from juliacall import Main as jl  # noqa: PLC0415 - deliberately lazy

                jl.seval("import PyJlad")
                _module["PyJlad"] = jl.PyJlad
            except Exception as exc:  # noqa: BLE001 - juliacall raises its own JuliaError
                _module["error"] = _start_failure(exc, juliacall_was_first)
                raise EngineUnavailableError(f"the Julia engine cannot run here: {_module['error']}") from exc
        return _module["PyJlad"]


class JuliaCompiled:
    """A sweep run by Enzyme.jl; the same call contract as the embedded engine's."""

    def __init__(self, func: Any, sweep: Sweep) -> None:
        self.func = func
        self.sweep = sweep
        # A plain Python function: its njit compiled again at each call where its globals changed, as in the
        # embedded engine (pyjlad.frozen_globals); the module loaded into Julia is then exported afresh.
        self._plain_njit = plain_function_dispatcher(func)

    def _loaded(self, args: tuple[Any, ...]) -> tuple[Any, tuple[Activity, ...], ExportedFunction]:
        exported = export(self.func, numba_argtypes(args))
        activities = resolve_activities(exported, self.sweep)
        jl = _pyjlad_julia()

        def load() -> Any:
            with _lock:
                return jl.load_ir(julia_module_text(exported), abi_json(exported.abi))

        return cached_for(exported, ("julia",), load), activities, exported

    def __call__(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float = 1.0):
        if self._plain_njit is not None:
            recompile_if_changed(self._plain_njit)
        if REPLAYING[0]:  # inside a transform running a function that draws random numbers (pyjlad.random_draws)
            before_run()
        function, activities, exported = self._loaded(args)
        jl = _pyjlad_julia()
        if self.sweep.kind == "hvp":
            aliased = any(isinstance(a, ArrayArg) and a.aliased for a in exported.abi.args)
            return self._hvp(jl, function, args, shadows, aliased)
        activities, shadows = zero_shadow_constants(exported.abi, activities, args, shadows)
        twins, write_backs = self._twins(args, activities, shadows)
        with _lock:
            # Tuples convert to Julia Tuples of converted elements (lists would stay Python objects);
            # activities cross as their plain string values, which PyJlad.jl's `sweep` compares.
            jargs = tuple(to_julia(jl, a) for a in args)
            jshadows = tuple(to_julia(jl, s) for s in twins)
            jactivities = tuple(a.value for a in activities)
            try:
                value, dret, adjoints = jl.sweep(function, self.sweep.mode, jactivities, jargs, jshadows,
                                                 float(seed))
            except Exception:  # noqa: BLE001 - a Julia error: let the function's own exception surface
                reraise_from_function(self.func, args)
                raise
        for write_back in write_backs:
            write_back()
        return float(value), float(dret), tuple(float(a) for a in adjoints)

    @staticmethod
    def _twins(args: tuple[Any, ...], activities: tuple[Activity, ...], shadows: tuple[Any, ...]):
        """Each shadow laid out like its primal (see :func:`shadow_twin`), and the copies back."""
        primals = [a for a, act in zip(args, activities) if act.shadowed]
        twins, write_backs = [], []
        for primal, shadow in zip(primals, shadows):
            if isinstance(primal, np.ndarray):
                shadow, write_back = shadow_twin(primal, shadow)
                write_backs.append(write_back)
            twins.append(shadow)
        return tuple(twins), write_backs

    def _hvp(self, jl: Any, function: Any, args: tuple[Any, ...], shadows: tuple[Any, ...], aliased: bool):
        """Forward over reverse in Enzyme.jl; fills the H @ v buffer (``shadows[2]``) like the embedded engine.

        With ``aliased`` arrays (see :mod:`pyjlad.aliasing`) Enzyme.jl runs with runtime activity.
        """
        tangent, _, result = shadows
        wrt = self.sweep.wrt
        x = args[wrt]
        with _lock:
            jargs = tuple(to_julia(jl, a) for a in args)
            if isinstance(x, np.ndarray):
                v, _ = shadow_twin(x, tangent)
                out, write_back = shadow_twin(x, result)
                # juliacall spells `hvp_exported!` as `hvp_exported_b` (PythonCall src/JlWrap/raw.jl, pyjl_attr_py2jl).
                jl.hvp_exported_b(to_julia(jl, out), function, jargs, wrt + 1, to_julia(jl, v),
                                  runtime_activity=aliased)
                write_back()
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

    def reverse(self, func: Any, wrt: tuple[int, ...], value: bool = True):
        """The reverse-mode value-and-gradient callable of ``func`` (Enzyme.jl computes the value whatever
        ``value`` says: ``Sweep.value`` is the embedded engine's)."""
        from .base import ReverseGradient

        return ReverseGradient(func, wrt, compile=JuliaCompiled)
