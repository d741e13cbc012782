"""pyjlad.gpu on a real GPU: the kernels launched, against the same body compiled for the CPU.

Every test here needs the CUDA driver and a GPU, asked of the driver itself
(:func:`pyjlad.gpu.cuda_status`: ``libcuda`` loads, ``cuInit`` succeeds, at least
one device), and cuda-core to launch with; without them the tests skip with the
reason. Tolerances: float64 1e-12 relative, float32 1e-5 (the issue's).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from numba import njit

import pyjlad.gpu as pg

_OK, _REASON = pg.cuda_status()
pytestmark = pytest.mark.skipif(not _OK, reason=f"needs a GPU: {_REASON}")

if _OK:
    pytest.importorskip("cuda.core", reason="a GPU is present but cuda-core is not installed: "
                                            "pip install 'cuda-core[cu12]' to run these tests")

from test_gpu_static import CASES, tanh_model  # noqa: E402 - the same functions and inputs as the static tests


def _relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_matches_the_cpu_compiled_body(name: str) -> None:
    f, _, make_args, wrt, in_axes, _ = CASES[name]
    tol = 1e-5 if name == "float32_model" else 1e-12
    bg = pg.vmap_value_and_grad(f, wrt=wrt, in_axes=in_axes)
    args = make_args()
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    values, grads = bg(*args)
    cpu_values, cpu_grads = bg.on_cpu(*before)
    assert isinstance(values, np.ndarray) and _relative(values, cpu_values) <= tol
    for g, c in zip(grads, cpu_grads):
        assert isinstance(g, np.ndarray) and g.shape == c.shape and g.dtype == c.dtype
        assert _relative(g, c) <= tol
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)


def test_device_arrays_in_device_arrays_out() -> None:
    from pyjlad.gpu.launch import runner

    x, w, b = CASES["tanh_model"][2]()
    gpu = runner()
    dx, dw, db = gpu.to_device(x), gpu.to_device(w), gpu.to_device(b)
    gx = pg.vmap_grad(tanh_model, wrt=0, in_axes=(0, None, 0))(dx, dw, db)
    assert isinstance(gx, pg.DeviceArray) and gx.shape == x.shape
    expected = pg.vmap_grad(tanh_model, wrt=0, in_axes=(0, None, 0)).on_cpu(x, w, b)
    assert _relative(gx.copy_to_host(), expected) <= 1e-12


def test_failing_samples_are_reported_per_batch_on_the_gpu() -> None:
    x, w, b = CASES["tanh_model"][2]()
    b[[2, 9]] = -500.0
    with pytest.raises(ValueError, match="b is below -100") as info:
        pg.vmap_grad(tanh_model, wrt=0, in_axes=(0, None, 0))(x, w, b)
    assert "2 of 37 samples" in " ".join(info.value.__notes__)


def _tanh_model_exact(x, w, b):
    """tanh_model's per-sample gradients derived by hand, in long double, and which samples are well-conditioned.

    With ``t = tanh(x)`` and ``s = b + sum(w * t)``: ``d/dx = 2 s w (1 - t^2)``, ``d/dw = 2 s t``,
    ``d/db = 2 s - exp(-b)``. Three differences can cancel: ``s`` (terms of both signs), ``1 - t^2`` (``|x|``
    large) and ``2 s - exp(-b)``. Where one of them is far below its terms, any float64 evaluation (the CPU's
    too) has a large relative error there; a sample is *well-conditioned* when each is at least 1e-2 of its
    terms and ``|x| <= 2`` (an error amplification of at most about 100).
    """
    x, w, b = (np.asarray(a, np.longdouble) for a in (x, w, b))
    t = np.tanh(x)
    s = b + (w * t).sum(axis=1)
    exact = (2 * s[:, None] * w * (1 - t * t), 2 * s[:, None] * t, 2 * s - np.exp(-b))
    conditioned = ((np.abs(s) >= 1e-2 * (np.abs(b) + np.abs(w * t).sum(axis=1)))
                   & (np.abs(x) <= 2).all(axis=1)
                   & (np.abs(2 * s - np.exp(-b)) >= 1e-2 * (2 * np.abs(s) + np.exp(-b))))
    return exact, conditioned


def _normwise(a, b) -> float:
    a, b = np.asarray(a, np.longdouble), np.asarray(b, np.longdouble)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def test_a_million_samples_timed_against_the_cpu_paths() -> None:
    """Times, printed (no timing asserts): the GPU kernel, pyjlad.vmap on all cores.

    Agreement with the CPU: 1e-12 relative element by element for every well-conditioned sample (see
    :func:`_tanh_model_exact`; about 86% of them), and 1e-12 normwise (largest difference over largest
    gradient) for all 10^6; both within 1e-13 normwise of the gradients derived by hand in long double.
    (Among 10^6 random samples some have ``s`` near 1e-6 of its terms: there float64 itself, on the CPU
    too, and JAX, is 1e-11 off element by element.)
    """
    import pyjlad

    n = 1_000_000
    x, w, b = (np.random.default_rng(5).normal(size=(n, 3)), np.random.default_rng(6).normal(size=3), np.zeros(n))
    b[:] = np.random.default_rng(7).normal(size=n)
    before = (x.copy(), w.copy(), b.copy())
    bg = pg.vmap_grad(tanh_model, wrt=(0, 1, 2), in_axes=(0, None, 0))
    bg(x[:10], w, b[:10])  # build and load
    start = time.perf_counter()
    gpu = bg(x, w, b)
    gpu_s = time.perf_counter() - start
    cpu = pyjlad.vmap(pyjlad.grad(tanh_model, wrt=(0, 1, 2)), in_axes=(0, None, 0))
    cpu(x[:10], w, b[:10])
    start = time.perf_counter()
    ref = cpu(x, w, b)
    cpu_s = time.perf_counter() - start
    exact, conditioned = _tanh_model_exact(*before)
    for g, r, e in zip(gpu, ref, exact):
        assert _normwise(g, r) <= 1e-12
        assert _relative(g[conditioned], r[conditioned]) <= 1e-12
        assert _normwise(g, e) <= 1e-13 and _normwise(r, e) <= 1e-13
    worst = max(_relative(g, r) for g, r in zip(gpu, ref))
    print(f"\n10^6 samples: GPU {gpu_s * 1e3:.1f} ms (with copies), pyjlad.vmap on all cores {cpu_s * 1e3:.1f} ms; "
          f"{int(conditioned.sum())} well-conditioned samples; largest elementwise relative difference "
          f"{worst:.1e} (normwise {max(_normwise(g, r) for g, r in zip(gpu, ref)):.1e})")


def test_device_derivatives_in_a_numba_cuda_kernel() -> None:
    """device_grad / device_jvp called in a user's @cuda.jit kernel, launched; against their CPU builds."""
    pytest.importorskip("numba_cuda", reason="a GPU is present but numba-cuda is not installed: "
                                             "pip install numba-cuda to run this test")

    from numba import cuda, float64
    from test_gpu_device_fns import sin_sum

    arr = float64[::1]
    device_fn = cuda.jit(device=True)(sin_sum)
    grad = pg.device_grad(device_fn, (float64, arr), wrt=(0, 1))
    jvp = pg.device_jvp(device_fn, (float64, arr), wrt=(0, 1))
    dgrad, djvp = grad.declare(), jvp.declare()

    @cuda.jit
    def kernel(xs, a, gas, ta, out, tangents, shared):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            out[i] = dgrad(xs[i], a, gas[i])
            tangents[i] = djvp(xs[i], a, 0.5, ta)
            dgrad(xs[i], a, shared)  # all threads add into one gradient array (Enzyme's atomic adds)

    n = 1000
    rng = np.random.default_rng(0)
    xs, a, ta = rng.normal(size=n), rng.normal(size=8), rng.normal(size=8)
    gas = np.zeros((n, 8))
    out, tangents = np.zeros(n), np.zeros(n)
    d_gas, d_out, d_tan = cuda.to_device(gas), cuda.to_device(out), cuda.to_device(tangents)
    d_shared = cuda.to_device(np.zeros(8))
    kernel[(n + 127) // 128, 128](cuda.to_device(xs), cuda.to_device(a), d_gas, cuda.to_device(ta), d_out, d_tan,
                                  d_shared)
    out, tangents, gas = d_out.copy_to_host(), d_tan.copy_to_host(), d_gas.copy_to_host()
    np.testing.assert_allclose(d_shared.copy_to_host(), gas.sum(axis=0), rtol=1e-10)  # in any order
    for i in range(0, n, 97):
        ga = np.zeros(8)
        assert math.isclose(out[i], grad.on_cpu()(xs[i], a, ga), rel_tol=1e-12)
        assert _relative(gas[i], ga) <= 1e-12
        assert math.isclose(tangents[i], jvp.on_cpu()(xs[i], a, 0.5, ta), rel_tol=1e-12)


