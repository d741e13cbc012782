"""Derivatives of Numba CUDA device functions, as device functions callable in the user's ``@cuda.jit`` kernels.

:func:`device_grad` (reverse mode) and :func:`device_jvp` (forward mode) take a
``@numba.cuda.jit(device=True)`` function (or the plain Python function, or an
``@njit`` one) and its argument types, and give a :class:`DeviceDerivative`:

1. the function is exported for those types and differentiated by Enzyme for
   NVPTX (:func:`pyjlad.gpu.sweep.device_sweep`, the module the batched kernels use);
2. a generated wrapper (:func:`wrapper_lines`) gives the derivative Numba CUDA's
   calling convention for a foreign device function (``abi="numba"`` of
   ``cuda.declare_device``): ``i32 name(ptr ret, params...)``, where a number is
   one parameter and an array Numba's ``meminfo, parent, nitems, itemsize, data,
   shape[ndim], strides[ndim]``; the status is ``0``, or ``-1`` when the
   function reported an error;
3. wrapper, Enzyme's output and libdevice are linked, optimized and compiled to
   PTX by LLVM 15 (:func:`pyjlad.gpu.ptx.device_function_ptx`);
4. :meth:`DeviceDerivative.declare` hands the PTX to numba-cuda
   (``cuda.declare_device(name, signature, link=ptx_file)``), which links it
   into every kernel that calls it.

What the derivative takes and returns (``wrt`` lists the differentiated arguments):

- ``device_grad``: the arguments, then one gradient array per differentiated
  array (same shape and strides as the argument; the gradient is *added* to
  it, so zero it first). It returns the partial derivative of the one
  differentiated number, a tuple of them for several, or the function's value
  when only arrays are differentiated. A gradient array whose shape or strides
  differ from its argument's is left alone and the result is NaN.
- ``device_jvp``: the arguments, then one tangent per differentiated argument
  (a number, or an array laid out as the argument); it returns the directional
  derivative of the result. A tangent array laid out otherwise gives NaN.

:meth:`DeviceDerivative.on_cpu` compiles the same wrapper and Enzyme output
for the CPU: the executable check of the generated code without a GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

import numpy as np
from numba import njit
from numba import types as nbtypes
from numba.core import sigutils
from numba.core import typing as nbtyping

from .. import cache
from ..abi import ArrayArg, FunctionABI
from ..engines.base import reraise_from_function
from ..errors import ArgumentError
from ..memo import cached_for
from ..targets.nvptx import NVPTX_DATALAYOUT, NVPTX_TRIPLE
from ..toolchain import locate
from .host import host_module
from .sweep import DeviceSweep, device_sweep

__all__ = ["CpuDerivative", "DeviceDerivative", "device_grad", "device_jvp", "host_target_lines", "wrapper_lines"]

_FORMAT = "pyjlad-gpu-device-fn/1"
_NAN = {"double": "0x7FF8000000000000", "float": "0x7FF8000000000000"}
_ONE = {"double": "1.000000e+00", "float": "1.000000e+00"}
_ZERO = {"double": "0.000000e+00", "float": "0.000000e+00"}
_CTYPES = {"ptr": ctypes.c_void_p, "double": ctypes.c_double, "float": ctypes.c_float, "i64": ctypes.c_int64,
           "i32": ctypes.c_int32, "i8": ctypes.c_int8, "i1": ctypes.c_bool}


def _roles(abi: FunctionABI, index: int, prefix: str) -> list[tuple[str, str, str]]:
    """``(role, llvm type, name)`` of the parameters of argument ``index``, named ``%{prefix}_{role}``."""
    return [(role, ty, f"%{prefix}_{role}") for k, role, ty in abi.params() if k == index]


def _layout_check(abi: FunctionABI, index: int, primal: str, other: str) -> list[str]:
    """Lines setting ``%ok{other}`` to whether array ``other``'s shape and strides are argument ``index``'s."""
    arg = abi.args[index]
    assert isinstance(arg, ArrayArg)
    roles = [*(f"shape{j}" for j in range(arg.ndim)), *(f"stride{j}" for j in range(arg.ndim))]
    lines, last = [], "true"
    for role in roles:
        lines += [f"  %eq_{other}_{role} = icmp eq i64 %{primal}_{role}, %{other}_{role}",
                  f"  %and_{other}_{role} = and i1 {last}, %eq_{other}_{role}"]
        last = f"%and_{other}_{role}"
    return [*lines, f"  %ok_{other} = and i1 {last}, true"]


@dataclass(frozen=True)
class _Shape:
    """What the wrapper of one derivative takes and returns."""

    params: list[str]                 # typed parameters after ``ptr %ret``
    call: list[str]                   # typed arguments of the driver after ``%vo, %dret, %excinfo``
    checks: list[str]                 # lines computing ``%ok_*``
    ok: list[str]                     # the ``%ok_*`` names
    result_types: list[str] = field(default_factory=list)


def _shape(abi: FunctionABI, sweep: DeviceSweep, mode: str, wrt: tuple[int, ...]) -> _Shape:
    params, primal_args, checks, ok = [], [], [], []
    for index in range(len(abi.args)):
        for _role, ty, name in _roles(abi, index, f"a{index}"):
            params.append(f"{ty} {name}")
            primal_args.append(f"{ty} {name}")
    shadows = []
    for index in sweep.driver.shadow_args:
        arg = abi.args[index]
        if isinstance(arg, ArrayArg):
            for _role, ty, name in _roles(abi, index, f"d{index}"):
                params.append(f"{ty} {name}")
            checks += _layout_check(abi, index, f"a{index}", f"d{index}")
            ok.append(f"%ok_d{index}")
            shadows.append(f"ptr %d{index}_data")
        else:  # a forward-mode tangent, by value
            params.append(f"{arg.llvm_type} %d{index}")
            shadows.append(f"{arg.llvm_type} %d{index}")
    adjoints = [f"ptr %adj{i}" for i in sweep.driver.active_scalars]
    return _Shape(params, [*adjoints, *primal_args, *shadows], checks, ok)


def result_types(abi: FunctionABI, driver_active: tuple[int, ...], mode: str) -> list[str]:
    """The LLVM types the derivative returns: the adjoints of the differentiated numbers (reverse mode, or the
    value when there are none), or the result's tangent (forward mode)."""
    if mode == "reverse" and driver_active:
        return [abi.args[i].llvm_type for i in driver_active]  # type: ignore[union-attr]
    return [abi.result.llvm_type]


