"""Derivatives called from ``@njit`` code (issue 16, part 1).

``pyjlad.grad(f)`` and ``pyjlad.value_and_grad(f)`` passed to an ``@njit`` function as
an argument, referenced as a global, or captured as a closure variable, are compiled
for the argument types Numba infers there and called as machine code linked into
the caller. Oracles: JAX in float64 on twins written with ``jax.numpy``, evaluated on
copies of the inputs taken before the call; the caller's arrays are checked
unchanged afterwards.
"""

from __future__ import annotations

import ast
import ctypes
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numba import cfunc, njit, prange, types
from numba.core.errors import TypingError

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(1616)
X = RNG.normal(size=9)


# ------------------------------------------------------------------ the functions and their JAX twins
@njit
def sin_dot(x):
    return np.sum(np.sin(x) * x)


def sin_dot_jax(x):
    return jnp.sum(jnp.sin(x) * x)


@njit
def two_floats(a, b):
    return math.sin(a) * b + a * a * b


def two_floats_jax(a, b):
    return jnp.sin(a) * b + a * a * b


@njit
def guarded(x):
    if x[0] < 0.0:
        raise ValueError("x[0] must be non-negative")
    return np.sum(x * x)


DF_ARRAY = pyjlad.grad(sin_dot)
VG_ARRAY = pyjlad.value_and_grad(sin_dot)
DF_FLOATS = pyjlad.grad(two_floats)
VG_FLOATS = pyjlad.value_and_grad(two_floats)
DF_FLOATS_BOTH = pyjlad.grad(two_floats, wrt=(0, 1))
VG_FLOATS_BOTH = pyjlad.value_and_grad(two_floats, wrt=(1, 0))


# ------------------------------------------------------------------ callers, one per way of reaching the derivative
@njit
def call_argument_1(d, x):
    return d(x)


@njit
def call_argument_2(d, a, b):
    return d(a, b)


@njit
def global_df_array(x):
    return DF_ARRAY(x)


@njit
def global_vg_array(x):
    return VG_ARRAY(x)


@njit
def global_df_floats(a, b):
    return DF_FLOATS(a, b)


@njit
def global_vg_floats(a, b):
    return VG_FLOATS(a, b)


@njit
def global_df_floats_both(a, b):
    return DF_FLOATS_BOTH(a, b)


@njit
def global_vg_floats_both(a, b):
    return VG_FLOATS_BOTH(a, b)


GLOBAL_CALLERS = {
    id(DF_ARRAY): global_df_array, id(VG_ARRAY): global_vg_array,
    id(DF_FLOATS): global_df_floats, id(VG_FLOATS): global_vg_floats,
    id(DF_FLOATS_BOTH): global_df_floats_both, id(VG_FLOATS_BOTH): global_vg_floats_both,
}


def _caller(way: str, derivative, nargs: int):
    """A compiled function calling ``derivative`` with ``nargs`` arguments, reached in ``way``."""
    if way == "argument":
        caller = call_argument_1 if nargs == 1 else call_argument_2
        return lambda *args: caller(derivative, *args)
    if way == "global":
        return GLOBAL_CALLERS[id(derivative)]
    d = derivative  # a closure variable of a function defined here
    if nargs == 1:
        @njit
        def closure_1(x):
            return d(x)
        return closure_1

    @njit
    def closure_2(a, b):
        return d(a, b)
    return closure_2


WAYS = ["argument", "global", "closure"]


def _read_only(x: np.ndarray) -> np.ndarray:
    x.setflags(write=False)
    return x


def _close(got, want) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ results match JAX
@pytest.mark.parametrize("way", WAYS)
def test_grad_of_array_function(way):
    x = X.copy()
    oracle = jax.grad(sin_dot_jax)(jnp.asarray(x.copy()))
    got = _caller(way, DF_ARRAY, 1)(x)
    assert isinstance(got, np.ndarray) and got.shape == x.shape and got.dtype == np.float64
    _close(got, oracle)
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("way", WAYS)
def test_value_and_grad_of_array_function(way):
    x = X.copy()
    value_oracle, grad_oracle = jax.value_and_grad(sin_dot_jax)(jnp.asarray(x.copy()))
    value, g = _caller(way, VG_ARRAY, 1)(x)
    assert isinstance(value, float)
    _close(value, value_oracle)
    _close(g, grad_oracle)
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("way", WAYS)
def test_grad_of_two_floats(way):
    a, b = 0.7, -1.3
    got = _caller(way, DF_FLOATS, 2)(a, b)
    assert isinstance(got, float)
    _close(got, jax.grad(two_floats_jax)(a, b))


