"""Bad input gets a clear exception naming what to change; the process stays alive."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import jit, njit

import pyjlad


@njit
def _with_int(x, n):
    return x * n


def test_wrt_naming_an_integer_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"argument 1 .* int64.*constant"):
        pyjlad.gradient(_with_int, 2.0, 3, wrt=1)


def test_wrt_naming_an_integer_array_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="array of int64"):
        pyjlad.gradient(njit(lambda a: float(a[0])), np.arange(3))


def test_wrt_naming_a_bool_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="bool"):
        pyjlad.gradient(njit(lambda x, b: x if b else -x), 1.0, True, wrt=1)


@pytest.mark.parametrize("wrt", [5, (0, 9)])
def test_wrt_out_of_range(wrt) -> None:
    with pytest.raises(TypeError, match="out of range"):
        pyjlad.gradient(_with_int, 2.0, 3, wrt=wrt)


@pytest.mark.parametrize("wrt", ["x", 1.5, (), (0, "a"), True])
def test_wrt_of_the_wrong_type(wrt) -> None:
    with pytest.raises(TypeError, match="wrt"):
        pyjlad.gradient(_with_int, 2.0, 3, wrt=wrt)


def test_negative_wrt_naming_an_int_or_beyond_the_call_is_refused() -> None:
    # Negative positions count from the end (JAX's argnums); see tests/test_jax_style_args.py.
    with pytest.raises(TypeError, match="argument 1 .*constant"):
        pyjlad.gradient(_with_int, 2.0, 3, wrt=-1)
    with pytest.raises(TypeError, match="out of range"):
        pyjlad.gradient(_with_int, 2.0, 3, wrt=-3)


def test_array_result_is_refused_with_advice() -> None:
    with pytest.raises(TypeError, match=r"returns array.*real scalar.*np.sum"):
        pyjlad.gradient(njit(lambda x: x * 2.0), np.ones(3))


def test_integer_result_is_refused() -> None:
    with pytest.raises(TypeError, match="floating-point scalar"):
        pyjlad.gradient(njit(lambda x: int(x)), 1.5)


@pytest.mark.parametrize("bad", ["text", {"a": 1.0}, [1.0, 2.0], object(), 1 + 2j])
def test_unsupported_argument_types(bad) -> None:
    with pytest.raises(TypeError, match="argument 0"):
        pyjlad.gradient(lambda x: 1.0, bad)


def test_function_numba_cannot_compile() -> None:
    def uses_python_objects(x):
        return float(len(str(object()))) * x

    with pytest.raises(TypeError, match=r"(?s)Numba cannot compile .*uses_python_objects.*nopython"):
        pyjlad.gradient(uses_python_objects, 1.0)


def test_object_mode_function_is_refused() -> None:
    @jit(forceobj=True)
    def objmode(x):
        return x * 2.0

    with pytest.raises(TypeError, match="object mode"):
        pyjlad.gradient(objmode, 1.0)


def test_not_a_function() -> None:
    with pytest.raises(TypeError, match="cannot differentiate"):
        pyjlad.gradient(42, 1.0)


def test_enzyme_failure_is_an_exception_and_names_the_helpers() -> None:
    """Typed dicts call Numba runtime helpers Enzyme cannot see into."""

    def dict_user(x):
        d = {1: x}
        return d[1] * x

    with pytest.raises(pyjlad.EnzymeError, match=r"it uses a typed dict .*numba_dict_\w+") as info:
        pyjlad.gradient(dict_user, 1.0)
    assert info.value.diagnostics  # Enzyme's own output is kept
    # The interpreter is alive and pyjlad still works.
    assert pyjlad.gradient(lambda x: x * x, 3.0) == 6.0


def test_exception_raised_by_the_function_surfaces_unchanged() -> None:
    @njit
    def checked(x):
        if x < 0.0:
            raise ValueError("x must be non-negative")
        return math.sqrt(x)

    assert pyjlad.gradient(checked, 4.0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="x must be non-negative"):
        pyjlad.gradient(checked, -1.0)


def test_nan_and_inf_propagate_as_ieee() -> None:
    g = pyjlad.gradient(njit(lambda x: x * x), float("nan"))
    assert math.isnan(g)
    assert pyjlad.gradient(njit(lambda x: x * x), float("inf")) == float("inf")
    assert pyjlad.gradient(njit(error_model="numpy")(lambda x: 1.0 / x), 0.0) == float("-inf")
    with pytest.raises(ZeroDivisionError):  # Python error model: the same exception as f
        pyjlad.gradient(njit(lambda x: 1.0 / x), 0.0)


def test_missing_toolchain_says_how_to_install(monkeypatch, tmp_path) -> None:
    from pyjlad import toolchain

    monkeypatch.setenv("PYJLAD_ENZYME_PLUGIN", str(tmp_path / "absent.so"))
    with pytest.raises(pyjlad.ToolchainError, match="pyjlad toolchain install"):
        toolchain.locate()


def test_recursion_is_differentiated() -> None:
    @njit
    def power(x, n):
        if n <= 0:
            return 1.0
        return x * power(x, n - 1)

    assert pyjlad.gradient(power, 2.0, 3) == pytest.approx(12.0, rel=1e-14)


def test_generator_is_refused() -> None:
    def gen(x):
        yield x

    with pytest.raises(TypeError, match=r"gen is a generator \(it yields\): .* real scalar; accumulate what it yields"):
        pyjlad.gradient(gen, 1.0)


def _first_twice(*a):
    return a[0] * 2.0


def _product_of(*xs):
    return xs[0] * xs[1]


@pytest.mark.parametrize("f, args", [(_first_twice, (1.0,)), (_product_of, (1.0, 2.0)), (njit(_first_twice), (1.0,))],
                         ids=["one-argument", "two-arguments", "njit"])
def test_star_args_are_refused_with_the_signature(f, args) -> None:
    """With one argument, Numba compiled ``*a`` as that argument (``a[0]`` of a float then failed to type, and
    the message said Numba could not compile a function a call of it compiles); now every count is refused
    alike (docs/errors.md row 41)."""
    with pytest.raises(TypeError, match=r"\(\*(a|xs)\) takes \*args, .*name each argument in the def"):
        pyjlad.gradient(f, *args)


def test_printing_is_refused_with_the_helpers_named() -> None:
    @njit
    def noisy(x):
        print("x =", x)
        return x * x

    with pytest.raises(pyjlad.EnzymeError, match=r"it uses print\(\)"):
        pyjlad.gradient(noisy, 3.0)


def test_objmode_is_refused_where_it_is() -> None:
    """Was an ``opt`` parse error about a pickled constant's length (found by a user-style probe, 2026-12-04)."""
    import numba

    @njit
    def with_python(x):
        s = np.sum(x * x)
        with numba.objmode(y="float64"):
            y = 1.0
        return s * y

    with pytest.raises(TypeError, match=r"it uses a `with numba.objmode\(\)` block .* at .*test_errors.py:\d+ "
                                        r"\(in .*with_python\).* pass its result in as an argument"):
        pyjlad.gradient(with_python, np.ones(3))