def _stores(kinds: list[str], values: list[str], block: str) -> list[str]:
    """Lines of ``block`` storing ``values`` at ``%ret``: one number, or a tuple laid out as Numba's (a struct)."""
    if len(values) == 1:
        return [f"  store {kinds[0]} {values[0]}, ptr %ret, align 8"]
    struct = "{ " + ", ".join(kinds) + " }"
    lines = []
    for k, (ty, value) in enumerate(zip(kinds, values)):
        lines += [f"  %{block}{k} = getelementptr inbounds {struct}, ptr %ret, i32 0, i32 {k}",
                  f"  store {ty} {value}, ptr %{block}{k}, align 4"]
    return lines


def wrapper_lines(abi: FunctionABI, sweep: DeviceSweep, mode: str, wrt: tuple[int, ...], symbol: str) -> list[str]:
    """The wrapper ``i32 @symbol(ptr %ret, ...)`` in Numba CUDA's calling convention (see the module's docstring);
    the driver is declared, no target lines."""
    shape = _shape(abi, sweep, mode, wrt)
    driver = sweep.driver
    result = abi.result.llvm_type
    kinds = result_types(abi, driver.active_scalars, mode)
    if mode == "reverse" and driver.active_scalars:
        loads = [f"  %r{k} = load {ty}, ptr %adj{i}, align 8"
                 for k, (ty, i) in enumerate(zip(kinds, driver.active_scalars))]
    else:
        loads = [f"  %r0 = load {result}, ptr {'%vo' if mode == 'reverse' else '%dret'}, align 8"]
    values = [f"%r{k}" for k in range(len(kinds))]
    declared = ", ".join(["ptr", "ptr", "ptr", *(c.split()[0] for c in shape.call)])
    all_ok = "true"
    checks = list(shape.checks)
    for k, name in enumerate(shape.ok):
        checks.append(f"  %all{k} = and i1 {all_ok}, {name}")
        all_ok = f"%all{k}"
    seed = _ONE[result] if mode == "reverse" else _ZERO[result]
    return [
        f"declare i32 @{driver.symbol}({declared})",
        "",
        f"define i32 @{symbol}({', '.join(['ptr %ret', *shape.params])}) {{",
        "entry:",
        "  %excinfo = alloca ptr, align 8",
        f"  %dret = alloca {result}, align 8",
        f"  %vo = alloca {result}, align 8",
        *[f"  %adj{i} = alloca {abi.args[i].llvm_type}, align 8" for i in driver.active_scalars],  # type: ignore
        "  store ptr null, ptr %excinfo, align 8",
        f"  store {result} {seed}, ptr %dret, align 8",
        *checks,
        f"  br i1 {all_ok}, label %call, label %mismatch",
        "call:",
        f"  %st = call i32 @{driver.symbol}({', '.join(['ptr %vo', 'ptr %dret', 'ptr %excinfo', *shape.call])})",
        *loads,
        *_stores(kinds, values, "slot"),
        "  %bad = icmp ne i32 %st, 0",
        "  %rc = select i1 %bad, i32 -1, i32 0",
        "  ret i32 %rc",
        "mismatch:",
        *_stores(kinds, [_NAN[t] for t in kinds], "nanslot"),
        "  ret i32 0",
        "}",
        "",
    ]


