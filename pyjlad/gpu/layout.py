"""Where each argument of a batched call lies in memory, and what one sample of it is.

A batched call ``f(*args)`` over ``n`` samples reads argument ``k`` either
*mapped* (``in_axes`` 0: sample ``i`` is ``args[k][i]``) or *shared* (``None``:
every sample gets ``args[k]`` whole). Each argument is described by its array
interface, NumPy's ``__array_interface__`` or CUDA's
``__cuda_array_interface__`` (the same fields: ``shape``, ``typestr``,
``data``, ``strides``), so one description serves the CPU-compiled body and
the GPU kernel, and a device array is read where it lies (no copy).

A :class:`Slot` is what the generated code needs of an argument: its element
type, the shape and byte strides of one sample, and the byte stride from one
sample to the next. These are constants of the generated code (a kernel is
compiled per layout): small per-sample arrays then have constant trip counts,
which LLVM unrolls into registers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import types as nbtypes

from ..errors import ArgumentError, ArgumentTypeError

__all__ = ["ArgView", "Slot", "view_of", "slots_for", "batch_size", "sample_argtypes", "is_device_array"]

#: The element types a batched argument may have (NumPy names).
SUPPORTED_DTYPES = ("float64", "float32", "int64", "int32", "bool")


@dataclass(frozen=True)
class ArgView:
    """One argument as an array interface describes it (a Python scalar is a 0-d view with no address).

    Attributes
    ----------
    dtype : str
        NumPy name of the element type.
    shape : tuple of int
    strides : tuple of int
        In bytes (filled in for a C-contiguous interface that gives ``None``).
    address : int
        The data pointer (0 for a Python scalar, passed by value).
    device : bool
        Whether the memory is on a CUDA device (``__cuda_array_interface__``).
    value : object
        The Python scalar itself, for a scalar passed by value.
    """

    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    address: int
    device: bool
    value: Any = None


def is_device_array(obj: Any) -> bool:
    """Whether ``obj`` exposes ``__cuda_array_interface__`` (CuPy, PyTorch CUDA tensors, Numba device arrays)."""
    return hasattr(type(obj), "__cuda_array_interface__") or hasattr(obj, "__cuda_array_interface__")


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def _dtype_name(typestr: str, k: int) -> str:
    try:
        dtype = np.dtype(typestr)
    except TypeError:
        raise ArgumentTypeError(f"argument {k} has element type {typestr!r}, which is not a NumPy type") from None
    name = "bool" if dtype == np.bool_ else dtype.name
    if name not in SUPPORTED_DTYPES or not dtype.isnative:
        raise ArgumentTypeError(f"argument {k} has element type {dtype}; batched gradients take "
                                f"{', '.join(SUPPORTED_DTYPES)} arguments in the machine's byte order")
    return name


def _from_interface(interface: dict[str, Any], k: int, device: bool) -> ArgView:
    dtype = _dtype_name(interface["typestr"], k)
    shape = tuple(int(s) for s in interface["shape"])
    itemsize = np.dtype(interface["typestr"]).itemsize
    strides = interface.get("strides")
    strides = _c_strides(shape, itemsize) if strides is None else tuple(int(s) for s in strides)
    address = int(interface["data"][0]) if interface.get("data") is not None else 0
    if interface.get("mask") is not None:
        raise ArgumentTypeError(f"argument {k} is a masked array; pass its data")
    return ArgView(dtype, shape, strides, address, device)


def view_of(arg: Any, k: int) -> ArgView:
    """The :class:`ArgView` of argument ``k``: a device array, a NumPy array, or a Python/NumPy scalar."""
    if is_device_array(arg):
        return _from_interface(arg.__cuda_array_interface__, k, device=True)
    if isinstance(arg, np.ndarray):
        return _from_interface(arg.__array_interface__, k, device=False)
    if isinstance(arg, (bool, np.bool_)):
        return ArgView("bool", (), (), 0, False, bool(arg))
    if isinstance(arg, (int, np.integer)):
        return ArgView("int64" if isinstance(arg, int) else np.dtype(type(arg)).name, (), (), 0, False, arg)
    if isinstance(arg, (float, np.floating)):
        return ArgView("float64" if isinstance(arg, float) else np.dtype(type(arg)).name, (), (), 0, False, arg)
    raise ArgumentTypeError(f"argument {k} is a {type(arg).__name__}; batched gradients take NumPy arrays, "
                            "arrays with __cuda_array_interface__ (CuPy, PyTorch, Numba device arrays) and numbers")


@dataclass(frozen=True)
class Slot:
    """What the generated code knows of one argument (all constants of the kernel).

    Attributes
    ----------
    index : int
        The argument's position.
    mapped : bool
        Whether sample ``i`` reads ``args[index][i]`` (else the whole argument).
    dtype : str
        Element type (NumPy name).
    sample_shape : tuple of int
        The shape of one sample (``()``: a number).
    sample_strides : tuple of int
        Byte strides within one sample.
    batch_stride : int
        Bytes from one sample to the next (0 for a shared argument).
    by_value : bool
        A shared number, passed to the kernel by value.
    """

    index: int
    mapped: bool
    dtype: str
    sample_shape: tuple[int, ...]
    sample_strides: tuple[int, ...]
    batch_stride: int
    by_value: bool

    @property
    def itemsize(self) -> int:
        return 1 if self.dtype == "bool" else np.dtype(self.dtype).itemsize

    @property
    def nitems(self) -> int:
        return int(np.prod(self.sample_shape, dtype=np.int64)) if self.sample_shape else 1

    @property
    def is_array(self) -> bool:
        """Whether one sample is an array (else a number)."""
        return bool(self.sample_shape) or (not self.mapped and not self.by_value)

    @property
    def contiguous(self) -> bool:
        """Whether one sample is C-contiguous."""
        return self.sample_strides == _c_strides(self.sample_shape, self.itemsize)


def batch_size(views: list[ArgView], axes: tuple[int | None, ...]) -> int:
    """The common leading length of the mapped arguments (at least 1)."""
    sizes = {}
    for k, (view, axis) in enumerate(zip(views, axes)):
        if axis is None:
            continue
        if not view.shape:
            raise ArgumentError(f"argument {k} is mapped over axis 0 (in_axes) but is a number, which has no "
                                "leading axis; pass an array of samples or use in_axes None for it")
        sizes[k] = view.shape[0]
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"argument {k}: {n}" for k, n in sizes.items())
        raise ArgumentError(f"the mapped arguments have different leading sizes ({listed}); every argument "
                            "with in_axes 0 must hold the same number of samples")
    n = next(iter(sizes.values()))
    if n == 0:
        raise ArgumentError("the mapped arguments hold 0 samples; a batched gradient needs at least one")
    return n


def slots_for(views: list[ArgView], axes: tuple[int | None, ...], wrt: tuple[int, ...]) -> tuple[Slot, ...]:
    """The :class:`Slot` of every argument.

    Raises
    ------
    ArgumentError
        An argument named in ``wrt`` whose samples are not C-contiguous (its
        gradient is written with the same strides), or a shared array whose
        memory is not on the device the other arguments are on.
    """
    slots = []
    for k, (view, axis) in enumerate(zip(views, axes)):
        if axis == 0:
            slot = Slot(k, True, view.dtype, view.shape[1:], view.strides[1:], view.strides[0], False)
        else:
            slot = Slot(k, False, view.dtype, view.shape, view.strides, 0, view.address == 0 and not view.shape)
        if k in wrt and slot.is_array and not slot.contiguous:
            raise ArgumentError(f"argument {k}'s samples are not C-contiguous (strides {slot.sample_strides}); "
                                "its gradient is laid out like it: pass a contiguous copy (np.ascontiguousarray "
                                "or cupy.ascontiguousarray)")
        slots.append(slot)
    return tuple(slots)


def _numba_scalar(dtype: str) -> nbtypes.Type:
    return nbtypes.boolean if dtype == "bool" else getattr(nbtypes, dtype)


def sample_argtypes(slots: tuple[Slot, ...]) -> tuple[nbtypes.Type, ...]:
    """The Numba types of one sample's arguments (what the function is exported for)."""
    out = []
    for slot in slots:
        if slot.is_array:
            ndim = len(slot.sample_shape)
            if ndim == 0:
                raise ArgumentError(f"argument {slot.index} is a 0-d array; pass a number")
            out.append(nbtypes.Array(_numba_scalar(slot.dtype), ndim, "C" if slot.contiguous else "A"))
        else:
            out.append(_numba_scalar(slot.dtype))
    return tuple(out)