@pytest.mark.parametrize("way", WAYS)
def test_value_and_grad_of_two_floats(way):
    a, b = 0.7, -1.3
    value, g = _caller(way, VG_FLOATS, 2)(a, b)
    value_oracle, grad_oracle = jax.value_and_grad(two_floats_jax)(a, b)
    _close(value, value_oracle)
    _close(g, grad_oracle)


@pytest.mark.parametrize("way", WAYS)
def test_tuple_wrt_in_the_order_named(way):
    a, b = 1.1, 0.4
    da, db = jax.grad(two_floats_jax, argnums=(0, 1))(a, b)
    got = _caller(way, DF_FLOATS_BOTH, 2)(a, b)
    assert isinstance(got, tuple) and len(got) == 2
    _close(got, (da, db))
    value, (gb, ga) = _caller(way, VG_FLOATS_BOTH, 2)(a, b)  # wrt=(1, 0)
    _close(value, two_floats_jax(a, b))
    _close((gb, ga), (db, da))


@njit
def partial_sum(x, n, w):
    s = 0.0
    for i in range(n):
        s += math.sin(x[i]) * w
    return s


def test_mixed_wrt_with_a_constant_integer_argument():
    """wrt=(2, 0): a float and an array, in that order; the integer (a literal at the call) is a constant."""
    d = pyjlad.grad(partial_sum, wrt=(2, 0))
    vg = pyjlad.value_and_grad(partial_sum, wrt=2)

    @njit
    def caller(x, w):
        return d(x, 3, w), vg(x, 2, w)

    x = X.copy()
    twin = lambda x, n, w: jnp.sum(jnp.sin(x[:n]) * w)  # noqa: E731
    dw, dx = jax.grad(twin, argnums=(2, 0))(jnp.asarray(x.copy()), 3, 2.5)
    value, dw2 = jax.value_and_grad(twin, argnums=2)(jnp.asarray(x.copy()), 2, 2.5)
    (got_dw, got_dx), (got_value, got_dw2) = caller(x, 2.5)
    _close((got_dw, got_value, got_dw2), (dw, value, dw2))
    _close(got_dx, dx)
    np.testing.assert_array_equal(x, X)


def test_same_results_as_from_python():
    x = X.copy()
    np.testing.assert_array_equal(global_df_array(x), DF_ARRAY(x.copy()))
    assert global_vg_floats(0.3, 2.0) == VG_FLOATS(0.3, 2.0)


@pytest.mark.parametrize("make", [
    lambda: X[::2],  # strided view (layout A)
    lambda: np.asfortranarray(RNG.normal(size=(3, 4))),  # 2-D, F order
    lambda: RNG.normal(size=(2, 3, 2)),  # 3-D
    lambda: X.astype(np.float32),  # float32: a float32 gradient
    lambda: _read_only(X.copy()),  # a read-only array (as Numba types a global array)
], ids=["strided", "fortran-2d", "3d", "float32", "read-only"])
def test_other_array_kinds(make):
    x = make()
    before = x.copy()
    oracle = jax.grad(sin_dot_jax)(jnp.asarray(x.astype(np.float64)))
    got = call_argument_1(DF_ARRAY, x)
    assert got.shape == x.shape and got.dtype == x.dtype
    np.testing.assert_allclose(got, oracle, rtol=1e-5 if x.dtype == np.float32 else 1e-12, atol=1e-6)
    np.testing.assert_array_equal(x, before)


@njit
def doubled_in_place(x):
    for i in range(x.size):
        x.flat[i] = 2.0 * x.flat[i]
    return np.sum(x ** 2)


DF_DOUBLED = pyjlad.grad(doubled_in_place)


@njit
def doubled_gradient_of_every_other(b):
    return DF_DOUBLED(b[::2])


@njit
def doubled_gradient_of_each_column(m):
    out = np.empty_like(m)
    for j in range(m.shape[1]):
        out[:, j] = DF_DOUBLED(m[:, j])
    return out


