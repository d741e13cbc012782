"""Functions Numba compiles with debug information (``@njit(debug=True)``, ``NUMBA_DEBUGINFO=1``) differentiate.

Numba attaches ``!dbg`` metadata to every function and instruction of such a module; the exported module
drops metadata, and before, the attachment on each ``define`` line stayed behind and ``opt`` refused the
module ("use of undefined metadata"), reported as a defect of pyjlad. Oracles: closed forms and JAX (float64),
computed from copies taken before the call.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad.errors import ParallelFallbackWarning


@njit(debug=True)
def _square(v):
    return v * v


@njit(debug=True)
def energy(x, w):
    out = np.empty_like(x)  # an allocation (Numba's runtime)
    for i in range(x.shape[0]):
        out[i] = _square(np.sin(w * x[i]))  # a call into another debug=True function
    return out.sum()


@njit(debug=True)
def layer(w, x):
    return np.tanh(w @ x)


def test_gradient_and_jvp_closed_form():
    x, w = np.linspace(-1.0, 1.0, 7), 0.7
    x0 = x.copy()
    gx, gw = pyjlad.grad(energy, wrt=(0, 1))(x, w)
    np.testing.assert_array_equal(x, x0)
    s, c = np.sin(w * x0), np.cos(w * x0)
    np.testing.assert_allclose(gx, 2 * s * c * w, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gw, np.sum(2 * s * c * x0), rtol=1e-13)
    t = np.linspace(0.5, 1.5, 7)
    _, tangent = pyjlad.jvp(energy, (x, w), (t, 0.0))
    np.testing.assert_allclose(tangent, np.sum(2 * s * c * w * t), rtol=1e-13)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_in_vector_mode_against_jax(mode):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(3)
    w, x = rng.normal(size=(5, 4)), rng.normal(size=4)
    w0, x0 = w.copy(), x.copy()
    got = pyjlad.jacobian(layer, w, x, wrt=1, mode=mode, chunk=2)
    want = jax.jacfwd(lambda v: jax.numpy.tanh(w0 @ v))(x0)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(w, w0)
    np.testing.assert_array_equal(x, x0)


@njit(debug=True, parallel=True)
def parallel_energy(x, s):
    e = 0.0
    for i in prange(x.shape[0]):
        e += np.sin(x[i]) * s[i % s.shape[0]]
    return e


@pytest.mark.usefixtures("parallel_two_threads")
def test_parallel_derivative_of_debug_function_runs_in_parallel():
    """Before, the OpenMP rewrite did not recognize loops whose calls carry ``!dbg``: the serial derivative
    ran, with a ParallelFallbackWarning."""
    rng = np.random.default_rng(4)
    x, s = rng.normal(size=301), rng.normal(size=7)
    x0, s0 = x.copy(), s.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        gx, gs = pyjlad.grad(parallel_energy, wrt=(0, 1))(x, s)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(s, s0)
    idx = np.arange(301) % 7
    np.testing.assert_allclose(gx, np.cos(x0) * s0[idx], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gs, np.bincount(idx, weights=np.sin(x0), minlength=7), rtol=1e-12, atol=1e-14)


#: A program run with Numba's debug information on for the whole process (``NUMBA_ENABLE_PROFILING=1``, what a
#: user profiling with perf or VTune sets; it turns on ``NUMBA_DEBUGINFO``): Numba then compiles its own routines
#: (``np.zeros``, ``np.sum``, a mask) ``noinline``. Before, every derivative below failed in Enzyme ("Illegal
#: updateAnalysis": one ``select`` of an array's meminfo and an exception, :mod:`pyjlad.branch_selects`; one
#: stack slot returning a float and a bool array, :func:`pyjlad.excinfo_slots.split_result_slots`), or in
#: ``llvm-link`` (an attribute appended after a header's ``!dbg``), and the parallel one fell back to serial;
#: ``np.hstack``'s overlap check ended in ``, !dbg !N`` and was not recognized as one (attachments now dropped).
_WHOLE_PROCESS_DEBUG = """
import json, warnings
import numba, numpy as np
from numba import njit, prange
import pyjlad

