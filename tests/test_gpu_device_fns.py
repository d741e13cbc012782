"""pyjlad.gpu.device_grad / device_jvp without a GPU: derivatives of device functions as device functions.

* The derivative, with its generated Numba-CUDA-ABI wrapper, compiled for the
  CPU (``on_cpu``) gives JAX's float64 numbers (float32: 1e-5) for numbers,
  contiguous and strided arrays, several outputs and forward mode; gradient
  arrays accumulate, inputs are unchanged, a gradient laid out otherwise gives NaN.
* Its PTX (LLVM 15) assembles with ``ptxas`` for sm_80 and sm_90.
* Where numba-cuda can compile kernels (it needs libNVVM and NVRTC), a user's
  ``@cuda.jit`` kernel calling the declared derivative compiles to PTX, both
  assemble with ``ptxas -c`` and ``nvlink`` links them for sm_80 and sm_90,
  the kernel's ``.extern`` declaration having the derivative's parameters.

Nothing here runs on a GPU (tests/test_gpu_run.py does, where there is one).
"""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import boolean, float32, float64, int64

import pyjlad
import pyjlad.gpu as pg
from pyjlad.gpu.tools import libdevice_path, ptxas_path

jax.config.update("jax_enable_x64", True)


def _tools_missing() -> str:
    try:
        libdevice_path()
    except pyjlad.PyjladError as exc:
        return str(exc)
    return "" if ptxas_path() is not None else "NVIDIA's ptxas is not installed"


pytestmark = pytest.mark.skipif(bool(_tools_missing()), reason=f"needs the CUDA toolkit: {_tools_missing()}")


def sin_sum(x, a):
    s = 0.0
    for i in range(a.shape[0]):
        s += math.sin(a[i] * x)
    return s + x * x


def sin_sum_jax(x, a):
    return jnp.sum(jnp.sin(a * x)) + x * x


def two_scalars(x, y, w):
    return math.tanh(x * y) + w[0] * x + math.exp(y) * w[1]


def two_scalars_jax(x, y, w):
    return jnp.tanh(x * y) + w[0] * x + jnp.exp(y) * w[1]


def matrix_form(m, v):
    s = 0.0
    for i in range(m.shape[0]):
        t = 0.0
        for j in range(m.shape[1]):
            t += m[i, j] * v[j]
        s += math.log(1.0 + t * t)
    return s


def matrix_form_jax(m, v):
    return jnp.sum(jnp.log(1.0 + (m @ v) ** 2))


def with_count_and_flag(x, n, flag, a):
    s = 0.0
    for i in range(n):
        s += a[i] * x ** 2
    return s if flag else -s


def with_count_and_flag_jax(x, n, flag, a):
    s = jnp.sum(a[:n] * x ** 2)
    return s if flag else -s


def _copy(values):
    return [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in values]


def _unchanged(args, before) -> None:
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)


def test_gradient_of_a_number_and_an_array_accumulates() -> None:
    x, a = 0.7, np.array([0.5, 1.5, -2.0, 0.25])
    before = _copy([x, a])
    g = pg.device_grad(sin_sum, (float64, float64[::1]), wrt=(0, 1))
    assert str(g.signature.return_type) == "float64" and len(g.signature.args) == 3
    ga = np.ones_like(a)
    dx = g.on_cpu()(x, a, ga)
    jx, ja = jax.grad(sin_sum_jax, argnums=(0, 1))(*before)
    assert math.isclose(dx, float(jx), rel_tol=1e-12)
    np.testing.assert_allclose(ga - 1.0, np.asarray(ja), rtol=1e-12)  # added to what was there
    _unchanged([x, a], before)