def test_a_cfunc_called_inside_is_named_with_what_to_call_instead() -> None:
    """Was "no construct of the function could be identified" (found by a user-style probe, 2026-12-04)."""
    from numba import cfunc

    @cfunc("float64(float64)")
    def square(v):
        return v * v

    @njit
    def total(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += square(x[i])
        return s

    with pytest.raises(pyjlad.EnzymeError, match=r"it uses a call of a @cfunc .*\n  at .*test_errors.py:\d+ "
                                                 r"\(in .*total\)(.|\n)*call an @njit version of it instead"):
        pyjlad.gradient(total, np.ones(3))


def test_broken_toolchain_is_an_exception(monkeypatch, tmp_path) -> None:
    from pyjlad import toolchain

    broken = tmp_path / "LLVMEnzyme-15.so"
    broken.write_bytes(b"not a shared library")
    monkeypatch.setenv("PYJLAD_ENZYME_PLUGIN", str(broken))
    with pytest.raises(pyjlad.ToolchainError, match="self-test"):
        toolchain.locate().self_test()
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    with pytest.raises(pyjlad.EnzymeError, match="failed"):
        pyjlad.gradient(njit(lambda x: x * 5.0), 1.0)


def test_a_string_argument_says_how_to_bind_it() -> None:
    @njit
    def loss(x, kind="sq"):
        if kind == "sq":
            return np.sum(x * x)
        return np.sum(np.abs(x))

    @njit
    def absolute(x):  # what the message says to write
        return loss(x, "abs")

    x = np.array([1.5, -2.0, 0.5])
    x0 = x.copy()
    with pytest.raises(pyjlad.UnsupportedFunctionError,
                       match=r"argument 1 is a string \(Numba type unicode_type\).*bind it in an @njit function.*"
                             r"leave it out of the call"):
        pyjlad.grad(loss)(x, "abs")
    np.testing.assert_allclose(pyjlad.grad(absolute)(x), np.sign(x0))  # hand-derived: d|x|/dx
    np.testing.assert_allclose(pyjlad.grad(loss)(x), 2 * x0)  # the default, left out
    np.testing.assert_array_equal(x, x0)


def test_a_function_argument_says_how_to_bind_it() -> None:
    @njit
    def softsign(z):
        return z / (1.0 + abs(z))

    @njit
    def weighted(x, act):
        s = 0.0
        for i in range(x.shape[0]):
            s += act(x[i]) * x[i]
        return s

    @njit
    def bound(x):  # what the message says to write
        return weighted(x, softsign)

    x = np.array([1.5, -2.0, 0.5])
    x0 = x.copy()
    with pytest.raises(pyjlad.UnsupportedFunctionError,
                       match=r"argument 1 is a function \(Numba type type\(CPUDispatcher.*bind it in an @njit function"):
        pyjlad.grad(weighted)(x, softsign)
    # hand-derived: d/dx [x * x / (1 + |x|)] = x * (2 + |x|) / (1 + |x|)^2
    np.testing.assert_allclose(pyjlad.grad(bound)(x), x0 * (2 + np.abs(x0)) / (1 + np.abs(x0)) ** 2, rtol=1e-14)
    np.testing.assert_array_equal(x, x0)


def test_none_passed_as_an_argument_says_to_leave_the_default_out() -> None:
    @njit
    def weighted(x, w=None):
        if w is None:
            return np.sum(x ** 2)
        return np.sum(w * x ** 2)

    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(pyjlad.grad(weighted)(x), 2 * x)  # the default, left out: fine
    with pytest.raises(pyjlad.UnsupportedFunctionError, match=r"argument 1 is None.*leave it out of the call"):
        pyjlad.grad(weighted)(x, None)


def test_a_jacobian_of_an_integer_array_names_the_dtype() -> None:
    """Until 2026-12-06 the message said the function "returns ndarray (use vjp/jvp for tuple outputs)"."""
    x = np.array([0.3, -1.2, 0.8])
    with pytest.raises(pyjlad.UnsupportedFunctionError, match=r"returns an array of int64, which has no derivative"):
        pyjlad.jacobian(njit(lambda v: (v > 0).astype(np.int64)), x)


def test_a_hessian_with_several_positions_says_it_takes_one() -> None:
    """Until 2026-12-06: "wrt must name one of arguments 0..1 ..., got (0, 1)", as if (0, 1) were out of range."""
    x = np.array([0.3, -1.2, 0.8])
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"hessian takes one argument's position as wrt"):
        pyjlad.hessian(njit(lambda a, b: np.sum(a * b) ** 2), x, x.copy(), wrt=(0, 1))