def test_a_strided_view_the_function_writes_is_written_as_by_a_call():
    """The derivative runs on a C-contiguous copy of a strided view; until 2026-12-06 the function's own writes
    into it stayed in the copy (a call of ``f``, and the derivative called from Python, write the view)."""
    b = np.arange(1.0, 7.0)
    by_call = b.copy()
    doubled_in_place(by_call[::2])
    gradient = doubled_gradient_of_every_other(b)
    np.testing.assert_array_equal(b, by_call)
    np.testing.assert_allclose(gradient, 8.0 * np.arange(1.0, 7.0)[::2], rtol=1e-14)  # d/dx sum((2x)^2)
    m = np.arange(1.0, 13.0).reshape(3, 4)
    before, by_call = m.copy(), m.copy()
    for j in range(4):
        doubled_in_place(by_call[:, j])
    np.testing.assert_allclose(doubled_gradient_of_each_column(m), 8.0 * before, rtol=1e-14)
    np.testing.assert_array_equal(m, by_call)


# ------------------------------------------------------------------ many calls from compiled loops
@njit
def descend(x, steps, rate):
    for _ in range(steps):
        x = x - rate * DF_ARRAY(x)
    return x


def test_thousand_calls_in_a_compiled_loop():
    x = X.copy()

    def step(_, y):
        return y - 1e-3 * jax.grad(sin_dot_jax)(y)

    oracle = jax.jit(lambda y: jax.lax.fori_loop(0, 1000, step, y))(jnp.asarray(x.copy()))
    np.testing.assert_allclose(descend(x, 1000, 1e-3), oracle, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(x, X)


def test_thousand_scalar_calls_with_a_closure():
    df = pyjlad.grad(two_floats, wrt=(0, 1))

    @njit
    def total(n, b):
        sa, sb = 0.0, 0.0
        for i in range(n):
            da, db = df(i * 1e-3, b)
            sa += da
            sb += db
        return sa, sb

    a = jnp.arange(1000) * 1e-3
    da, db = jax.vmap(jax.grad(two_floats_jax, argnums=(0, 1)), in_axes=(0, None))(a, 0.5)
    _close(total(1000, 0.5), (jnp.sum(da), jnp.sum(db)))


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize("args", [(np.arange(4),), (3,)], ids=["int64-array", "int"])
def test_argument_without_derivative_is_a_typing_error(args):
    with pytest.raises(TypingError, match=r"has type (array\(int64, 1d, C\)|int64), which has no derivative") as info:
        call_argument_1(DF_ARRAY, *args)
    assert "accepts the 1 argument(s) of sin_dot(x)" in str(info.value)
    assert "x a float64/float32 scalar or a float64/float32 array" in str(info.value)


def test_wrong_argument_count_is_a_typing_error():
    with pytest.raises(TypingError, match=r"called with 2 argument\(s\).*accepts the 1 argument\(s\) of sin_dot\(x\)"):
        call_argument_2(DF_ARRAY, X, X)


def test_exception_of_the_function_propagates():
    dg = pyjlad.grad(guarded)

    @njit
    def caller(x):
        return dg(x)

    _close(caller(np.ones(3)), 2.0 * np.ones(3))
    with pytest.raises(ValueError, match="x\\[0\\] must be non-negative"):
        caller(-np.ones(3))


# ------------------------------------------------------------------ machine code, not Python
def _body(llvm: str, symbol_pattern: str) -> str:
    match = re.search(r"^define [^\n]*@" + symbol_pattern + r"\(.*?^}", llvm, re.S | re.M)
    assert match is not None, f"no definition matching {symbol_pattern}"
    return match.group(0)


@pytest.mark.parametrize("caller, args", [(global_df_array, (X,)), (global_vg_floats, (0.5, 2.0))],
                         ids=["array", "two-floats"])
def test_derivative_is_linked_into_the_caller(caller, args):
    """The compiled caller calls the derivative's driver, defined in its own module, or has it
    inlined (the derivative's cos, which the primal lacks, in its body); it calls no Python API."""
    caller(*args)
    llvm = caller.inspect_llvm(caller.signatures[0])
    inner = _body(llvm, r"_ZN\w*" + caller.__name__ + r"\w*")
    drivers = set(re.findall(r"call [^@\n]*@(pyjlad_\w+_reverse_\w+)\(", inner))
    for symbol in drivers:
        assert re.search(r"^define [^\n]*@" + symbol + r"\(", llvm, re.M), symbol
    if not drivers:
        assert re.search(r"call [^@\n]*@llvm\.cos\.", inner)
    assert "inttoptr" not in inner
    python_calls = re.findall(r"call [^@\n]*@(Py\w+|numba_unpickle|numba_gil_ensure)\(", inner)
    assert python_calls == []


def test_scalar_derivative_is_inlined():
    """A sweep that allocates nothing is built without the out-of-memory guard (setjmp), so LLVM inlines it."""
    global_vg_floats(0.5, 2.0)
    inner = _body(global_vg_floats.inspect_llvm(global_vg_floats.signatures[0]), r"_ZN\w*global_vg_floats\w*")
    assert not re.search(r"call [^@\n]*@(pyjlad_\w+_reverse_\w+|_setjmp)\(", inner)
    assert re.search(r"call [^@\n]*@llvm\.cos\.", inner)


# ------------------------------------------------------------------ other compiled callers
@njit
def scaled_sin_dot(x, t):
    return np.sum(np.sin(x) * x) * t


def test_per_sample_gradients_in_a_prange_loop():
    df = pyjlad.grad(scaled_sin_dot)

    @njit(parallel=True)
    def per_sample(samples, t):
        out = np.empty_like(samples)
        for i in prange(samples.shape[0]):
            out[i] = df(samples[i], t)
        return out

    @njit
    def serial(samples, t):
        out = np.empty_like(samples)
        for i in range(samples.shape[0]):
            out[i] = df(samples[i], t)
        return out

    samples = RNG.normal(size=(64, 5))
    before = samples.copy()
    oracle = jax.vmap(jax.grad(lambda x: jnp.sum(jnp.sin(x) * x) * 1.5))(jnp.asarray(samples.copy()))
    got = per_sample(samples, 1.5)
    np.testing.assert_array_equal(got, serial(samples, 1.5))
    _close(got, oracle)
    np.testing.assert_array_equal(samples, before)


def test_called_from_a_cfunc():
    df = pyjlad.grad(two_floats, wrt=(0, 1))

    @cfunc(types.float64(types.float64, types.float64))
    def weighted(a, b):
        da, db = df(a, b)
        return da + 10.0 * db

    c_function = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_double)(weighted.address)
    da, db = jax.grad(two_floats_jax, argnums=(0, 1))(0.3, -2.0)
    _close(c_function(0.3, -2.0), da + 10.0 * db)