def test_two_numbers_give_a_tuple_and_libdevice_names_map_back() -> None:
    x, y, w = 0.3, -0.8, np.array([1.25, -0.5])
    before = _copy([x, y, w])
    g = pg.device_grad(two_scalars, (float64, float64, float64[::1]), wrt=(0, 1))
    assert str(g.signature.return_type) == "UniTuple(float64 x 2)"
    dx, dy = g.on_cpu()(x, y, w)
    jx, jy = jax.grad(two_scalars_jax, argnums=(0, 1))(*before)
    assert math.isclose(dx, float(jx), rel_tol=1e-12) and math.isclose(dy, float(jy), rel_tol=1e-12)
    _unchanged([x, y, w], before)


def test_strided_matrix_gradient_and_the_value_when_only_arrays_are_differentiated() -> None:
    rng = np.random.default_rng(3)
    big = rng.normal(size=(6, 5))
    m = big[::2, 1::2]  # 3x2, strided in both dimensions: Numba's strides are passed through
    v = rng.normal(size=2)
    before = _copy([m, v])
    g = pg.device_grad(matrix_form, (float64[:, :], float64[::1]), wrt=(0,))
    gm = np.zeros((6, 5))[::2, 1::2]  # laid out as ``m``
    value = g.on_cpu()(m, v, gm)
    assert math.isclose(value, float(matrix_form_jax(*before)), rel_tol=1e-12)
    np.testing.assert_allclose(gm, np.asarray(jax.grad(matrix_form_jax)(*before)), rtol=1e-12)
    _unchanged([m, v], before)


def test_a_gradient_laid_out_otherwise_gives_nan_and_is_left_alone() -> None:
    g = pg.device_grad(sin_sum, (float64, float64[::1]), wrt=(0, 1))
    a, ga = np.array([0.5, 1.5, -2.0]), np.zeros(4)
    assert math.isnan(g.on_cpu()(0.7, a, ga))
    assert not ga.any()


@pytest.mark.parametrize("flag", [True, False])
def test_integer_and_boolean_arguments(flag: bool) -> None:
    x, a = 1.3, np.array([0.5, -1.5, 2.0])
    g = pg.device_grad(with_count_and_flag, (float64, int64, boolean, float64[::1]), wrt=(0, 3))
    ga = np.zeros_like(a)
    dx = g.on_cpu()(x, 2, flag, a, ga)
    jx, ja = jax.grad(with_count_and_flag_jax, argnums=(0, 3))(x, 2, flag, a.copy())
    assert math.isclose(dx, float(jx), rel_tol=1e-12)
    np.testing.assert_allclose(ga, np.asarray(ja), rtol=1e-12, atol=0)


def test_float32() -> None:
    x, a = np.float32(0.7), np.array([0.5, 1.5, -2.0], np.float32)
    g = pg.device_grad(sin_sum, (float32, float32[::1]), wrt=(0, 1))
    ga = np.zeros_like(a)
    dx = g.on_cpu()(x, a, ga)
    jx, ja = jax.grad(sin_sum_jax, argnums=(0, 1))(np.float64(x), a.astype(np.float64))
    assert math.isclose(dx, float(jx), rel_tol=1e-5)
    np.testing.assert_allclose(ga, np.asarray(ja), rtol=1e-5)


def test_jvp_with_a_number_and_an_array_tangent() -> None:
    x, a = 0.7, np.array([0.5, 1.5, -2.0])
    tx, ta = 0.4, np.array([1.0, -2.0, 0.5])
    before = _copy([x, a, tx, ta])
    j = pg.device_jvp(sin_sum, (float64, float64[::1]), wrt=(0, 1))
    assert len(j.signature.args) == 4
    tangent = j.on_cpu()(x, a, tx, ta)
    _, expected = jax.jvp(sin_sum_jax, (before[0], before[1]), (before[2], before[3]))
    assert math.isclose(tangent, float(expected), rel_tol=1e-12)
    _unchanged([x, a, tx, ta], before)


def checked_log(x, a):
    if x <= 0.0:
        raise ValueError("x must be positive")
    return math.log(x) * a[0]