@njit
def _square_sum(x):
    return np.sum(x * x)


@njit
def _gradient_written_inside(x):
    return pyjlad.gradient(_square_sum, x)


@njit
def _grad_built_inside(x):
    g = pyjlad.grad(_square_sum)
    return g(x)


@pytest.mark.parametrize("caller, name", [(_gradient_written_inside, "gradient"), (_grad_built_inside, "grad")])
def test_a_transform_written_inside_njit_says_to_build_it_outside(caller, name) -> None:
    """Until 2026-12-06 Numba said only "Unknown attribute 'gradient' of type Module(<module 'pyjlad'>)"."""
    from numba.core.errors import TypingError

    with pytest.raises(TypingError, match=rf"pyjlad.{name} cannot be called inside @njit code: build the derivative "
                                          r"in Python, outside the @njit function"):
        caller(np.ones(3))


def test_a_derivative_pyjlad_made_is_refused_with_what_to_write() -> None:
    """``pyjlad.jacfwd(pyjlad.grad(f))`` (JAX's idiom for a Hessian) said only "pass a Python function, a
    @numba.njit dispatcher or a @numba.cfunc" until 2026-12-07 (a user-style probe); what works is named."""
    @njit
    def cubes(x):
        return np.sum(x ** 3)

    for made in (pyjlad.grad(cubes), pyjlad.value_and_grad(cubes), pyjlad.jvp_fn(cubes)):
        with pytest.raises(pyjlad.UnsupportedFunctionError, match=r"it is a derivative pyjlad made, not a Numba "
                           r"function\. For second derivatives use pyjlad\.hessian\(f, x\)"):
            pyjlad.jacfwd(made)(np.ones(3))
    df = pyjlad.grad(cubes)

    @njit
    def inside(x):
        return df(x)

    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(pyjlad.jacfwd(inside)(x), np.diag(6.0 * x), rtol=1e-14)  # what the message advises