def _writable(argtype: nbtypes.Type) -> nbtypes.Type:
    """The type of a gradient or tangent for an argument of type ``argtype`` (an array is written to)."""
    return argtype.copy(readonly=False) if isinstance(argtype, nbtypes.Array) else argtype


def _numba_result(kinds: list[str]) -> nbtypes.Type:
    as_numba = {"double": nbtypes.float64, "float": nbtypes.float32}
    if len(kinds) == 1:
        return as_numba[kinds[0]]
    if len(set(kinds)) == 1:
        return nbtypes.UniTuple(as_numba[kinds[0]], len(kinds))
    return nbtypes.Tuple([as_numba[k] for k in kinds])


def _numba_cuda() -> Any:
    """numba-cuda's ``numba.cuda``; an :class:`ArgumentError` where only Numba's own, which cannot link PTX, is
    there."""
    try:
        from numba import cuda

        links = "link" in inspect.signature(cuda.declare_device).parameters
    except (ImportError, AttributeError, TypeError, ValueError):  # no CUDA target at all
        links = False
    if not links:
        raise ArgumentError("calling a derivative in a @cuda.jit kernel needs numba-cuda (pip install numba-cuda): "
                            "Numba's own numba.cuda cannot link its PTX")
    return cuda


class DeviceDerivative:
    """The derivative of a device function, as a device function (see the module's docstring).

    Attributes
    ----------
    name : str
        Its symbol in the PTX (``pyjlad_grad_*`` / ``pyjlad_jvp_*``).
    signature : numba.core.typing.Signature
        Its Numba signature (what :meth:`declare` declares).
    sweep : DeviceSweep
        Enzyme's output it calls.
    """

    def __init__(self, function: Any, sweep: DeviceSweep, argtypes: tuple[nbtypes.Type, ...],
                 wrt: tuple[int, ...], mode: str) -> None:
        self.function, self.sweep, self.argtypes, self.wrt, self.mode = function, sweep, argtypes, wrt, mode
        abi = sweep.exported.abi
        tag = hashlib.sha256(repr((sweep.driver.symbol, mode, wrt)).encode()).hexdigest()[:12]
        self.name = f"pyjlad_{'grad' if mode == 'reverse' else 'jvp'}_{tag}"
        self.result_types = result_types(abi, sweep.driver.active_scalars, mode)
        extra = tuple(_writable(argtypes[i]) for i in sweep.driver.shadow_args)
        self.signature = nbtyping.signature(_numba_result(self.result_types), *argtypes, *extra)
        self._wrapper = wrapper_lines(abi, sweep, mode, wrt, self.name)
        self._ptx: dict[str, str] = {}
        self._declared: dict[str, Any] = {}
        self._cpu: Any = None

    def __repr__(self) -> str:
        return f"<DeviceDerivative {self.name} of {self.sweep.exported.name}: {self.signature}>"

    def nvptx_module(self) -> str:
        """The wrapper's module for NVPTX (the driver and Enzyme's output declared, linked by :meth:`ptx`)."""
        return "\n".join([f'target datalayout = "{NVPTX_DATALAYOUT}"', f'target triple = "{NVPTX_TRIPLE}"', "",
                          *self._wrapper])

    def ptx(self, arch: str = "sm_80") -> str:
        """The PTX of the derivative (a ``.visible .func``; LLVM 15's NVPTX backend, libdevice linked)."""
        from .ptx import device_function_ptx

        if arch not in self._ptx:
            self._ptx[arch] = device_function_ptx(self.sweep, self.nvptx_module(), self.name, arch)
        return self._ptx[arch]

    def ptx_file(self, arch: str = "sm_80") -> Path:
        """:meth:`ptx` written to a file (for ``link=`` of numba-cuda)."""
        folder = Path(tempfile.gettempdir()) / "pyjlad-gpu-device-fns"
        folder.mkdir(exist_ok=True)
        ptx = self.ptx(arch)
        path = folder / f"{self.name}.{arch}.{hashlib.sha256(ptx.encode()).hexdigest()[:12]}.ptx"  # never stale
        if not path.exists():
            partial = path.with_suffix(f".{id(self)}.tmp")
            partial.write_text(ptx)
            partial.replace(path)
        return path

    def declare(self, arch: str = "sm_80") -> Any:
        """The derivative as numba-cuda's foreign device function, callable in ``@cuda.jit`` kernels.

        Raises
        ------
        ArgumentError
            numba-cuda is not installed (Numba's own ``numba.cuda``, which Numba 0.68 still ships, cannot link
            PTX: its ``declare_device`` takes no ``link``).
        """
        if arch not in self._declared:
            cuda = _numba_cuda()
            self._declared[arch] = cuda.declare_device(self.name, self.signature, link=str(self.ptx_file(arch)))
        return self._declared[arch]

    def cpu_modules(self) -> list[str]:
        """Enzyme's output and the wrapper as modules for the CPU (the host's target lines, libm's names)."""
        targets = host_target_lines(self.sweep)
        return [host_module(self.sweep.text, targets), "\n".join([*targets, "", *self._wrapper])]

    def on_cpu(self) -> CpuDerivative:
        """The same wrapper and Enzyme output compiled for the CPU (see :class:`CpuDerivative`)."""
        if self._cpu is None:
            self._cpu = CpuDerivative(self)
        return self._cpu