def test_the_functions_own_error_surfaces_on_the_cpu() -> None:
    g = pg.device_grad(checked_log, (float64, float64[::1]), wrt=0)
    assert math.isclose(g.on_cpu()(2.0, np.array([3.0])), 1.5, rel_tol=1e-12)  # d/dx 3 log x = 3 / x
    with pytest.raises(ValueError, match="x must be positive"):
        g.on_cpu()(-1.0, np.array([3.0]))


def test_one_derivative_per_function_types_and_wrt() -> None:
    g = pg.device_grad(sin_sum, (float64, float64[::1]), wrt=(0, 1))
    assert pg.device_grad(sin_sum, "float64(float64, float64[::1])", wrt=[1, 0]) is g
    assert pg.device_jvp(sin_sum, (float64, float64[::1]), wrt=(0, 1)).name != g.name


def test_bad_wrt_is_refused() -> None:
    with pytest.raises(pyjlad.PyjladError, match="wrt"):
        pg.device_grad(sin_sum, (float64, float64[::1]), wrt=5)
    with pytest.raises(pyjlad.PyjladError, match="argtypes"):
        pg.device_grad(sin_sum, ("float64",), wrt=0)
    with pytest.raises(pyjlad.PyjladError, match="argtypes"):
        pg.device_grad(sin_sum, "float64(flot64)", wrt=0)


