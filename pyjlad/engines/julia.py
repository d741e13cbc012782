"""The Julia engine: Enzyme.jl differentiates the exported IR through ``Base.llvmcall``.

Python exports the portable module and its ABI (:mod:`pyjlad.export`), turns it
into the exact text ``llvmcall`` receives (:func:`llvmcall_module`), and calls the
bundled Julia package ``PyJlad`` (``pyjlad/julia_project/``, shipped in the wheel)
through juliacall. What crosses the boundary is plain data: the module text and
the ABI as JSON strings (:func:`abi_json`), Python scalars (:func:`julia_scalar`),
and arrays by address (:func:`array_spec`), whose shadows have exactly their
primal's layout (:func:`shadow_twin`). The sweep contract is the embedded
engine's, so every transform works on either engine.

The engine needs Julia 1.12 or later: ``Ptr`` is an LLVM ``ptr`` in ``llvmcall``
only from 1.12 (JuliaLang/julia#53687), and Julia 1.11's typed-pointer context
cannot parse the opaque-pointer IR pyjlad exports (JuliaLang/julia#54188).

No Julia can be installed on pyjlad's build machines: there this engine reports
itself unavailable, with the reason, and its tests skip. It has never executed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import config
from ..abi import ArrayArg, FunctionABI
from ..activity import Activity, as_activities
from ..errors import ArgumentError, EngineUnavailableError, UnsupportedFunctionError
from ..export import ExportedFunction, export, numba_argtypes
from ..ir.pipeline import Pass, Pipeline
from ..memo import cached_for
from ..portable import RUNTIME_CALL_DTOR
from ..rules import is_rule_symbol
from ..toolchain import locate
from .base import Sweep, reraise_from_function, resolve_activities
from .differentiate import linked_modules

__all__ = ["JuliaEngine", "LLVMCALL", "llvmcall_module", "internalize", "julia_module_text", "array_spec", "julia_status", "JULIA_PROJECT",
           "MIN_JULIA", "MIN_OPENSSL", "openssl_conflict", "abi_json", "julia_scalar", "shadow_like", "shadow_twin",
           "unresolvable_symbols", "juliacall_environment", "JULIACALL_SETTINGS"]

NAME = "julia"
#: The bundled Julia package (package data; ``juliapkg.json`` points at it).
JULIA_PROJECT = Path(__file__).resolve().parents[1] / "julia_project"
#: The oldest Julia whose ``llvmcall`` takes opaque-pointer IR with ``Ptr`` as ``ptr``.
MIN_JULIA = (1, 12)

#: C library functions Julia's JIT resolves in its own process; PyJlad.jl keeps the same list.
_LIBM = frozenset("""sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 expm1 log log2
    log10 log1p pow sqrt cbrt hypot erf erfc tgamma lgamma fmod floor ceil trunc round rint nearbyint fabs
    copysign fmin fmax fma ldexp frexp modf remainder""".split())
_LIBC = frozenset({"malloc", "calloc", "realloc", "free", "memcpy", "memmove", "memset", "abort"})
_DECLARE = re.compile(r'^declare[^@\n]*@"?([^"(\s]+)"?\(', re.MULTILINE)

_HOOK_DECLARATION = re.compile(r"^declare void @" + RUNTIME_CALL_DTOR + r"\(ptr\)[^\n]*$", re.MULTILINE)
_FATAL_DECLARATION = re.compile(r"^declare i32 @numba_fatal_error\(\)[^\n]*$", re.MULTILINE)


def drop_target_lines(text: str, entry: str) -> str:
    """Remove the target lines: Julia sets its own data layout and triple on the module ``llvmcall`` gets."""
    lines = [ln for ln in text.splitlines() if not ln.startswith(("target datalayout", "target triple"))]
    return "\n".join(lines) + "\n"


def define_runtime_hooks(text: str, entry: str) -> str:
    """Define the runtime functions Julia's process does not have: the destructor hook as ``free``,
    ``numba_fatal_error`` as ``abort``.

    Called from Julia, no MemInfo with a Numba-runtime destructor can reach the hook; Numba's helperlib
    ``numba_fatal_error`` (``Py_FatalError``) is not in Julia's process image: the same fatal stop, through libc.
    """
    definition = (f"define internal void @{RUNTIME_CALL_DTOR}(ptr %mi) {{\n"
                  "  call void @free(ptr %mi)\n  ret void\n}")
    text, count = _HOOK_DECLARATION.subn(definition, text)
    if count and "declare void @free(ptr)" not in text:
        text += "declare void @free(ptr)\n"
    fatal = "define internal i32 @numba_fatal_error() {\n  call void @abort()\n  unreachable\n}"
    text, count = _FATAL_DECLARATION.subn(fatal, text)
    if count and not re.search(r"^declare void @abort\(", text, re.MULTILINE):
        text += "declare void @abort()\n"
    return text


def llvmcall_module(portable_text: str) -> str:
    """The module text handed to Julia's ``Base.llvmcall``, before :func:`internalize`: no target lines,
    runtime hooks defined (the first two passes of :data:`LLVMCALL`)."""
    return define_runtime_hooks(drop_target_lines(portable_text, ""), "")


_LINKAGE = frozenset({"private", "internal", "available_externally", "linkonce", "weak", "common", "appending",
                      "extern_weak", "linkonce_odr", "weak_odr", "external"})
_DEFINITION = re.compile(r'^(define|@(?:"[^"]*"|[-\w.$]+) =)( [^\n]*)$', re.MULTILINE)
_DEFINED_NAME = re.compile(r'@("[^"]*"|[-\w.$]+)')


def internalize(module_text: str, entry: str) -> str:
    """``module_text`` with every external definition but ``entry``'s made ``internal``.

    Julia parses a module per ``llvmcall`` site, renames only the entry and
    links the module into the calling function's (julia src/ccall.cpp,
    ``emit_llvmcall``: ``f->setName(ir_name)``, ``ctx.llvmcall_modules``); two
    sites of one function, or two functions sharing a callee (pyjlad's LAPACK
    loops), would define the same external symbol twice ("symbol multiply
    defined"). Internal definitions are private to each copy.
    """

    def local(match: re.Match) -> str:
        head, rest = match.group(1), match.group(2)
        if head == "define":
            name = _DEFINED_NAME.search(rest)
            prefix, name = rest[:name.start()], name.group(1)
        else:
            keyword = re.search(r" (?:global|constant) ", rest + " ")
            prefix, name = rest[:keyword.start()] if keyword else rest, _DEFINED_NAME.match(head).group(1)
        if name.strip('"') == entry or _LINKAGE.intersection(prefix.split()):
            return match.group(0)
        visible = re.sub(r" (?:hidden|protected)\b", "", prefix)   # local linkage needs default visibility
        return f"{head} internal{visible}{rest[len(prefix):]}"

    return _DEFINITION.sub(local, module_text)


#: The passes that make a linked portable module the text Julia's ``llvmcall`` receives; the context is the entry.
LLVMCALL = Pipeline("llvmcall", (
    Pass("drop-target-lines", drop_target_lines, "target lines"),
    Pass("define-runtime-hooks", define_runtime_hooks, "declarations become definitions"),
    Pass("internalize", internalize, "linkage of every definition but the entry"),
))


def unresolvable_symbols(module_text: str) -> list[str]:
    """The functions ``module_text`` declares that Julia's JIT cannot resolve.

    An unresolved symbol in an ``llvmcall`` module aborts Julia at link time,
    so such modules are refused before they reach it.
    """
    out = []
    for name in _DECLARE.findall(module_text):
        plain = name[:-1] if name.endswith("f") and name[:-1] in _LIBM else name
        if not (name.startswith("llvm.") or plain in _LIBM or name in _LIBC):
            out.append(name)
    return out


def abi_json(abi: FunctionABI) -> str:
    """The ABI as the JSON text ``PyJlad.load_ir`` parses (a dict would reach Julia as a ``PyDict{Py,Py}``)."""
    return json.dumps(abi.to_dict())


def julia_scalar(x: Any) -> bool | int | float:
    """``x`` as the Python scalar juliacall converts to a Julia ``Bool``, ``Integer`` or ``Float64``.

    PyJlad converts it to the exported dtype (with a range check) and passes
    bools and unsigned integers to ``llvmcall`` as the signed integer Numba declares.

    Raises
    ------
    TypeError
        If ``x`` is not a real scalar.
    """
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x)
    raise UnsupportedFunctionError(f"the Julia engine takes bool, integer and real scalars, got {type(x).__name__}")


def shadow_like(x: np.ndarray) -> np.ndarray:
    """A zero array with exactly ``x``'s memory layout: same span, offset and strides.

    Enzyme.jl indexes a shadow with its primal's offset and strides, so a
    shadow must be laid out like its primal (``np.zeros_like`` of a strided view is
    contiguous instead).
    """
    _, length, dtype, offset, shape, strides = array_spec(x)
    buffer = np.zeros(length, dtype=dtype)
    return np.lib.stride_tricks.as_strided(buffer[offset:], shape=shape,
                                           strides=[s * x.itemsize for s in strides])


def shadow_twin(primal: np.ndarray, shadow: np.ndarray) -> tuple[np.ndarray, Callable[[], None]]:
    """``shadow`` itself when laid out like ``primal``, else a copy that is; and how to copy results back.

    Returns
    -------
    twin : ndarray
        The array Julia wraps as the shadow.
    write_back : callable
        Copies the twin's contents into ``shadow`` after the sweep (a no-op
        when the twin is ``shadow``).
    """
    if array_spec(shadow)[1:] == array_spec(primal)[1:]:
        return shadow, lambda: None
    twin = shadow_like(primal)
    twin[...] = shadow

    def write_back() -> None:
        shadow[...] = twin

    return twin, write_back


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
        raise ArgumentError("array strides must be multiples of the element size to cross to Julia")
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


def julia_module_text(exported: Any) -> str:
    """The complete module of ``exported`` as ``llvmcall`` takes it (pyjlad's LAPACK loops linked in).

    Raises
    ------
    UnsupportedFunctionError
        If the function calls a :func:`pyjlad.custom_derivative` (its rules
        are registered for the embedded engine's Enzyme only), or a function
        Julia's JIT cannot resolve (SciPy's BLAS/LAPACK behind Numba's
        ``np.dot``/``np.linalg``, which would abort Julia).
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
    text = LLVMCALL.run(text, exported.abi.entry, label=exported.abi.entry)
    missing = unresolvable_symbols(text)
    if missing:
        raise UnsupportedFunctionError(
            f"{exported.name} calls {', '.join(missing)}, which Julia's JIT cannot resolve (BLAS/LAPACK from "
            "SciPy or Numba's runtime; an unresolved symbol would abort Julia): use engine='embedded'"
        )
    return text


def zero_shadow_constants(abi: FunctionABI, activities: tuple[Activity | str, ...], args: tuple[Any, ...],
                          shadows: tuple[Any, ...]) -> tuple[tuple[Activity, ...], tuple[Any, ...]]:
    """Activities and shadows with every constant ``aliased`` array made ``Duplicated`` with a zero shadow.

    Enzyme.jl, like Enzyme, would shadow such an array with itself (see
    :mod:`pyjlad.aliasing`); the embedded engine's driver does the same in LLVM.
    """
    remaining = iter(shadows)
    new_activities: list[Activity] = []
    new_shadows: list[Any] = []
    for index, (act, arg) in enumerate(zip(as_activities(activities), abi.args)):
        if act is Activity.CONST and isinstance(arg, ArrayArg) and arg.aliased:
            new_activities.append(Activity.DUP)
            new_shadows.append(shadow_like(args[index]))
            continue
        new_activities.append(act)
        if act.shadowed:
            new_shadows.append(next(remaining))
    return tuple(new_activities), tuple(new_shadows)


def _to_julia(jl: Any, x: Any) -> Any:
    """An argument as it crosses to Julia: arrays wrapped by address, scalars as Python scalars."""
    return jl.numba_array(*array_spec(x)) if isinstance(x, np.ndarray) else julia_scalar(x)


class JuliaCompiled:
    """A sweep run by Enzyme.jl; the same call contract as the embedded engine's."""

    def __init__(self, func: Any, sweep: Sweep) -> None:
        self.func = func
        self.sweep = sweep

    def _loaded(self, args: tuple[Any, ...]) -> tuple[Any, tuple[Activity, ...], ExportedFunction]:
        exported = export(self.func, numba_argtypes(args))
        activities = resolve_activities(exported, self.sweep)
        jl = _pyjlad_julia()

        def load() -> Any:
            with _lock:
                return jl.load_ir(julia_module_text(exported), abi_json(exported.abi))

        return cached_for(exported, ("julia",), load), activities, exported

    def __call__(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float = 1.0):
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
            jargs = tuple(_to_julia(jl, a) for a in args)
            jshadows = tuple(_to_julia(jl, s) for s in twins)
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
            jargs = tuple(_to_julia(jl, a) for a in args)
            if isinstance(x, np.ndarray):
                v, _ = shadow_twin(x, tangent)
                out, write_back = shadow_twin(x, result)
                # juliacall spells `hvp_exported!` as `hvp_exported_b` (PythonCall src/JlWrap/raw.jl, pyjl_attr_py2jl).
                jl.hvp_exported_b(_to_julia(jl, out), function, jargs, wrt + 1, _to_julia(jl, v),
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

    def reverse(self, func: Any, wrt: tuple[int, ...]):
        """The reverse-mode value-and-gradient callable of ``func``."""
        from .base import ReverseGradient

        return ReverseGradient(func, wrt, compile=JuliaCompiled)
