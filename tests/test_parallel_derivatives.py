"""Parallel reverse- and forward-mode derivatives of ``prange`` code (issue 17), behind ``PYJLAD_PARALLEL_DERIVATIVES``.

Oracles: JAX float64 on a ``jax.numpy`` twin of each kernel (and the closed form of seed 003's
``remote_stats`` loss), computed from copies taken before the call. Each gradient at 1 and 2 threads
(``numba.set_num_threads``); repeated runs: per-element adjoints identical, adjoints of inputs shared
between iterations (atomic adds) within 1e-13 relative. The parallel module is checked to be the one
differentiated (no fallback warning, ``__kmpc_fork_call`` in it). Forward mode (``jvp``) against JAX's
``jvp`` the same way; Hessian-vector products in ``tests/test_parallel_hvp.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad.errors import ParallelFallbackWarning
from pyjlad.export import export, numba_argtypes
from pyjlad.openmp import libomp_path

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.skipif(libomp_path() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed")
rng = np.random.default_rng(17)
THREADS = (1, 2)


@njit(parallel=True)
def reduction(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += np.sin(x[i]) * x[i]
    return s


@njit(parallel=True)
def mapped(x):
    y = np.empty_like(x)
    for i in prange(x.shape[0]):
        y[i] = np.exp(-x[i] * x[i]) * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += y[i] * (i + 1.0)
    return s


@njit(parallel=True)
def shared_tanh(w, v):
    s = 0.0
    for i in prange(w.shape[0]):
        acc = 0.0
        for j in range(w.shape[1]):
            acc += w[i, j] * v[j]
        s += np.tanh(acc)
    return s


@njit(parallel=True)
def pairwise(x):
    e = 0.0
    for i in prange(x.shape[0]):
        for j in range(x.shape[0]):
            d = x[i] - x[j]
            e += 1.0 / (1.0 + d * d)
    return e


@njit(parallel=True)
def stencil(u, k):
    n = u.shape[0]
    out = np.zeros(n)
    for i in prange(1, n - 1):
        out[i] = u[i] + k * (u[i - 1] - 2.0 * u[i] + u[i + 1])
    s = 0.0
    for i in range(n):
        s += out[i] * out[i]
    return s


@njit(parallel=True)
def remote_loss(mse, v, b):
    """Seed 003's ``remote_stats`` with the sum of the squared t-statistics taken in the same function."""
    n, k = b.shape
    ts = np.zeros((n, k))
    for voxel in prange(n):
        var_covar_beta_global = mse[voxel] * np.linalg.inv(v)
        se_beta_global = np.sqrt(np.diag(var_covar_beta_global))
        ts[voxel, :] = b[voxel, :] / se_beta_global
    return np.sum(ts ** 2)


def _jax_grad(f, args, wrt):
    return [np.asarray(g) for g in jax.grad(f, argnums=wrt)(*[jnp.asarray(a) for a in args])]


def _x(n):
    return rng.uniform(-1.5, 1.5, n)


CASES = {
    "reduction": (reduction, lambda: (_x(1000),), (0,), lambda x: jnp.sum(jnp.sin(x) * x)),
    "map": (mapped, lambda: (_x(1000),), (0,),
            lambda x: jnp.sum(jnp.exp(-x * x) * x * jnp.arange(1.0, x.shape[0] + 1.0))),
    "shared input tanh(W@v)": (shared_tanh, lambda: (rng.normal(size=(64, 16)), rng.normal(size=16) / 4), (0, 1),
                               lambda w, v: jnp.sum(jnp.tanh(w @ v))),
    "pairwise O(n^2)": (pairwise, lambda: (_x(200),), (0,),
                        lambda x: jnp.sum(1.0 / (1.0 + (x[:, None] - x[None, :]) ** 2))),
    "stencil": (stencil, lambda: (_x(500), 0.2), (0,),
                lambda u, k: jnp.sum(jnp.concatenate([jnp.zeros(1), u[1:-1] + k * (u[:-2] - 2 * u[1:-1] + u[2:]),
                                                      jnp.zeros(1)]) ** 2)),
}