class CpuDerivative:
    """The derivative compiled for the CPU, called with NumPy arrays and numbers in the order of the
    device function's signature; returns what the device function returns (a float, or a tuple)."""

    def __init__(self, derivative: DeviceDerivative) -> None:
        from ..engines.objects import load_library

        sweep = derivative.sweep
        modules = derivative.cpu_modules()
        key = cache.cache_key(_FORMAT, *modules)
        what = f"the CPU build of {derivative.name}"
        self._library = load_library(key, lambda: locate().link(modules, what=sweep.exported.name),
                                     derivative.name, what)
        self._abi = sweep.exported.abi
        self._derivative = derivative
        types = [p.split()[0] for p in _shape(self._abi, sweep, derivative.mode, derivative.wrt).params]
        prototype = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, *(_CTYPES[t] for t in types))
        self._function = prototype(self._library.get_pointer_to_function(derivative.name))

    def _values(self, index: int, value: Any) -> list[Any]:
        arg = self._abi.args[index]
        if not isinstance(arg, ArrayArg):
            return [value]
        array = value
        if not isinstance(array, np.ndarray) or array.ndim != arg.ndim:
            raise ArgumentError(f"argument {index}: expected a {arg.ndim}-d NumPy array")
        return [None, None, array.size, array.itemsize, array.ctypes.data, *array.shape, *array.strides]

    def __call__(self, *args: Any) -> Any:
        derivative = self._derivative
        shadows = derivative.sweep.driver.shadow_args
        nargs = len(self._abi.args)
        if len(args) != nargs + len(shadows):
            raise ArgumentError(f"{derivative.name} takes {nargs + len(shadows)} arguments, got {len(args)}")
        values: list[Any] = []
        for index, value in enumerate(args[:nargs]):
            values += self._values(index, value)
        for index, value in zip(shadows, args[nargs:]):
            values += self._values(index, value)
        kinds = derivative.result_types
        out = (ctypes.c_double if kinds[0] == "double" else ctypes.c_float) * max(2 * len(kinds), 2)
        buffer = out()
        status = self._function(ctypes.addressof(buffer), *values)
        if status != 0:  # the function's own exception, from running it (Numba reports only a status)
            reraise_from_function(derivative.function, tuple(args[:nargs]))
        if len(kinds) == 1:
            return buffer[0]
        if len(set(kinds)) != 1:
            raise ArgumentError("mixed float32/float64 results are not read back on the CPU")
        return tuple(buffer[k] for k in range(len(kinds)))


