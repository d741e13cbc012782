"""The ABI description (:mod:`pyjlad.abi`) of an exported function, from its Numba types and the
parameters of its portable entry.

:func:`arg_abi` describes each argument from its Numba type (refusing the types pyjlad cannot pass),
:func:`filled_args` completes those descriptions from the entry's LLVM parameters (their types,
whether an array is written, whether it is aliased), :func:`result_abi` describes the result.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

from numba import types as nbtypes

from .abi import ArgABI, ArrayArg, ScalarArg
from .errors import UnsupportedFunctionError
from .ir import Parameter

__all__ = ["arg_abi", "data_parameters", "dtype_name", "filled_args", "llvm_type_of", "never_written_data",
           "result_abi"]

_LLVM_INT = {8: "i8", 16: "i16", 32: "i32", 64: "i64"}


def arg_abi(index: int, ty: nbtypes.Type) -> ArgABI:
    """The description of argument ``index`` of Numba type ``ty``, its LLVM types not yet filled in.

    Raises
    ------
    UnsupportedFunctionError
        If ``ty`` is not a real or integer scalar or an array of them.
    """
    if isinstance(ty, (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean)):
        return ScalarArg(dtype=dtype_name(ty), llvm_type="")
    if isinstance(ty, nbtypes.Array) and isinstance(
        ty.dtype, (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean)
    ):
        return ArrayArg(dtype=dtype_name(ty.dtype), ndim=ty.ndim, layout=ty.layout, llvm_element="")
    if isinstance(ty, (nbtypes.Complex,)) or (
        isinstance(ty, nbtypes.Array) and isinstance(ty.dtype, nbtypes.Complex)
    ):
        raise UnsupportedFunctionError(
            f"argument {index} is complex ({ty}); pyjlad differentiates real float64/float32 "
            "code: split complex values into real and imaginary float arrays"
        )
    if isinstance(ty, nbtypes.NoneType):
        raise UnsupportedFunctionError(
            f"argument {index} is None, which pyjlad cannot pass to a differentiated function: where None is "
            "the argument's default (def f(x, w=None)), leave it out of the call; otherwise pass a float, int, "
            "bool or NumPy array"
        )
    if isinstance(ty, (nbtypes.UnicodeType, nbtypes.StringLiteral, nbtypes.CharSeq, nbtypes.UnicodeCharSeq)):
        raise UnsupportedFunctionError(
            f"argument {index} is a string (Numba type {ty}), which pyjlad cannot pass to a differentiated "
            "function: bind it in an @njit function that calls this one with it and differentiate that "
            "(@njit def g(x): return f(x, \"mode\")), or, where the string is the parameter's default, leave "
            "it out of the call"
        )
    if isinstance(ty, (nbtypes.Dispatcher, nbtypes.FunctionType, nbtypes.WrapperAddressProtocol)):
        raise UnsupportedFunctionError(
            f"argument {index} is a function (Numba type {ty}), which pyjlad cannot pass to a differentiated "
            "function: bind it in an @njit function that calls this one with it and differentiate that "
            "(@njit def g(x): return f(x, act)), or call it in f as a global instead of a parameter"
        )
    raise UnsupportedFunctionError(
        f"argument {index} has Numba type {ty}, which pyjlad cannot pass to a differentiated "
        "function; pass floats, ints, bools or NumPy arrays of them (unpack tuples and "
        "containers into separate arguments)"
    )


def dtype_name(ty: nbtypes.Type) -> str:
    """The ABI's name of scalar type ``ty`` (``float64``, ``int32``, ``bool``)."""
    return "bool" if isinstance(ty, nbtypes.Boolean) else str(ty)


def llvm_type_of(dtype: str) -> str:
    """The LLVM type of a value of ``dtype`` in memory (``double``, ``float``, ``i8`` for ``bool``).

    >>> [llvm_type_of(d) for d in ("float64", "float32", "bool", "int32", "uint8")]
    ['double', 'float', 'i8', 'i32', 'i8']
    """
    if dtype == "float64":
        return "double"
    if dtype == "float32":
        return "float"
    if dtype == "bool":
        return "i8"
    bits = int(re.sub(r"\D", "", dtype) or 64)
    return _LLVM_INT.get(bits, "i64")


def data_parameters(args: Sequence[ArgABI], params: Sequence[Parameter]) -> dict[str, int]:
    """The differentiable arrays' data pointers: parameter name to argument index.

    ``params`` are the entry's parameters after ``retptr`` and ``excinfo``, as many as the roles of
    ``args`` (for the aliasing analysis, :func:`pyjlad.aliasing.mixed_pointer_arguments`).
    """
    found: dict[str, int] = {}
    position = 0
    for index, arg in enumerate(args):
        if isinstance(arg, ArrayArg) and arg.differentiable:
            found[params[position + arg.param_roles.index("data")].name or ""] = index
        position += len(arg.param_roles)
    return found


def filled_args(args: Sequence[ArgABI], params: Sequence[Parameter], aliased: frozenset[int],
                readonly: Collection[str] = frozenset()) -> list[ArgABI]:
    """``args`` with their LLVM types filled in from the entry's ``params`` (after ``retptr`` and
    ``excinfo``); an array is marked written unless its data pointer is ``readonly``/``readnone`` (an
    attribute of the parameter, or its name in ``readonly``: :func:`pyjlad.inferred_readonly.readonly_parameters`),
    and aliased if its index is in ``aliased``."""
    filled: list[ArgABI] = []
    position = 0
    for index, arg in enumerate(args):
        if isinstance(arg, ArrayArg):
            data = params[position + arg.param_roles.index("data")]
            writes = not (data.readonly or data.name in readonly)
            filled.append(ArrayArg(arg.dtype, arg.ndim, arg.layout, llvm_type_of(arg.dtype), writes,
                                   aliased=index in aliased))
        else:
            filled.append(ScalarArg(arg.dtype, params[position].type))
        position += len(arg.param_roles)
    return filled


def never_written_data(args: Sequence[ArgABI]) -> frozenset[int]:
    """The positions in the entry's parameter list (``retptr`` and ``excinfo`` first) of the arrays' data
    pointers, if the function writes none of its array arguments (``args`` filled in: :func:`filled_args`);
    otherwise none (an argument it writes may overlap another one in the caller's memory).

    Examples
    --------
    >>> from pyjlad.abi import ArrayArg, ScalarArg
    >>> x = ArrayArg("float64", 1, "C", "double")
    >>> sorted(never_written_data([ScalarArg("float64", "double"), x]))
    [7]
    >>> never_written_data([x, ArrayArg("float64", 1, "C", "double", writes=True)])
    frozenset()
    """
    arrays = [arg for arg in args if isinstance(arg, ArrayArg)]
    if any(arg.writes for arg in arrays):
        return frozenset()
    found, position = set(), 2
    for arg in args:
        if isinstance(arg, ArrayArg):
            found.add(position + arg.param_roles.index("data"))
        position += len(arg.param_roles)
    return frozenset(found)


def result_abi(restype: nbtypes.Type) -> ScalarArg:
    """The description of a result of Numba type ``restype`` (``void`` for ``None``)."""
    if isinstance(restype, nbtypes.NoneType):
        return ScalarArg("none", "void")
    return ScalarArg(dtype_name(restype), llvm_type_of(dtype_name(restype)))