def _ptxas(path: Path, arch: str, out: Path) -> str:
    proc = subprocess.run([str(ptxas_path()), f"-arch={arch}", "-c", "-v", str(path), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _params(ptx: str, name: str, keyword: str) -> int:
    """The number of parameters of ``name`` where ``keyword`` (``.extern .func``/``.visible .func``) declares it."""
    match = re.search(re.escape(keyword) + r"\s*\(.*?\)\s*" + re.escape(name) + r"\s*\((.*?)\)", ptx, re.S)
    assert match, f"{keyword} {name} not in the PTX"
    return match.group(1).count(".param")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_derivative_ptx_assembles(arch: str, tmp_path: Path) -> None:
    for g in (pg.device_grad(sin_sum, (float64, float64[::1]), wrt=(0, 1)),
              pg.device_jvp(sin_sum, (float64, float64[::1]), wrt=(0, 1)),
              pg.device_grad(matrix_form, (float64[:, :], float64[::1]), wrt=(0, 1)),
              pg.device_grad(checked_log, (float64, float64[::1]), wrt=0)):
        report = _ptxas(g.ptx_file(), arch, tmp_path / f"{g.name}.o")
        assert g.name in report
        if g.name.startswith("pyjlad_grad") and len(g.signature.args) > len(g.argtypes):  # gradient arrays
            # Enzyme adds into gradient arrays atomically on NVPTX: threads may share one gradient array
            assert re.search(r"\b(atom|red)(\.global)?\.add\.f64\b", g.ptx())
        # ret, x, a (7), ga (7): Numba CUDA's convention for (float64, float64[::1], float64[::1])
        if g.name.startswith("pyjlad_grad") and len(g.signature.args) == 3 and g.signature.args[0] == float64:
            assert _params(g.ptx(), g.name, ".visible .func") == 16


def _numba_cuda_missing() -> str:
    if importlib.util.find_spec("numba_cuda") is None:
        return "numba-cuda is not installed (pip install numba-cuda; it is not in the test extra)"
    return ""


@pytest.mark.skipif(not _numba_cuda_missing(), reason="numba-cuda is installed: declare() links (tested below)")
def test_declaring_without_numba_cuda_says_to_install_it() -> None:
    """Numba 0.68 still ships a ``numba.cuda`` of its own, whose ``declare_device`` takes no ``link``: a bare
    ``TypeError`` from it before, now what to install."""
    g = pg.device_grad(sin_sum, (float64, float64[::1]), wrt=(0, 1))
    with pytest.raises(pyjlad.ArgumentError, match=r"needs numba-cuda \(pip install numba-cuda\)"):
        g.declare()


@pytest.mark.skipif(bool(_numba_cuda_missing()), reason=_numba_cuda_missing() or "-")
@pytest.mark.parametrize("arch,cc", [("sm_80", (8, 0)), ("sm_90", (9, 0))])
def test_user_kernel_calling_the_derivative_links(arch: str, cc: tuple[int, int], tmp_path: Path) -> None:
    try:
        import _numba_cuda_redirector  # noqa: F401 - numba.cuda is numba-cuda's (its .pth does this when installed)
    except ImportError:
        pass
    from numba import cuda

    @cuda.jit(device=True)
    def device_sin_sum(x, a):
        s = 0.0
        for i in range(a.shape[0]):
            s += math.sin(a[i] * x)
        return s + x * x

    g = pg.device_grad(device_sin_sum, (float64, float64[::1]), wrt=(0, 1))
    j = pg.device_jvp(device_sin_sum, (float64, float64[::1]), wrt=(0, 1))
    # a tape on CUDA's device heap: malloc and free are resolved when linking
    t = pg.device_grad(cuda.jit(device=True)(matrix_form), (float64[:, :], float64[::1]), wrt=(0, 1))
    grad, jvp, taped = g.declare(), j.declare(), t.declare()

    @cuda.jit
    def kernel(xs, a, ga, ta, out, tangents, m, gm, gv):
        i = cuda.grid(1)
        if i < xs.shape[0]:
            out[i] = grad(xs[i], a, ga)
            tangents[i] = jvp(xs[i], a, 1.0, ta)
        if i == 0:
            out[0] += taped(m, a, gm, gv)

    arr = float64[::1]
    try:
        ptx, _ = cuda.compile_ptx(kernel, (arr,) * 6 + (float64[:, :], float64[:, :], arr), cc=cc)
    except Exception as exc:  # noqa: BLE001 - numba-cuda without NVRTC/libNVVM: an environment limit
        if "nvrtc" in str(exc).lower() or "nvvm" in str(exc).lower():
            pytest.skip(f"numba-cuda cannot compile kernels here: {str(exc).splitlines()[0]}")
        raise
    assert "malloc" in t.ptx()
    (tmp_path / "kernel.ptx").write_text(ptx)
    objects = [tmp_path / "kernel.o"]
    _ptxas(tmp_path / "kernel.ptx", arch, objects[0])
    for d in (g, j, t):
        assert _params(ptx, d.name, ".extern .func") == _params(d.ptx(), d.name, ".visible .func")
        objects.append(tmp_path / f"{d.name}.o")
        _ptxas(d.ptx_file(), arch, objects[-1])
    nvlink = Path(str(ptxas_path())).with_name("nvlink")
    proc = subprocess.run([str(nvlink), f"-arch={arch}", *map(str, objects), "-o", str(tmp_path / "k.cubin")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _numba_cuda():
    """numba-cuda's ``numba.cuda`` (its ``.pth`` file installs the redirection when it is installed normally)."""
    try:
        import _numba_cuda_redirector  # noqa: F401
    except ImportError:
        pass
    from numba import cuda

    return cuda


def _kernel_on_cpu(kernel, argtypes, derivative):
    """numba-cuda's code for ``kernel`` (compiled as a device function: Numba CUDA's LLVM IR, no libNVVM),
    retargeted to the CPU and linked with the CPU build of ``derivative``: numba-cuda's own call site runs."""
    import ctypes

    from numba import types
    from numba.cuda import compiler

    from pyjlad import cache
    from pyjlad.engines.objects import load_library
    from pyjlad.gpu.device_fns import host_target_lines
    from pyjlad.gpu.host import host_module
    from pyjlad.gpu.tools import llvm_tool, run_tool
    from pyjlad.toolchain import locate

    cres = compiler.compile_cuda(kernel, types.void, argtypes, cc=(8, 0))
    assert len(cres.library.llvm_strs) == 1
    typed = cres.library.get_llvm_str()  # typed pointers (NVVM's dialect): read by LLVM 15 into opaque ones
    bitcode = run_tool([llvm_tool("llvm-as"), "-opaque-pointers", "-", "-o", "-"], "reading", typed.encode())
    text = run_tool([llvm_tool("llvm-dis"), "-", "-o", "-"], "writing", bitcode).decode()
    modules = [*derivative.cpu_modules(), host_module(text, host_target_lines(derivative.sweep))]
    symbol = cres.fndesc.mangled_name
    library = load_library(cache.cache_key("test-kernel-on-cpu", *modules),
                           lambda: locate().link(modules, what="a test kernel"), symbol, "a test kernel")
    nparams = len(re.search(r"define i32 @\S+\((.*?)\)", typed).group(1).split(","))
    function = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.c_void_p] * nparams)(
        library.get_pointer_to_function(symbol))

    def call(*arrays):
        ret = ctypes.c_void_p()
        values = [ctypes.addressof(ret)]
        for a in arrays:
            values += [None, None, a.size, a.itemsize, a.ctypes.data, *a.shape, *a.strides]
        assert len(values) == nparams
        return function(*values)

    return library, call


@pytest.mark.skipif(bool(_numba_cuda_missing()), reason=_numba_cuda_missing() or "-")
def test_numba_cuda_call_sites_run_on_the_cpu() -> None:
    """The calls numba-cuda generates for the declared derivatives (arrays expanded, tuple results through the
    return pointer) executed against the derivatives' wrappers: the ABI agreed on in fact, not only by name."""
    cuda = _numba_cuda()
    arr = float64[::1]
    grad = pg.device_grad(cuda.jit(device=True)(sin_sum), (float64, arr), wrt=(0, 1))
    jvp = pg.device_jvp(cuda.jit(device=True)(sin_sum), (float64, arr), wrt=(0, 1))
    pair = pg.device_grad(cuda.jit(device=True)(two_scalars), (float64, float64, arr), wrt=(0, 1))
    dgrad, djvp, dpair = grad.declare(), jvp.declare(), pair.declare()

    def grad_kernel(xs, a, ga, out):
        for i in range(xs.shape[0]):
            out[i] = dgrad(xs[i], a, ga)

    def jvp_kernel(xs, a, ta, out):
        for i in range(xs.shape[0]):
            out[i] = djvp(xs[i], a, 0.5, ta)

    def pair_kernel(xs, w, out):
        for i in range(xs.shape[0]):
            dx, dy = dpair(xs[i], -0.8, w)
            out[2 * i] = dx
            out[2 * i + 1] = dy

    counted = pg.device_grad(cuda.jit(device=True)(with_count_and_flag), (float64, int64, boolean, arr),
                             wrt=(0, 3))
    dcounted = counted.declare()

    def counted_kernel(xs, a, ga, out):
        for i in range(xs.shape[0]):
            out[i] = dcounted(xs[i], 3, i % 2 == 0, a, ga)  # an integer and a boolean (a byte) by value

    xs, a = np.array([0.7, -0.2, 1.3]), np.array([0.5, 1.5, -2.0, 0.25])
    ta, w = np.array([1.0, -2.0, 0.5, 0.0]), np.array([1.25, -0.5])
    before = _copy([xs, a, ta, w])

    _, run = _kernel_on_cpu(grad_kernel, (arr,) * 4, grad)
    ga, out = np.zeros_like(a), np.zeros_like(xs)
    assert run(xs, a, ga, out) == 0
    ja = np.zeros_like(a)
    for i, x in enumerate(before[0]):
        jx, jai = jax.grad(sin_sum_jax, argnums=(0, 1))(x, before[1])
        assert math.isclose(out[i], float(jx), rel_tol=1e-12)
        ja += np.asarray(jai)
    np.testing.assert_allclose(ga, ja, rtol=1e-12)  # three calls accumulated

    _, run = _kernel_on_cpu(jvp_kernel, (arr,) * 4, jvp)
    out = np.zeros_like(xs)
    assert run(xs, a, ta, out) == 0
    for i, x in enumerate(before[0]):
        _, expected = jax.jvp(sin_sum_jax, (x, before[1]), (0.5, before[2]))
        assert math.isclose(out[i], float(expected), rel_tol=1e-12)

    _, run = _kernel_on_cpu(pair_kernel, (arr,) * 3, pair)
    out = np.zeros(2 * xs.size)
    assert run(xs, w, out) == 0
    for i, x in enumerate(before[0]):
        jx, jy = jax.grad(two_scalars_jax, argnums=(0, 1))(x, -0.8, before[3])
        assert math.isclose(out[2 * i], float(jx), rel_tol=1e-12)
        assert math.isclose(out[2 * i + 1], float(jy), rel_tol=1e-12)

    _, run = _kernel_on_cpu(counted_kernel, (arr,) * 4, counted)
    ga, out = np.zeros_like(a), np.zeros_like(xs)
    assert run(xs, a, ga, out) == 0
    ja = np.zeros_like(a)
    for i, x in enumerate(before[0]):
        jx, jai = jax.grad(with_count_and_flag_jax, argnums=(0, 3))(x, 3, i % 2 == 0, before[1])
        assert math.isclose(out[i], float(jx), rel_tol=1e-12)
        ja += np.asarray(jai)
    np.testing.assert_allclose(ga, ja, rtol=1e-12)
    _unchanged([xs, a, ta, w], before)


@pytest.mark.skipif(bool(_numba_cuda_missing()), reason=_numba_cuda_missing() or "-")
def test_device_functions_calling_device_functions() -> None:
    """A device function calling device functions (two levels): they are compiled by Numba's CPU pipeline
    too, not handed to it as CUDA dispatchers (which it cannot call)."""
    cuda = _numba_cuda()
    namespace = {"math": math, "cuda": cuda}
    exec(  # module-level globals, as device functions usually are
        "@cuda.jit(device=True)\n"
        "def square(x):\n"
        "    return x * x\n"
        "@cuda.jit(device=True)\n"
        "def term(x, w):\n"
        "    return square(math.sin(w * x))\n"
        "@cuda.jit(device=True)\n"
        "def outer(x, a):\n"
        "    s = 0.0\n"
        "    for i in range(a.shape[0]):\n"
        "        s += term(x, a[i])\n"
        "    return s + square(x)\n", namespace)

    def outer_jax(x, a):
        return jnp.sum(jnp.sin(a * x) ** 2) + x * x

    x, a = 0.9, np.array([0.3, -1.1, 2.5])
    before = _copy([x, a])
    g = pg.device_grad(namespace["outer"], (float64, float64[::1]), wrt=(0, 1))
    ga = np.zeros_like(a)
    dx = g.on_cpu()(x, a, ga)
    jx, ja = jax.grad(outer_jax, argnums=(0, 1))(*before)
    assert math.isclose(dx, float(jx), rel_tol=1e-12)
    np.testing.assert_allclose(ga, np.asarray(ja), rtol=1e-12)
    assert ".visible .func" in g.ptx()
    _unchanged([x, a], before)


@pytest.mark.skipif(bool(_numba_cuda_missing()), reason=_numba_cuda_missing() or "-")
def test_cuda_intrinsics_inside_the_differentiated_function_are_refused() -> None:
    cuda = _numba_cuda()

    @cuda.jit(device=True)
    def by_thread(x):
        return x * cuda.threadIdx.x

    with pytest.raises(pyjlad.UnsupportedFunctionError, match="threadIdx"):
        pg.device_grad(by_thread, (float64,), wrt=0)