def _in_parallel(threads: int, call):
    """``call()`` on ``threads`` of Numba's threads, a fallback to the serial derivative an error."""
    numba.set_num_threads(threads)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        return call()


def _remote_stats_partials(mse, v, b):
    """The closed-form partials of ``remote_loss`` = sum_{voxel,k} b^2 / (mse_voxel d_k), d = diag(inv(v)).

    dd_k/dv = -inv(v)^T e_k e_k^T inv(v)^T.
    """
    vi = np.linalg.inv(v)
    d = np.diag(vi)
    g_mse = -np.sum(b ** 2 / d, axis=1) / mse ** 2
    g_d = -np.sum(b ** 2 / mse[:, None], axis=0) / d ** 2
    return g_mse, -vi.T @ np.diag(g_d) @ vi.T, 2 * b / (mse[:, None] * d)


def _differentiated_in_parallel(f, args):
    module, why = export(f, numba_argtypes(args)).make_parallel_module()
    assert module is not None, why
    assert "@__kmpc_fork_call(" in module.text and "numba_parallel_for" not in module.text


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_matches_jax_at_one_and_two_threads(parallel_on, name: str) -> None:
    f, make, wrt, twin = CASES[name]
    args = make()
    copies = [np.copy(a) for a in args]
    expected = _jax_grad(twin, copies, wrt)
    _differentiated_in_parallel(f, args)
    for threads in THREADS:
        got = _in_parallel(threads, lambda: pyjlad.gradient(f, *args, wrt=wrt))
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12 * np.abs(e).max())
        for a, c in zip(args, copies):
            np.testing.assert_array_equal(a, c)


def test_remote_stats_closed_form(parallel_on) -> None:
    mse = rng.uniform(0.5, 1.5, 300)
    x = rng.normal(size=(40, 8))
    v = x.T @ x
    b = rng.normal(size=(300, 8))
    copies = (mse.copy(), v.copy(), b.copy())
    partials = _remote_stats_partials(*copies)
    _differentiated_in_parallel(remote_loss, (mse, v, b))
    for threads in THREADS:
        got = _in_parallel(threads, lambda: pyjlad.gradient(remote_loss, mse, v, b, wrt=(0, 1, 2)))
        for g, e in zip(got, partials):
            np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12 * np.abs(e).max())
        for a, c in zip((mse, v, b), copies):
            np.testing.assert_array_equal(a, c)


def test_repeated_runs_identical_or_within_rounding(parallel_on) -> None:
    numba.set_num_threads(2)
    x = _x(2000)
    first = pyjlad.gradient(reduction, x)
    w, v = rng.normal(size=(64, 16)), rng.normal(size=16) / 4
    gw0, gv0 = pyjlad.gradient(shared_tanh, w, v, wrt=(0, 1))
    for _ in range(15):
        np.testing.assert_array_equal(pyjlad.gradient(reduction, x), first)  # one writer per element
        gw, gv = pyjlad.gradient(shared_tanh, w, v, wrt=(0, 1))
        np.testing.assert_array_equal(gw, gw0)
        np.testing.assert_allclose(gv, gv0, rtol=1e-13, atol=0)  # shared input: atomic adds in any order


def _jax_jvp(f, args, tangents):
    return float(jax.jvp(f, tuple(jnp.asarray(a) for a in args), tuple(jnp.asarray(t) for t in tangents))[1])


@pytest.mark.parametrize("name", list(CASES))
def test_forward_mode_matches_jax_at_one_and_two_threads(parallel_on, name: str) -> None:
    """Forward mode: the fork's registered derivative forks Enzyme's forward derivative of the loop body."""
    f, make, _, twin = CASES[name]
    args = make()
    tangents = tuple(rng.normal(size=np.shape(a)) if isinstance(a, np.ndarray) else 0.0 for a in args)
    copies, tangent_copies = [np.copy(a) for a in args], [np.copy(t) for t in tangents]
    expected = _jax_jvp(twin, copies, tangent_copies)
    module, why = export(f, numba_argtypes(args)).make_parallel_module("forward")
    assert module is not None, why
    assert "@__kmpc_fork_call(" in module.text and "@pyjlad.omp.fork.0.fwd" in module.text
    for threads in THREADS:
        _, tangent = _in_parallel(threads, lambda: pyjlad.jvp(f, args, tangents))
        np.testing.assert_allclose(tangent, expected, rtol=1e-12)
        for a, c in zip((*args, *tangents), (*copies, *tangent_copies)):
            np.testing.assert_array_equal(a, c)


