"""The argument ABI of an exported function, as data engines can build drivers from.

Numba's inner ABI function is ``i32 entry(ptr retptr, ptr excinfo, params...)``:
it returns a status (0 = success), stores the result through ``retptr`` and,
on an exception, a pointer to its description through ``excinfo``. Each
Python-level argument becomes one or more LLVM parameters:

==========  =============================================================
argument    LLVM parameters, in order
==========  =============================================================
float       one ``double`` (float64) or ``float`` (float32)
int / bool  one integer (``i64``, ``i32``, ``i8``, ``i1``...)
ndarray     ``ptr meminfo, ptr parent, i64 nitems, i64 itemsize,
            ptr data, i64 shape[ndim], i64 strides[ndim]`` (strides in bytes)
==========  =============================================================

Only a float scalar or the ``data`` pointer of a float array carries
derivatives; everything else is a constant to Enzyme.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .errors import InvalidObject

__all__ = ["ScalarArg", "ArrayArg", "ArgABI", "FunctionABI", "FLOAT_LLVM_TYPES"]

#: numpy dtype name -> LLVM type, for the floating-point types pyjlad differentiates.
FLOAT_LLVM_TYPES = {"float64": "double", "float32": "float"}


@dataclass(frozen=True)
class ScalarArg:
    """A scalar argument passed by value.

    Attributes
    ----------
    dtype : str
        NumPy name of the type (``"float64"``, ``"int64"``, ``"bool"``...).
    llvm_type : str
        The LLVM parameter type (``"double"``, ``"i64"``...).
    """

    dtype: str
    llvm_type: str
    kind: str = "scalar"

    @property
    def differentiable(self) -> bool:
        """Whether the argument can carry a derivative (a real float)."""
        return self.dtype in FLOAT_LLVM_TYPES

    @property
    def param_roles(self) -> tuple[str, ...]:
        """The role of each LLVM parameter this argument expands to."""
        return ("value",)


@dataclass(frozen=True)
class ArrayArg:
    """A NumPy array argument, flattened into Numba's array parameters.

    Attributes
    ----------
    dtype : str
        NumPy name of the element type.
    ndim : int
        Number of dimensions.
    layout : str
        Numba's layout: ``"C"``, ``"F"`` or ``"A"`` (any strides).
    llvm_element : str
        LLVM type of one element.
    writes : bool
        Whether the function may write the array's elements (LLVM could not
        prove its data pointer ``readonly``).
    """

    dtype: str
    ndim: int
    layout: str
    llvm_element: str
    writes: bool = False
    aliased: bool = False
    kind: str = "array"

    @property
    def differentiable(self) -> bool:
        """Whether the array's elements can carry derivatives (real floats)."""
        return self.dtype in FLOAT_LLVM_TYPES

    @property
    def shadowed_when_constant(self) -> bool:
        """Whether a constant (not differentiated) array still needs a zeroed shadow.

        Enzyme assumes a constant argument's memory holds no derivative. That is false for a
        float array the function writes (a scratch buffer filled from active values and read
        back: its derivative would be lost) and for one whose data pointer Numba merges with
        other memory (:attr:`aliased`: Enzyme would write adjoints into it).
        """
        return self.aliased or (self.writes and self.differentiable)

    @property
    def param_roles(self) -> tuple[str, ...]:
        """The role of each LLVM parameter this argument expands to."""
        return (
            "meminfo", "parent", "nitems", "itemsize", "data",
            *[f"shape{i}" for i in range(self.ndim)],
            *[f"stride{i}" for i in range(self.ndim)],
        )


ArgABI = ScalarArg | ArrayArg


@dataclass(frozen=True)
class FunctionABI:
    """Everything an engine needs to call and differentiate an exported entry.

    Attributes
    ----------
    entry : str
        Name of the entry function in the portable module.
    args : tuple of ScalarArg or ArrayArg
        One entry per Python-level argument.
    result : ScalarArg
        The scalar result stored through ``retptr`` (dtype ``"none"`` for a
        function that returns nothing).
    param_types : tuple of str
        LLVM types of the entry's parameters after ``retptr`` and ``excinfo``.
    """

    entry: str
    args: tuple[ArgABI, ...]
    result: ScalarArg
    param_types: tuple[str, ...]

    def params(self) -> list[tuple[int, str, str]]:
        """List ``(argument index, role, llvm type)`` for every parameter after excinfo."""
        out: list[tuple[int, str, str]] = []
        types = iter(self.param_types)
        for index, arg in enumerate(self.args):
            for role in arg.param_roles:
                out.append((index, role, next(types)))
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (the format ``python -m pyjlad export`` writes)."""
        return {
            "format": "pyjlad-abi/1",
            "entry": self.entry,
            "signature": "i32 (ptr retptr, ptr excinfo, params...)",
            "result": asdict(self.result),
            "args": [asdict(a) for a in self.args],
            "params": [
                {"arg": index, "role": role, "type": ty}
                for index, role, ty in self.params()
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FunctionABI:
        """Rebuild a :class:`FunctionABI` from :meth:`to_dict`'s output."""
        if data.get("format") != "pyjlad-abi/1":
            raise InvalidObject(f"not a pyjlad ABI description: format={data.get('format')!r}")
        args: list[ArgABI] = []
        for item in data["args"]:
            item = dict(item)
            kind = item.pop("kind")
            args.append(ArrayArg(**item) if kind == "array" else ScalarArg(**item))
        result = dict(data["result"])
        result.pop("kind", None)
        return cls(
            entry=data["entry"],
            args=tuple(args),
            result=ScalarArg(**result),
            param_types=tuple(p["type"] for p in data["params"]),
        )