@njit
def recurrence(x, n):
    """A loop whose trip count is a per-sample argument: Enzyme keeps its tape on CUDA's device heap."""
    s = x
    for _ in range(n):
        s = math.sin(s) + x
    return s


def _recurrence_derivative(x: float, n: int) -> float:
    """By hand: s_{k+1} = sin(s_k) + x, so ds_{k+1}/dx = cos(s_k) ds_k/dx + 1, with ds_0/dx = 1."""
    s, d = x, 1.0
    for _ in range(n):
        s, d = math.sin(s) + x, math.cos(s) * d + 1.0
    return d


def test_a_tape_on_the_device_heap() -> None:
    x = np.linspace(-2.0, 2.0, 100_000)
    n = np.arange(x.size, dtype=np.int64) % 17
    bg = pg.vmap_grad(recurrence, wrt=0, in_axes=(0, 0))
    assert "malloc" in bg.ptx(x, n)
    g = bg(x, n)
    assert _relative(g, bg.on_cpu(x, n)) <= 1e-12
    picked = range(0, x.size, 997)
    assert _relative(g[list(picked)], [_recurrence_derivative(x[i], int(n[i])) for i in picked]) <= 1e-12


def test_device_derivatives_errors_layouts_and_tapes_in_a_numba_cuda_kernel() -> None:
    """On the GPU: a raising sample's thread returns (its output is not written), a gradient array laid out
    otherwise gives NaN and is left alone, and a derivative with a tape (device malloc) in a user kernel."""
    pytest.importorskip("numba_cuda", reason="a GPU is present but numba-cuda is not installed: "
                                             "pip install numba-cuda to run this test")
    from numba import cuda, float64
    from test_gpu_device_fns import checked_log, matrix_form, sin_sum

    arr = float64[::1]
    dlog = pg.device_grad(cuda.jit(device=True)(checked_log), (float64, arr), wrt=0)
    dsin = pg.device_grad(cuda.jit(device=True)(sin_sum), (float64, arr), wrt=(0, 1))
    dmat = pg.device_grad(cuda.jit(device=True)(matrix_form), (float64[:, :], arr), wrt=(0, 1))
    assert "malloc" in dmat.ptx()
    glog, gsin, gmat = dlog.declare(), dsin.declare(), dmat.declare()

    @cuda.jit
    def kernel(xs, a, logs, wrong, nans, m, gm, gv, mats):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            nans[i] = gsin(xs[i], a, wrong)  # wrong: 4 elements for a's 3
            if i == 0:
                mats[0] = gmat(m, a, gm, gv)
            logs[i] = glog(xs[i], a)  # raises for xs[i] <= 0: numba-cuda returns from the thread here

    n = 256
    xs = np.linspace(-1.0, 2.0, n)
    a = np.array([3.0, 0.5, -1.0])
    m = np.arange(6.0).reshape(2, 3) / 7.0
    sentinel = 42.0
    d = {k: cuda.to_device(v) for k, v in dict(
        xs=xs, a=a, logs=np.full(n, sentinel), wrong=np.zeros(4), nans=np.zeros(n), m=m, gm=np.zeros_like(m),
        gv=np.zeros(3), mats=np.zeros(1)).items()}
    kernel[2, 128](d["xs"], d["a"], d["logs"], d["wrong"], d["nans"], d["m"], d["gm"], d["gv"], d["mats"])
    logs, nans = d["logs"].copy_to_host(), d["nans"].copy_to_host()
    positive = xs > 0.0
    np.testing.assert_allclose(logs[positive], a[0] / xs[positive], rtol=1e-12)  # d/dx 3 log x = 3 / x
    assert np.all(logs[~positive] == sentinel)
    assert np.all(np.isnan(nans)) and not d["wrong"].copy_to_host().any()
    gm, gv = np.zeros_like(m), np.zeros(3)
    value = dmat.on_cpu()(m, a, gm, gv)
    assert math.isclose(d["mats"].copy_to_host()[0], value, rel_tol=1e-12)
    assert _relative(d["gm"].copy_to_host(), gm) <= 1e-12 and _relative(d["gv"].copy_to_host(), gv) <= 1e-12
