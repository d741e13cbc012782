"""Export: the inner ABI function, a readable name, and an ABI description engines can use."""

from __future__ import annotations

import json

import numba
import numpy as np
from cases import seed000_func
from numba import njit

from pyjlad.abi import ArrayArg, FunctionABI, ScalarArg
from pyjlad.export import export, numba_argtypes


@njit
def mixed(x, a, n, flag):
    s = 0.0
    for i in range(n):
        s += a[i, 0] * x
    return s if flag else -s


def _mixed_export():
    args = (1.5, np.ones((3, 2), np.float32, order="F"), 3, True)
    return export(mixed, numba_argtypes(args))


def test_abi_describes_scalars_and_flattened_arrays() -> None:
    abi = _mixed_export().abi
    assert abi.entry == "pyjlad_mixed"
    assert abi.args[0] == ScalarArg("float64", "double")
    assert abi.args[1] == ArrayArg("float32", 2, "F", "float")
    assert abi.args[2].dtype == "int64" and abi.args[2].llvm_type == "i64"
    assert abi.args[3].dtype == "bool"
    roles = [role for index, role, _ in abi.params() if index == 1]
    assert roles == ["meminfo", "parent", "nitems", "itemsize", "data",
                     "shape0", "shape1", "stride0", "stride1"]
    assert abi.result == ScalarArg("float64", "double")
    assert [a.differentiable for a in abi.args] == [True, True, False, False]


def test_abi_round_trips_through_json() -> None:
    abi = _mixed_export().abi
    again = FunctionABI.from_dict(json.loads(json.dumps(abi.to_dict())))
    assert again == abi


def test_entry_signature_matches_the_description() -> None:
    exported = _mixed_export()
    header = next(line for line in exported.module.text.splitlines()
                  if line.startswith("define") and "@pyjlad_mixed(" in line)
    assert header.count("%") == 2 + len(exported.abi.params())


def test_cfunc_exports_the_inner_function_not_the_wrapper() -> None:
    exported = export(seed000_func, ())
    text = exported.module.text
    assert "cfunc." not in text
    header = next(line for line in text.splitlines() if "@pyjlad_seed000_func(" in line)
    assert "%retptr" in header and "%excinfo" in header
    assert [a.dtype for a in exported.abi.args] == ["float64", "float64"]


def test_external_functions_are_listed() -> None:
    import math

    exported = export(njit(lambda x: math.tan(x) + math.atan2(x, 2.0)), (numba.float64,))
    assert {"tan", "atan2"} <= set(exported.module.external_functions)