def test_remote_stats_forward_mode_closed_form_and_repeatable(parallel_on) -> None:
    mse = rng.uniform(0.5, 1.5, 300)
    x = rng.normal(size=(40, 8))
    v = x.T @ x
    b = rng.normal(size=(300, 8))
    t_mse, t_v, t_b = rng.normal(size=300), rng.normal(size=(8, 8)), rng.normal(size=(300, 8))
    copies = [a.copy() for a in (mse, v, b, t_mse, t_v, t_b)]
    # the directional derivative from the closed-form partials
    expected = sum(np.sum(g * t) for g, t in zip(_remote_stats_partials(*copies[:3]), copies[3:]))

    def jvp():
        return pyjlad.jvp(remote_loss, (mse, v, b), (t_mse, t_v, t_b))[1]

    first = _in_parallel(2, jvp)
    np.testing.assert_allclose(first, expected, rtol=1e-10)
    for _ in range(10):  # each tangent written by one thread; the reductions combined in a fixed order
        assert _in_parallel(2, jvp) == first
    for a, c in zip((mse, v, b, t_mse, t_v, t_b), copies):
        np.testing.assert_array_equal(a, c)


@njit(parallel=True)
def row_norms_cubed(p):
    s = 0.0
    for i in prange(p.shape[0]):
        s += np.linalg.norm(p[i]) ** 3
    return s


def test_linalg_norm_in_a_prange_loop(parallel_on) -> None:
    """np.linalg.norm's runtime helper loaded doubles claiming 4-byte alignment, so the adjoint's atomic add
    into it became a libatomic call the JIT could not link: "LLVM ERROR: Symbol not found:
    __atomic_compare_exchange" killed the process. Closed form: d/dp_i |p_i|^3 = 3 |p_i| p_i."""
    p = rng.normal(size=(7, 3))
    p0 = p.copy()
    expected = 3.0 * np.linalg.norm(p0, axis=1)[:, None] * p0
    for threads in THREADS:
        got = _in_parallel(threads, lambda: pyjlad.gradient(row_norms_cubed, p))
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        np.testing.assert_array_equal(p, p0)


