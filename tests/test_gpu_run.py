"""pyjlad.gpu on a real GPU: the kernels launched, against the same body compiled for the CPU.

Every test here needs the CUDA driver and a GPU, asked of the driver itself
(:func:`pyjlad.gpu.cuda_status`: ``libcuda`` loads, ``cuInit`` succeeds, at least
one device), and cuda-core to launch with; without them the tests skip with the
reason. Tolerances: float64 1e-12 relative, float32 1e-5 (the issue's).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

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


def test_a_million_samples_timed_against_the_cpu_paths() -> None:
    """Times, printed (no timing asserts): the GPU kernel, pyjlad.vmap on all cores."""
    import pyjlad

    n = 1_000_000
    x, w, b = (np.random.default_rng(5).normal(size=(n, 3)), np.ones(3), np.zeros(n))
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
    for g, r in zip(gpu, ref):
        assert _relative(g, r) <= 1e-12
    print(f"\n10^6 samples: GPU {gpu_s * 1e3:.1f} ms (with copies), pyjlad.vmap on all cores {cpu_s * 1e3:.1f} ms")


def test_device_derivatives_in_a_numba_cuda_kernel() -> None:
    """device_grad / device_jvp called in a user's @cuda.jit kernel, launched; against their CPU builds."""
    pytest.importorskip("numba_cuda", reason="a GPU is present but numba-cuda is not installed: "
                                             "pip install numba-cuda to run this test")
    import math

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