def host_target_lines(sweep: DeviceSweep) -> list[str]:
    """The CPU's ``target datalayout``/``target triple`` lines (those of the module Numba compiled)."""
    return [line for line in sweep.exported.enzyme_module.text.splitlines()
            if line.startswith(("target datalayout", "target triple"))]


def _argtypes(argtypes: Any) -> tuple[nbtypes.Type, ...]:
    if isinstance(argtypes, str):  # "float64(float64, float64[::1])" or "(float64, float64[::1])"
        try:
            argtypes, _ = sigutils.normalize_signature(argtypes)
        except Exception as exc:  # noqa: BLE001 - Numba's parser raises several kinds
            raise ArgumentError(f"argtypes {argtypes!r} is not a Numba signature: {exc}") from None
    if isinstance(argtypes, nbtyping.Signature):
        return tuple(argtypes.args)
    if not isinstance(argtypes, (tuple, list)) or not all(isinstance(t, nbtypes.Type) for t in argtypes):
        raise ArgumentError("argtypes must be a tuple of Numba types, such as (float64, float64[::1])")
    return tuple(argtypes)


def _wrt(wrt: int | Sequence[int], argtypes: tuple[nbtypes.Type, ...]) -> tuple[int, ...]:
    chosen = (wrt,) if isinstance(wrt, int) else tuple(wrt)
    if not chosen or any(not isinstance(k, int) or not 0 <= k < len(argtypes) for k in chosen):
        raise ArgumentError(f"wrt={wrt!r}: give argument positions in 0..{len(argtypes) - 1}")
    return tuple(sorted(set(chosen)))


def _is_cuda_dispatcher(value: Any) -> bool:
    """Whether ``value`` is a ``@cuda.jit`` function (numba-cuda's, or numba's own old ``numba.cuda``)."""
    module = type(value).__module__
    return hasattr(value, "py_func") and module.startswith(("numba.cuda", "numba_cuda"))