def test_parallel_by_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With the setting unset, a parallel=True function's gradient is its parallel derivative: Enzyme got the
    module whose loops are OpenMP loops, and no fallback was warned of."""
    monkeypatch.delenv("PYJLAD_PARALLEL_DERIVATIVES", raising=False)
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")  # (another test may have cached the same derivative)
    twin = njit(parallel=True)(reduction.py_func)  # its derivative is built here, with the setting unset
    x = _x(300)
    x0 = x.copy()
    g = _in_parallel(2, lambda: pyjlad.gradient(twin, x))
    np.testing.assert_allclose(g, np.cos(x0) * x0 + np.sin(x0), rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(x, x0)
    inputs = list(tmp_path.glob("*/*-enzyme.input.ll"))
    assert len(inputs) == 1 and "@__kmpc_fork_call(" in inputs[0].read_text()


def test_setting_off_is_the_serial_derivative(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYJLAD_PARALLEL_DERIVATIVES", "0")
    twin = njit(parallel=True)(reduction.py_func)  # its derivative is built here, with the setting off
    x = _x(300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        g = pyjlad.gradient(twin, x)
    np.testing.assert_allclose(g, np.cos(x) * x + np.sin(x), rtol=1e-13, atol=1e-15)


@njit
def checked_sqrt(v):
    if v < 0.0:
        raise ValueError("negative input")
    return np.sqrt(v)


@njit(parallel=True)
def checked(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += checked_sqrt(x[i])  # raises inside the loop's body (the loop itself has one exit)
    return s


def test_exception_in_a_parallel_loop_is_raised(parallel_on) -> None:
    numba.set_num_threads(2)
    x = np.linspace(-1.0, 1.0, 100)
    _differentiated_in_parallel(checked, (x,))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        # pyjlad re-runs the function for its exception: Numba's own parallel loop raises a SystemError
        # whose context is the ValueError (the serial derivative raises the same)
        with pytest.raises((ValueError, SystemError)) as info:
            pyjlad.gradient(checked, x)
        assert "negative input" in repr(info.value) + repr(info.value.__context__) + repr(info.value.__cause__)
        y = np.abs(x) + 1.0  # the next call starts with no failure recorded
        np.testing.assert_allclose(pyjlad.gradient(checked, y), 0.5 / np.sqrt(y), rtol=1e-14)


@njit(parallel=True)
def field(x, w):
    y = np.empty_like(x)
    for i in prange(x.shape[0]):
        y[i] = np.tanh(w * x[i])
    return y


def test_array_valued_prange_function_differentiates_in_parallel(parallel_on) -> None:
    x, w, c = np.linspace(-1.0, 1.0, 50), 0.7, np.cos(np.arange(50.0))
    x0 = x.copy()
    jx, jw = jax.vjp(lambda a, b: jnp.tanh(b * a), jnp.asarray(x0), w)[1](jnp.asarray(c))
    # Array results: the wrapper writing them has the function inlined, its prange loop a parallel loop
    # (_in_parallel: a fallback to the serial derivative is an error).
    for threads in (1, 2):
        value, (cx, cw) = _in_parallel(threads, lambda: pyjlad.vjp(field, (x, w), c))
        _, tangent = _in_parallel(threads, lambda: pyjlad.jvp(field, (x, w), (np.ones(50), 0.0)))
        np.testing.assert_allclose(value, np.tanh(w * x0), rtol=1e-15)
        np.testing.assert_allclose(cx, np.asarray(jx), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(cw, float(jw), rtol=1e-13)
        np.testing.assert_allclose(tangent, w / np.cosh(w * x0) ** 2, rtol=1e-13)
    jac = pyjlad.jacobian(field, x, w, wrt=0)  # vector mode: the serial derivative, its chunks on threads
    np.testing.assert_allclose(jac, np.asarray(jax.jacobian(lambda a: jnp.tanh(w * a))(jnp.asarray(x0))),
                               rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(x, x0)


def _interactions_jax(a, b):
    return jnp.sum(jnp.tanh(b * a[:, None] - a[None, :]), axis=1)


def test_jacobian_and_batched_vjp_run_the_serial_vector_mode_on_threads(parallel_on, parallel_kernels) -> None:
    interactions = parallel_kernels.interactions
    # Several directions per sweep: the serial vector-mode derivative (Enzyme's parallel one crashed on larger
    # inputs; one parallel sweep per row, what jacobian ran before, was much slower than this), its chunks of
    # directions on Numba's threads (pyjlad.chunk_threads; tests/test_chunk_threads.py), without a warning.
    x, w = _x(40), 0.7
    x0 = x.copy()
    cots = rng.normal(size=(5, 40))
    jac_x = np.asarray(jax.jacobian(_interactions_jax, argnums=0)(jnp.asarray(x0), w))
    jac_w = np.asarray(jax.jacobian(_interactions_jax, argnums=1)(jnp.asarray(x0), w))
    jx, jw = _in_parallel(2, lambda: pyjlad.jacobian(interactions, x, w, wrt=(0, 1), chunk=8))
    np.testing.assert_allclose(jx, jac_x, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(jw, jac_w, rtol=1e-12, atol=1e-13)
    _, (bx, bw) = _in_parallel(2, lambda: pyjlad.vjp(interactions, (x, w), cots, batched=True))
    np.testing.assert_allclose(bx, cots @ jac_x, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(bw, cots @ jac_w, rtol=1e-12, atol=1e-12)
    jf = _in_parallel(2, lambda: pyjlad.jacobian(interactions, x, w, wrt=0, mode="forward"))
    np.testing.assert_allclose(jf, jac_x, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, x0)


@njit(parallel=True)
def field_and_energy(x, w):
    """A tuple result: an array written in a ``prange`` loop and a ``prange`` reduction of it."""
    y = np.empty_like(x)
    e = 0.0
    for i in prange(x.shape[0]):
        y[i] = np.sin(w[1] * x[i]) + w[0] * x[i]
        e += y[i] * x[i]
    return y, e


def test_tuple_result_with_a_prange_reduction_in_parallel(parallel_on) -> None:
    x, w = np.linspace(-1.0, 1.0, 301), np.array([0.5, -1.2])
    cy, ce = np.cos(np.arange(301.0)), 0.75
    x0, w0 = x.copy(), w.copy()

    def twin(a, b):
        y = jnp.sin(b[1] * a) + b[0] * a
        return y, jnp.sum(y * a)

    (jy, je), pull = jax.vjp(twin, jnp.asarray(x0), jnp.asarray(w0))
    jx, jw = pull((jnp.asarray(cy), ce))
    _, (ty, te) = jax.jvp(twin, (jnp.asarray(x0), jnp.asarray(w0)), (jnp.ones(301), jnp.asarray([1.0, -1.0])))
    for threads in (2, 1, 2):
        (y, e), (cx, cw) = _in_parallel(threads, lambda: pyjlad.vjp(field_and_energy, (x, w), (cy, ce)))
        _, (dy, de) = _in_parallel(threads, lambda: pyjlad.jvp(field_and_energy, (x, w),
                                                                 (np.ones(301), np.array([1.0, -1.0]))))
        np.testing.assert_allclose(y, np.asarray(jy), rtol=1e-14)
        np.testing.assert_allclose(e, float(je), rtol=1e-13)
        np.testing.assert_allclose(cx, np.asarray(jx), rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(cw, np.asarray(jw), rtol=1e-12)
        np.testing.assert_allclose(dy, np.asarray(ty), rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(de, float(te), rtol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)


_FRESH_PROCESS = """
import sys, warnings
import numpy as np
sys.path.insert(0, sys.argv[1])
import pyjlad
from parallel_gradients import pairwise

