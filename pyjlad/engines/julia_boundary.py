"""What crosses from Python to Julia in the Julia engine: plain data only.

The ABI as JSON text (:func:`abi_json`), Python scalars (:func:`julia_scalar`), and arrays by
address (:func:`array_spec`), whose shadows have exactly their primal's layout
(:func:`shadow_like`, :func:`shadow_twin`); constant arrays Numba merges with other memory get a
zero shadow (:func:`zero_shadow_constants`). Used by :mod:`pyjlad.engines.julia`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from ..abi import ArrayArg, FunctionABI
from ..activity import Activity, as_activities
from ..errors import ArgumentError, UnsupportedFunctionError

__all__ = ["abi_json", "julia_scalar", "shadow_like", "shadow_twin", "array_spec", "zero_shadow_constants",
           "to_julia"]


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


def zero_shadow_constants(abi: FunctionABI, activities: tuple[Activity | str, ...], args: tuple[Any, ...],
                          shadows: tuple[Any, ...]) -> tuple[tuple[Activity, ...], tuple[Any, ...]]:
    """Activities and shadows with every constant array that needs one (``ArrayArg.shadowed_when_constant``) made ``Duplicated`` with a zero shadow.

    Enzyme.jl, like Enzyme, would shadow such an array with itself (see
    :mod:`pyjlad.aliasing`); the embedded engine's driver does the same in LLVM.
    """
    remaining = iter(shadows)
    new_activities: list[Activity] = []
    new_shadows: list[Any] = []
    for index, (act, arg) in enumerate(zip(as_activities(activities), abi.args)):
        if act is Activity.CONST and isinstance(arg, ArrayArg) and arg.shadowed_when_constant:
            new_activities.append(Activity.DUP)
            new_shadows.append(shadow_like(args[index]))
            continue
        new_activities.append(act)
        if act.shadowed:
            new_shadows.append(next(remaining))
    return tuple(new_activities), tuple(new_shadows)


def to_julia(jl: Any, x: Any) -> Any:
    """An argument as it crosses to Julia: arrays wrapped by address, scalars as Python scalars."""
    return jl.numba_array(*array_spec(x)) if isinstance(x, np.ndarray) else julia_scalar(x)