def _global_names(code: CodeType) -> set[str]:
    """The global names ``code`` and the code nested in it (comprehensions, lambdas) read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, CodeType):
            names |= _global_names(const)
    return names


def _for_the_cpu_pipeline(function: Any) -> Any:
    """``function`` with the device functions it calls (globals that are ``@cuda.jit`` functions, at any
    depth) replaced by ``@njit`` functions of their Python code: pyjlad compiles device code with Numba's
    CPU pipeline, which cannot call a CUDA dispatcher. ``function`` itself when it calls none."""
    py_func = getattr(function, "py_func", function)
    code = getattr(py_func, "__code__", None)
    if code is None:
        return py_func
    swaps = {name: cached_for(value, ("gpu-njit",), lambda v=value: njit(_for_the_cpu_pipeline(v)))
             for name in _global_names(code)
             if _is_cuda_dispatcher(value := py_func.__globals__.get(name))}
    if not swaps:
        return py_func
    rebuilt = FunctionType(code, {**py_func.__globals__, **swaps}, py_func.__name__, py_func.__defaults__,
                           py_func.__closure__)
    rebuilt.__qualname__ = py_func.__qualname__
    rebuilt.__module__ = py_func.__module__
    return rebuilt


def _python_function(fn: Any) -> Any:
    """The Python function pyjlad compiles for ``fn``: a numba-cuda device function's ``py_func`` (the device
    functions it calls compiled by Numba's CPU pipeline too), or ``fn`` itself."""
    if not _is_cuda_dispatcher(fn):
        return fn
    return cached_for(fn, ("gpu-cpu-function",), lambda: _for_the_cpu_pipeline(fn))


def _derivative(fn: Any, argtypes: Any, wrt: int | Sequence[int], mode: str) -> DeviceDerivative:
    types = _argtypes(argtypes)
    chosen = _wrt(wrt, types)
    function = _python_function(fn)

    def build() -> DeviceDerivative:
        return DeviceDerivative(function, device_sweep(function, types, chosen, mode), types, chosen, mode)

    # one object per function, types, wrt and mode: declared once, linked once into a kernel using it twice
    return cached_for(function, ("gpu-device-derivative", types, chosen, mode), build)


def device_grad(fn: Any, argtypes: Any, wrt: int | Sequence[int] = 0) -> DeviceDerivative:
    """The gradient of a device function, as a device function (reverse mode; see the module's docstring).

    Parameters
    ----------
    fn : callable
        A ``@numba.cuda.jit(device=True)`` function (its ``py_func`` is
        compiled), an ``@njit`` function or a plain Python function of numbers
        and arrays returning a float.
    argtypes : tuple of numba types, a Signature or a signature string
        The argument types, such as ``(float64, float64[::1])`` or
        ``"float64(float64, float64[::1])"`` (the result type is ignored).
    wrt : int or sequence of int
        The differentiated arguments (float numbers or float arrays).

    Returns
    -------
    DeviceDerivative
        ``.declare()`` gives what a ``@cuda.jit`` kernel calls; ``.ptx()`` the
        PTX; ``.on_cpu()`` the same code compiled for the CPU.

    Raises
    ------
    ArgumentError
        Bad ``argtypes`` or ``wrt``.
    UnsupportedFunctionError
        The function cannot run on a GPU, or ``wrt`` names an integer.
    EnzymeError
        Enzyme failed (with its diagnostics).
    """
    return _derivative(fn, argtypes, wrt, "reverse")


def device_jvp(fn: Any, argtypes: Any, wrt: int | Sequence[int] = 0) -> DeviceDerivative:
    """The directional derivative of a device function, as a device function (forward mode; the tangents of
    the ``wrt`` arguments follow the arguments). Parameters and errors as :func:`device_grad`."""
    return _derivative(fn, argtypes, wrt, "forward")
