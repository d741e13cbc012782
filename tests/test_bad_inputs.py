"""Bad inputs get errors in the user's terms (issue 14), each checked for its words."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from numba import njit

import pyjlad


@njit
def scale(x, n):
    return x * n


@njit
def total(x):
    return np.sum(x * x)


def _star(*xs):
    return xs[0] * xs[1]


def _doubles_in_place(x):
    x *= 2.0
    return np.sum(x)


def _readonly(values):
    x = np.array(values, dtype=np.float64)
    x.flags.writeable = False
    return x


def _with_default(x, y=2.0):
    return x * y


class _Model:
    def loss(self, x):
        return x * x


BAD = [
    ("int named in wrt", lambda: pyjlad.gradient(scale, 1.0, 3, wrt=1), TypeError,
     r"argument 1 of scale is int64, which is a constant"),
    ("uint8 named in wrt", lambda: pyjlad.gradient(scale, 1.0, np.uint8(3), wrt=1), TypeError,
     r"argument 1 of scale is uint8, which is a constant"),
    ("int scalar as the only argument", lambda: pyjlad.gradient(njit(lambda x: x * x), 3), TypeError,
     r"argument 0 of .* is int64, which is a constant .* pass it as a float"),
    ("hessian of an int", lambda: pyjlad.hessian(njit(lambda x: x * x), 2), TypeError,
     r"a Hessian is taken with respect to a float or float array argument \(pass 2.0, not 2\)"),
    ("*args", lambda: pyjlad.gradient(_star, 1.0, 2.0), TypeError, r"takes \*args"),
    # (grad, gradient and the products fill in defaults: tests/test_jax_style_args.py,
    # tests/test_product_defaults.py)
    ("an argument without a default left out", lambda: pyjlad.jacobian(scale, 1.0), TypeError,
     r"scale\(x, n\) takes 2 argument\(s\) but was given 1: pass n too"),
    # Numba 0.68 itself fails with a bare AttributeError compiling a write into a read-only array
    ("a write into a read-only array", lambda: pyjlad.gradient(_doubles_in_place, _readonly([1.0, 2.0])), TypeError,
     r"Numba failed while compiling _doubles_in_place .* \(AttributeError: .*\bArgument\(s\) 0 are read-only arrays "
     r".* pass a writable copy"),
    ("too many arguments", lambda: pyjlad.jacobian(_with_default, 1.0, 2.0, 3.0), TypeError,
     r"_with_default\(x, y=2.0\) takes 2 argument\(s\) but was given 3: pass only the arguments it takes"),
    ("float16 array", lambda: pyjlad.gradient(total, np.ones(3, np.float16)), TypeError,
     r"float16, which Numba does not support: pass x.astype\(np.float32\)"),
    ("float16 scalar", lambda: pyjlad.gradient(njit(lambda x: x * x), np.float16(1.0)), TypeError, "float16"),
    ("big-endian array", lambda: pyjlad.gradient(total, np.ones(3, ">f8")), TypeError, "non-native byte order"),
    ("object array", lambda: pyjlad.gradient(total, np.array([1.0, 2.0], dtype=object)), TypeError,
     r"dtype=object"),
    ("masked array", lambda: pyjlad.gradient(total, np.ma.array([1.0, 2.0], mask=[0, 1])), TypeError,
     "masked array"),
    ("longdouble array (was Numba's raw NumbaValueError)", lambda: pyjlad.gradient(total, np.ones(3, np.longdouble)),
     TypeError, r"float128 \(extended precision\), which Numba does not support: pass x.astype\(np.float64\)"),
    ("longdouble scalar", lambda: pyjlad.gradient(njit(lambda x: x * x), np.longdouble(2.0)), TypeError,
     "extended precision"),
    ("clongdouble array", lambda: pyjlad.gradient(total, np.ones(3, np.clongdouble)), TypeError,
     r"complex256 \(extended precision\).*x.real and x.imag"),
    ("bound method", lambda: pyjlad.gradient(_Model().loss, 1.0), TypeError, "bound method"),
    ("huge wrt", lambda: pyjlad.gradient(total, np.ones(2), wrt=10**20), TypeError, "out of range"),
    ("jvp with a bare array as primals", lambda: pyjlad.jvp(total, np.ones(2), np.ones(2)), TypeError,
     r"primals must be a tuple .* got ndarray"),
    ("vjp with a bare float as primals", lambda: pyjlad.vjp(njit(lambda x: x * x), 1.0, 1.0), TypeError,
     r"primals must be a tuple .* got float"),
    ("hvp with a bare array as primals", lambda: pyjlad.hvp(total, np.ones(2), np.ones(2)), TypeError,
     r"primals must be a tuple"),
]


@pytest.mark.parametrize("make_call, error, words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_refused_in_the_users_terms(make_call, error, words):
    with pytest.raises(error, match=words) as info:
        make_call()
    assert isinstance(info.value, pyjlad.PyjladError) or error is TypeError


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_bad_settings_do_not_break_import_and_are_named_when_used():
    code = ("import pyjlad\n"
            "try:\n    pyjlad.gradient(lambda x: x * x * 1.75, 3.0)\n"
            "except pyjlad.ToolchainError as exc:\n    print('refused:', exc)\n")
    proc = _run(code, PYJLAD_OPT_TIMEOUT="abc", PYJLAD_DISABLE_DISK_CACHE="1")
    assert proc.returncode == 0, proc.stderr
    assert "refused: PYJLAD_OPT_TIMEOUT='abc' is not a positive number of seconds" in proc.stdout
    proc = _run(code, PYJLAD_OPT="/nonexistent/opt", PYJLAD_DISABLE_DISK_CACHE="1")
    assert proc.returncode == 0, proc.stderr
    assert "refused: PYJLAD_OPT='/nonexistent/opt' is not an executable file" in proc.stdout


@njit
def _pair(x):
    return x * 2.0, np.sum(x)


def test_a_cotangent_of_the_wrong_shape_is_named_as_the_results_kind_is() -> None:
    """One array result: "the cotangent", not "entry 0" of a tuple there is none of (a user-style probe,
    2026-12-04); a tuple result: the entry."""
    x = np.ones(3)
    with pytest.raises(pyjlad.ArgumentError, match=r"^the cotangent has shape \(2,\); .*result has shape \(3,\)"):
        pyjlad.vjp(scale, (x, 2.0), np.ones(2))
    with pytest.raises(pyjlad.ArgumentError, match=r"^cotangent entry 0 has shape \(2,\)"):
        pyjlad.vjp(_pair, (x,), (np.ones(2), 1.0))
    with pytest.raises(pyjlad.ArgumentError, match=r"^cotangent entry 1 must be a float"):
        pyjlad.vjp(_pair, (x,), (np.ones(3), np.ones(3)))