warnings.simplefilter("error", pyjlad.ParallelFallbackWarning)
x = np.linspace(-1.0, 1.0, 60)
print(repr(pyjlad.gradient(pairwise, x).tolist()))
"""


def test_a_cached_parallel_derivative_is_the_first_parallel_code_of_a_fresh_process(tmp_path) -> None:
    """The second process loads the derivative from the disk cache before Numba ran any parallel code.

    It used to die in the JIT ("LLVM ERROR: Symbol not found: do_scheduling_signed"): Numba adds its
    schedule helpers to the JIT's symbols only when its threading layer starts.
    """
    env = {**os.environ, "PYJLAD_GRADIENT_CACHE_DIR": str(tmp_path), "PYJLAD_PARALLEL_DERIVATIVES": "1"}
    benchmarks = str(Path(__file__).resolve().parents[1] / "benchmarks")  # the O(n^2) kernel of the benchmark
    runs = [subprocess.run([sys.executable, "-c", _FRESH_PROCESS, benchmarks], env=env, capture_output=True, text=True,
                           timeout=900) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
    assert any(tmp_path.rglob("*")), "the first process cached nothing: the second did not load from the cache"
    x = np.linspace(-1.0, 1.0, 60)
    d = x[:, None] - x[None, :]
    expected = 2 * np.sum(-2 * d / (1 + d * d) ** 2, axis=1)  # d/dx_k of sum_ij 1 / (1 + (x_i - x_j)^2)
    for run in runs:
        np.testing.assert_allclose(eval(run.stdout), expected, rtol=1e-12, atol=1e-12)


def test_the_cache_key_changes_with_the_code_that_makes_the_parallel_module(tmp_path, monkeypatch):
    """The key of a parallel derivative holds the function's module, not its parallel copy (built on a miss
    only): an edit of the rewrite must change the key, or a disk cache written before it is read after it."""
    import shutil

    from pyjlad import parallel_derivatives as pd

    here = Path(pd.__file__).resolve().parent
    for name in pd._SOURCES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(here / name, tmp_path / name)
    monkeypatch.setattr(pd, "__file__", str(tmp_path / "parallel_derivatives.py"))
    pd.cache_tag.cache_clear()
    try:
        keys = [pd.cache_tag()]
        for edited in ("private_bodies.py", "runtime/blas_loops.ll"):  # (the runtime: the BLAS helpers' loops)
            with open(tmp_path / edited, "a") as f:
                f.write("\n; edited\n")
            pd.cache_tag.cache_clear()
            keys.append(pd.cache_tag())
        assert len(set(keys)) == 3
    finally:
        pd.cache_tag.cache_clear()


@njit(parallel=True)
def conflicting_reduction(x):
    s = 0.0
    for i in prange(x.shape[0]):
        if x[i] > 0:
            s += x[i]
        else:
            s *= 1.0 + x[i]
    return s


@pytest.mark.parametrize("setting", ["off", "on", "unset"])
def test_a_function_numba_cannot_compile_in_parallel_gets_its_serial_gradient(setting, monkeypatch):
    """As README says: Numba refuses the parallel function (two reduction operators on s), pyjlad differentiates
    its serial meaning, s = (0 + 1) * (1 - 0.5) + 2, so ds/dx = (1 - 0.5, 1 + 0, 1); with the setting on, the
    warning says why the derivative is serial."""
    from numba.core.errors import UnsupportedRewriteError

    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    if setting == "unset":
        monkeypatch.delenv("PYJLAD_PARALLEL_DERIVATIVES", raising=False)
    else:
        monkeypatch.setenv("PYJLAD_PARALLEL_DERIVATIVES", "1" if setting == "on" else "0")
    f = njit(parallel=True)(conflicting_reduction.py_func)  # its own derivative, built with this setting
    x = np.array([1.0, -0.5, 2.0])
    with pytest.raises(UnsupportedRewriteError, match="conflicting reduction operators"):
        f(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = pyjlad.grad(f)(x)
    np.testing.assert_allclose(g, [0.5, 1.0, 1.0], rtol=1e-15)
    np.testing.assert_array_equal(x, [1.0, -0.5, 2.0])
    messages = [str(w.message) for w in caught if issubclass(w.category, ParallelFallbackWarning)]
    if setting == "off":
        assert not messages
    else:  # on, the default
        assert messages and "Numba could not compile its parallel copy" in messages[0]
        assert "PYJLAD_PARALLEL_DERIVATIVES=0" in messages[0]


def test_the_scaling_benchmark_redraws_its_recorded_runs(tmp_path) -> None:
    """``benchmarks/parallel_scaling.py --plot`` draws the two recorded 16-core runs and prints their tables, whose
    rows are the recorded gradients' agreement with JAX (README and ``parallel_scaling.md`` quote them)."""
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    runs = [bench / "parallel_scaling_a.json", bench / "parallel_scaling_b.json"]
    png = tmp_path / "scaling.png"
    out = subprocess.run([sys.executable, str(bench / "parallel_scaling.py"), "--plot", *map(str, runs),
                          "--png", str(png)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert png.stat().st_size > 10_000
    rows = [line for line in out.stdout.splitlines() if line.startswith("| remote_stats |")]
    assert len(rows) == 12 and all("| 16 |" in rows[i] for i in (5, 11))
    for report in map(json.loads, (r.read_text() for r in runs)):
        for kernel in report["kernels"].values():
            assert [r["threads"] for r in kernel["rows"]] == [1, 2, 4, 8, 12, 16]
            assert all(r["caller_unchanged"] and r["error_vs_jax"] < 1e-14 for r in kernel["rows"])