_CACHED_MODULE = '''
import numpy as np
from numba import njit
import pyjlad

@njit
def sin_dot(x):
    return np.sum(np.sin(x) * x)

DF = pyjlad.grad(sin_dot)

@njit(cache=True)
def cached(x):
    return DF(x)

g = cached(np.linspace(-1.0, 2.0, 7))
print(repr(g.tolist()), sum(cached.stats.cache_hits.values()))
'''


def test_caller_compiled_with_cache_true_loads_in_a_new_process(tmp_path):
    script = tmp_path / "cached_caller.py"
    script.write_text(_CACHED_MODULE)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    oracle = jax.grad(sin_dot_jax)(jnp.linspace(-1.0, 2.0, 7))
    hits = []
    for _ in range(2):  # compiled and stored, then loaded from Numba's cache
        run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                             cwd=tmp_path, timeout=600)
        assert run.returncode == 0, run.stderr[-3000:]
        values, hit = run.stdout.strip().rsplit(" ", 1)
        _close(ast.literal_eval(values), oracle)
        hits.append(int(hit))
    assert hits == [0, 1]


_OUT_OF_MEMORY = '''
import resource, numpy as np, pyjlad
from numba import njit

@njit
def f(x):
    return np.sum(np.sin(x) * x * x)   # temporaries allocated inside the differentiated code

df = pyjlad.grad(f)

@njit
def caller(x):
    return df(x)

small = np.linspace(0.0, 1.0, 1000)
expected = np.cos(small) * small ** 2 + 2 * np.sin(small) * small
np.testing.assert_allclose(caller(small), expected, rtol=1e-13)
big = np.linspace(0.0, 1.0, 30_000_000)
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
in_use = int(open("/proc/self/statm").read().split()[0]) * 4096
resource.setrlimit(resource.RLIMIT_AS, (in_use + big.nbytes + (64 << 20), hard))  # room for the gradient only
try:
    caller(big)
    print("no MemoryError")
except MemoryError as exc:
    print("MemoryError:", exc)
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
np.testing.assert_allclose(caller(small), expected, rtol=1e-13)  # and the process goes on
print("alive")
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_out_of_memory_inside_the_derivative_is_a_memory_error():
    """A sweep that allocates keeps the driver's out-of-memory exit when called from @njit code."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MemoryError: out of memory while differentiating f" in proc.stdout
    assert proc.stdout.strip().endswith("alive")