assert numba.core.config.DEBUGINFO_DEFAULT, "the variable did not turn debug information on"
numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))

@njit
def padded(x):
    y = np.zeros(x.shape[0] + 2)
    y[1:-1] = x
    return np.sum(y * y)

@njit
def masked(x):
    return np.sum(x[x > 0.5] ** 2)

@njit
def zeroed(x):
    y = x.copy()
    y[x < 0.5] = 0.0
    return y * x

@njit
def stacked(x, s):
    return np.hstack((x, s * s))

@njit(parallel=True)
def weighted(x, s):
    e = 0.0
    for i in prange(x.shape[0]):
        e += np.sin(x[i]) * s[i % s.shape[0]]
    return e

x = np.linspace(0.0, 1.0, 9)
s = np.linspace(-1.0, 2.0, 4)
x0, s0 = x.copy(), s.copy()
with warnings.catch_warnings():
    warnings.simplefilter("error", pyjlad.ParallelFallbackWarning)
    out = {
        "padded": pyjlad.grad(padded)(x).tolist(),
        "masked": pyjlad.grad(masked)(x).tolist(),
        "masked_jvp": float(pyjlad.jvp(masked, (x,), (np.ones(9),))[1]),
        "zeroed_jvp": pyjlad.jvp(zeroed, (x,), (np.linspace(1.0, 2.0, 9),))[1].tolist(),
        "weighted": [g.tolist() for g in pyjlad.grad(weighted, wrt=(0, 1))(x, s)],
        "stacked": pyjlad.jacobian(stacked, x, s, wrt=1).tolist(),
    }
out["unchanged"] = bool(np.array_equal(x, x0) and np.array_equal(s, s0))
print("RESULT", json.dumps(out))
"""


def test_whole_process_debug_information():
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_ENABLE_PROFILING": "1", "PYJLAD_DISABLE_DISK_CACHE": "1"}
    proc = subprocess.run([sys.executable, "-c", _WHOLE_PROCESS_DEBUG], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    x, s = np.linspace(0.0, 1.0, 9), np.linspace(-1.0, 2.0, 4)
    assert out["unchanged"]
    np.testing.assert_allclose(out["padded"], 2 * x, rtol=1e-14)
    np.testing.assert_allclose(out["masked"], 2 * x * (x > 0.5), rtol=1e-14)
    np.testing.assert_allclose(out["masked_jvp"], np.sum(2 * x * (x > 0.5)), rtol=1e-14)
    np.testing.assert_allclose(out["zeroed_jvp"], 2 * x * np.linspace(1.0, 2.0, 9) * (x >= 0.5), rtol=1e-14)
    np.testing.assert_array_equal(out["stacked"], np.vstack([np.zeros((9, 4)), np.diag(2 * s)]))
    idx = np.arange(9) % 4
    gx, gs = out["weighted"]
    np.testing.assert_allclose(gx, np.cos(x) * s[idx], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gs, np.bincount(idx, weights=np.sin(x), minlength=4), rtol=1e-12, atol=1e-14)


def test_attributes_added_to_a_header_render_before_its_metadata():
    """``define ... #4 !dbg !426 {``: an attribute pyjlad adds (``"enzyme_inactive"`` on Numba's string code)
    goes before the attachment, where LLVM's grammar wants it; after it, ``llvm-link`` refused the module."""
    from pyjlad.ir.item_parser import parse_function_header
    from pyjlad.stubs import inactive_definition

    header = parse_function_header('define linkonce_odr i32 @f(ptr %a) local_unnamed_addr #4 section "s" '
                                   "!dbg !426 !prof !{i32 1} {")
    assert header.attributes == ["local_unnamed_addr", "#4", "section", '"s"']
    assert header.metadata == ["!dbg", "!426", "!prof", "!{i32 1}"]
    assert inactive_definition(header).header() == (
        'define linkonce_odr i32 @f(ptr %a) local_unnamed_addr #4 section "s" "enzyme_inactive" '
        '"enzyme_ta_norecur" !dbg !426 !prof !{i32 1} {')
