"""pyjlad.gpu without a GPU: the generated kernels as PTX (assembled by ptxas), and the same code run on the CPU.

* The batched kernel of each test function compiles to PTX with LLVM 15's NVPTX
  backend (sm_80 and sm_86) and assembles with NVIDIA's ``ptxas`` for sm_80 and
  sm_90 with no local-memory spills (``ptxas -v``).
* The kernel's per-sample body, from the same Enzyme output, compiled for the
  CPU (``on_cpu``) gives JAX's float64 per-sample gradients, and the embedded
  engine's (``pyjlad.vmap(pyjlad.value_and_grad(f))``).
* Errors of single samples are reported per batch; what cannot run on a GPU is
  refused; ``pyjlad.gpu`` imports with no CUDA package.

Nothing here runs on a GPU (tests/test_gpu_run.py does, where there is one).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad
import pyjlad.gpu as pg
from pyjlad.gpu.ptx import ARCHES
from pyjlad.gpu.tools import libdevice_path, ptxas_path

jax.config.update("jax_enable_x64", True)


def _have_cuda_tools() -> str:
    try:
        libdevice_path()
    except pyjlad.PyjladError as exc:
        return str(exc)
    return "" if ptxas_path() else "NVIDIA's ptxas not found"


needs_cuda_tools = pytest.mark.skipif(bool(_have_cuda_tools()), reason=_have_cuda_tools() or "ok")


# --- the test functions and their JAX equivalents --------------------------------------------------

@njit
def tanh_model(x, w, b):
    """A sample x (3,), shared weights w (3,), a per-sample bias b; raises for b < -100."""
    s = b
    for i in range(x.shape[0]):
        s += w[i] * math.tanh(x[i])
    if b < -100.0:
        raise ValueError("b is below -100")
    return s * s + math.exp(-b)


def tanh_model_jax(x, w, b):
    s = b + jnp.sum(w * jnp.tanh(x))
    return s * s + jnp.exp(-b)


@njit
def scalar_model(x, k):
    return math.sin(x) * math.exp(-k * x) + x ** 2.5 + math.log(1.0 + x * x) + math.sqrt(x) * math.atan(k)


def scalar_model_jax(x, k):
    return jnp.sin(x) * jnp.exp(-k * x) + x ** 2.5 + jnp.log(1.0 + x * x) + jnp.sqrt(x) * jnp.arctan(k)


@njit
def matrix_model(a, v, scale, power):
    """A 2x3 sample matrix a, a shared vector v (3,), a shared number scale, an integer power."""
    total = 0.0
    for i in range(a.shape[0]):
        row = 0.0
        for j in range(a.shape[1]):
            row += a[i, j] * v[j]
        total += scale * row ** power + math.cos(row)
    return total


def matrix_model_jax(a, v, scale, power):
    rows = a @ v
    return jnp.sum(scale * rows ** power + jnp.cos(rows))


@njit
def float32_model(x, c):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * c + x[i] * x[i]
    return s


def float32_model_jax(x, c):
    return jnp.sum(jnp.sin(x) * c + x * x)


def _tanh_args(n: int = 37):
    rng = np.random.default_rng(1)
    return (rng.normal(size=(n, 3)), rng.normal(size=3), rng.normal(size=n))


def _scalar_args(n: int = 29):
    rng = np.random.default_rng(2)
    return (rng.uniform(0.1, 2.0, n), rng.uniform(-1.0, 1.0, n))


def _matrix_args(n: int = 21):
    rng = np.random.default_rng(3)
    return (rng.normal(size=(2 * n, 2, 3))[::2], rng.normal(size=3), 0.7, 3)  # a strided batch


def _float32_args(n: int = 17):
    rng = np.random.default_rng(4)
    return (rng.normal(size=(n, 4)).astype(np.float32), 1.5)


#: name -> (function, JAX function, args, wrt, in_axes, relative tolerance against JAX float64)
CASES = {
    "tanh_model": (tanh_model, tanh_model_jax, _tanh_args, (0, 1, 2), (0, None, 0), 1e-12),
    "scalar_model": (scalar_model, scalar_model_jax, _scalar_args, (0, 1), 0, 1e-12),
    "matrix_model": (matrix_model, matrix_model_jax, _matrix_args, (0, 1, 2), (0, None, None, None), 1e-12),
    "float32_model": (float32_model, float32_model_jax, _float32_args, (0,), (0, None), 1e-5),
}


def _jax_oracle(fj, args, wrt, in_axes):
    """Per-sample values and gradients from JAX in float64, on float64 copies of ``args``."""
    copies = tuple(jnp.asarray(np.array(a, dtype=np.float64)) if isinstance(a, (np.ndarray, float)) else a
                   for a in args)
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    static = {k: a for k, a in enumerate(copies) if isinstance(a, int)}  # the integer power: a constant

    def f(*xs):
        full = list(xs)
        for k, a in static.items():
            full.insert(k, a)
        return fj(*full)

    dyn = tuple(a for k, a in enumerate(copies) if k not in static)
    dyn_axes = tuple(ax for k, ax in enumerate(axes) if k not in static)
    argnums = tuple(sum(1 for j in range(k) if j not in static) for k in wrt)
    values, grads = jax.vmap(jax.value_and_grad(f, argnums=argnums), in_axes=dyn_axes)(*dyn)
    return np.asarray(values), [np.asarray(g) for g in grads]


def _relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-300)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_compiled_body_matches_jax_and_the_embedded_engine(name: str) -> None:
    f, fj, make_args, wrt, in_axes, rtol = CASES[name]
    args = make_args()
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    values, grads = _jax_oracle(fj, before, wrt, in_axes)

    got_values, got_grads = pg.vmap_value_and_grad(f, wrt=wrt, in_axes=in_axes).on_cpu(*args)

    for a, b in zip(args, before):  # the caller's arrays are unchanged
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)
    assert _relative(got_values, values) <= rtol
    for k, g, want in zip(wrt, got_grads, grads):
        assert g.shape == want.shape, (k, g.shape, want.shape)
        assert g.dtype == np.asarray(args[k]).dtype
        assert _relative(g, want) <= rtol, (k, _relative(g, want))
    # The embedded engine (Enzyme on the CPU module, in pyjlad.vmap's parallel loop): the same numbers.
    embedded_values, embedded_grads = pyjlad.vmap(pyjlad.value_and_grad(f, wrt=wrt), in_axes=in_axes)(*args)
    np.testing.assert_allclose(got_values, embedded_values, rtol=1e-14, atol=0)
    for g, e in zip(got_grads, embedded_grads):
        np.testing.assert_allclose(g, e, rtol=1e-13, atol=1e-300)


def test_grad_alone_and_wrt_order() -> None:
    x, k = _scalar_args()
    gk, gx = pg.vmap_grad(scalar_model, wrt=(1, 0)).on_cpu(x, k)
    _, (wx, wk) = _jax_oracle(scalar_model_jax, (x, k), (0, 1), 0)
    assert _relative(gx, wx) <= 1e-12 and _relative(gk, wk) <= 1e-12
    single = pg.vmap_grad(scalar_model, wrt=0).on_cpu(x, k)
    assert isinstance(single, np.ndarray) and _relative(single, wx) <= 1e-12


def test_failing_samples_are_reported_per_batch() -> None:
    x, w, b = _tanh_args()
    b[[4, 11, 30]] = -500.0
    with pytest.raises(ValueError, match="b is below -100") as info:
        pg.vmap_grad(tanh_model, wrt=0, in_axes=(0, None, 0)).on_cpu(x, w, b)
    note = " ".join(getattr(info.value, "__notes__", []))
    assert "sample 4" in note and "3 of 37 samples" in note and "4, 11, 30" in note


def test_a_strided_sample_to_differentiate_is_refused() -> None:
    x = np.ones((5, 6))[:, ::2]
    with pytest.raises(pyjlad.ArgumentError, match="not C-contiguous"):
        pg.vmap_grad(tanh_model, wrt=0, in_axes=(0, None, 0)).on_cpu(x, np.ones(3), np.ones(5))


def test_host_only_calls_are_refused() -> None:
    @njit
    def temporary(x):
        return np.sum(np.sin(x) * x)  # a temporary array: Numba's allocating runtime

    with pytest.raises(pyjlad.UnsupportedFunctionError, match="cannot run on a GPU"):
        pg.vmap_grad(temporary).on_cpu(np.ones((4, 3)))


def test_bad_batches_are_refused() -> None:
    bg = pg.vmap_grad(scalar_model, wrt=0)
    with pytest.raises(pyjlad.ArgumentError, match="different leading sizes"):
        bg.on_cpu(np.ones(3), np.ones(4))
    with pytest.raises(pyjlad.ArgumentTypeError, match="batched gradients take"):
        bg.on_cpu(np.ones(3, np.complex128), np.ones(3))


def test_pyjlad_gpu_imports_without_any_cuda_package() -> None:
    code = ("import sys; sys.modules['cuda'] = None\n"  # any `import cuda...` fails
            "import pyjlad, pyjlad.gpu\n"
            "assert pyjlad.gpu.DeviceArray.__name__ == 'DeviceArray'\n"
            "ok, reason = pyjlad.gpu.cuda_status(); print(ok, reason)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


# --- PTX ------------------------------------------------------------------------------------------

_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


@needs_cuda_tools
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_compiles_to_ptx_and_assembles_without_spills(name: str) -> None:
    from pyjlad.gpu.ptx import ptxas_report

    f, _, make_args, wrt, in_axes, _ = CASES[name]
    bg = pg.vmap_value_and_grad(f, wrt=wrt, in_axes=in_axes)
    plan = bg.plan(make_args())
    reports = []
    for arch in ARCHES:
        ptx = bg.ptx(*make_args(), arch=arch)
        assert f".target {arch}" in ptx and f".entry {plan.names.kernel}(" in ptx
        # libdevice is linked in: nothing is left to resolve but CUDA's device heap (malloc/free), which
        # Enzyme's tape uses where a loop's trip count is data-dependent (matrix_model's integer power).
        externs = set(re.findall(r"\.extern \.func\s*(?:\([^)]*\)\s*)?(\w+)", ptx))
        assert externs <= ({"malloc", "free"} if name == "matrix_model" else set()), externs
        for target in (["sm_80", "sm_90"] if arch == "sm_80" else ["sm_86"]):
            report = ptxas_report(ptx, target)
            assert f"Compiling entry function '{plan.names.kernel}' for '{target}'" in report
            spills = _SPILLS.findall(report)
            assert spills, report
            assert all(stores == "0" and loads == "0" for _, stores, loads in spills), report
            reports.append(f"{name} {arch}->{target}: " + " | ".join(
                line.strip() for line in report.splitlines() if "stack frame" in line or "registers" in line))
    print("\n".join(reports))


@needs_cuda_tools
def test_every_libdevice_function_the_retargeting_names_compiles_with_llvm_15(tmp_path) -> None:
    """Each ``__nv_*`` function the retargeting can call (double and float) is in the libdevice found, and
    LLVM 15 compiles it to PTX that ptxas assembles for sm_90 (CUDA 13's libdevice included)."""
    from pyjlad.gpu.tools import llvm_tool, run_tool
    from pyjlad.targets.nvptx import LIBDEVICE_FUNCTIONS, NVPTX_DATALAYOUT, NVPTX_TRIPLE, libdevice_name

    wanted = {libdevice_name(n) for n in LIBDEVICE_FUNCTIONS} | {libdevice_name(n + "f") for n in LIBDEVICE_FUNCTIONS}
    (tmp_path / "stub.ll").write_text(f'target datalayout = "{NVPTX_DATALAYOUT}"\ntarget triple = "{NVPTX_TRIPLE}"\n')
    run_tool([llvm_tool("llvm-link"), tmp_path / "stub.ll", libdevice_path(), "-o", tmp_path / "all.bc"], "linking")
    kept = run_tool([llvm_tool("opt"), "-passes=internalize,globaldce",
                     "-internalize-public-api-list=" + ",".join(sorted(wanted)), tmp_path / "all.bc", "-o", "-"], "opt")
    ptx = run_tool([llvm_tool("llc"), "-O3", "-mcpu=sm_80", "-", "-o", "-"], "llc", kept).decode()
    compiled = set(re.findall(r"^\.visible \.func\s*(?:\([^)]*\)\s*)?(__nv_\w+)\(", ptx, re.M))
    assert compiled == wanted, sorted(wanted ^ compiled)
    (tmp_path / "all.ptx").write_text(ptx)
    result = subprocess.run([str(ptxas_path()), "-c", "-arch=sm_90", str(tmp_path / "all.ptx"), "-o",
                             str(tmp_path / "all.o")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.skipif(pg.cuda_status()[0], reason="a GPU is present: tests/test_gpu_run.py launches instead")
def test_calling_without_a_gpu_says_why() -> None:
    with pytest.raises(pyjlad.EngineUnavailableError, match="needs an NVIDIA GPU"):
        pg.vmap_grad(scalar_model)(*_scalar_args())
