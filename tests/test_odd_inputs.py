"""Odd but legal inputs get the right answer or a clear error (issue 14).

Oracles are hand-derived; inputs are checked unchanged. The memory-safety
cases run in a subprocess so that a regression is a failed test, not a dead
test runner.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad import Active, Duplicated, Reverse


@njit
def sum_of_squares(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return s


@njit
def weighted(x, w):
    return np.sum(x * x * w)


def test_zero_stride_broadcast_input_is_many_inputs():
    """np.broadcast_to gives 5 elements sharing one float; each is its own input (as in JAX)."""
    x = np.broadcast_to(np.array([2.0]), (5,))
    assert pyjlad.gradient(sum_of_squares, x).tolist() == [4.0] * 5
    assert pyjlad.vjp(sum_of_squares, (x,), 1.0)[1][0].tolist() == [4.0] * 5
    assert pyjlad.jvp(sum_of_squares, (x,), (np.arange(5.0),))[1] == pytest.approx(4.0 * 10.0)
    assert pyjlad.hvp(sum_of_squares, (x,), np.ones(5)).tolist() == [2.0] * 5
    m = np.broadcast_to(np.array([[1.0], [3.0]]), (2, 3))  # a zero stride in the second dimension
    w = np.ones((2, 3))
    np.testing.assert_array_equal(pyjlad.gradient(weighted, m, w), 2 * np.asarray(m))


def test_zero_stride_duplicated_is_refused():
    x = np.broadcast_to(np.array([2.0]), (3,))
    with pytest.raises(ValueError, match="share memory"):
        pyjlad.autodiff(Reverse, sum_of_squares, Duplicated(x, np.zeros(3)))


def test_gradient_of_a_function_returning_none_is_an_error():
    @njit
    def writes(out, x):
        out[0] = x[0] * x[0]

    out, x = np.zeros(1), np.array([3.0])
    with pytest.raises(TypeError, match=r"returns nothing \(None\); a gradient needs a real scalar"):
        pyjlad.gradient(writes, out, x, wrt=1)
    # vjp is the transform for such functions
    assert pyjlad.vjp(writes, (out, x), np.array([1.0]))[1][1].tolist() == [6.0]


def test_wrt_naming_an_argument_twice_gives_separate_arrays():
    x = np.array([1.0, 2.0])
    g0, g1 = pyjlad.gradient(sum_of_squares, x, wrt=(0, 0))
    assert g0 is not g1
    g0[0] = 99.0
    assert g1.tolist() == [2.0, 4.0]


def test_complex_tangents_and_cotangents_are_refused():
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match="complex"):
        pyjlad.jvp(sum_of_squares, (x,), (np.array([1.0 + 1j, 0.0]),))
    with pytest.raises(TypeError, match="complex"):
        pyjlad.vjp(njit(lambda x: x * 2.0), (x,), np.array([1j, 1.0]))
    with pytest.raises(TypeError, match="complex"):
        pyjlad.hvp(sum_of_squares, (x,), np.array([1j, 1.0]))


def test_exception_path_runs_side_effects_once():
    @njit
    def counts_then_raises(x, counter):
        counter[0] += 1.0
        if x[0] > 0.0:
            raise ValueError("positive")
        return x[0] * x[0]

    counter = np.zeros(1)
    with pytest.raises(ValueError, match="positive"):
        pyjlad.gradient(counts_then_raises, np.array([1.0]), counter)
    assert counter[0] == 1.0  # the differentiated call; the re-run that raises works on copies


def test_active_stays_scalar_only():
    with pytest.raises(TypeError):
        pyjlad.autodiff(Reverse, sum_of_squares, Active(np.ones(2)))


_STRIDED_ALIASED = textwrap.dedent("""
    import numpy as np, pyjlad
    from numba import njit

    @njit
    def pick(x, c, flag):
        y = x if flag else c   # Numba merges c's data pointer with x's: c gets a zeroed shadow
        s = 0.0
        for i in range(y.shape[0]):
            s += y[i] * x[i]
        return s

    base = np.arange(1.0, 40000.0)
    x = np.linspace(0.1, 0.8, 8)
    for step in (1, 2, 4, 4096, -1, -3):
        c = base[::step][:8]
        before = c.copy()
        np.testing.assert_array_equal(pyjlad.gradient(pick, x, c, False), before)
        np.testing.assert_allclose(pyjlad.gradient(pick, x, c, True), 2 * x)
        np.testing.assert_array_equal(pyjlad.hessian(pick, x, c, False), np.zeros((8, 8)))
        np.testing.assert_array_equal(pyjlad.hvp(pick, (x, c, True), np.ones(8)), 2 * np.ones(8))
        assert c.tobytes() == before.tobytes()
    c2 = np.arange(1.0, 201.0).reshape(10, 20)[::3, ::-7]
    @njit
    def pick2(x, c, flag):
        y = x if flag else c
        return np.sum(y * x)
    x2 = np.ones(c2.shape)
    np.testing.assert_array_equal(pyjlad.gradient(pick2, x2, c2, False), c2)
    print("ok")
""")


def test_strided_constant_arrays_merged_with_other_memory_do_not_overrun_their_shadow():
    """The zeroed shadow covers the span the strides reach (was nitems*itemsize: heap overflow)."""
    proc = subprocess.run([sys.executable, "-c", _STRIDED_ALIASED], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


_READ_ONLY_COTANGENT = textwrap.dedent("""
    import numpy as np, pyjlad, tempfile, os
    from numba import njit

    @njit
    def square(x):
        return x * x

    path = os.path.join(tempfile.mkdtemp(), "cot.npy")
    np.save(path, np.array([1.0, 2.0, 3.0]))
    cot = np.load(path, mmap_mode="r")          # read-only memory map
    x = np.array([1.0, 2.0, 3.0])
    for _ in range(2):
        assert pyjlad.vjp(square, (x,), cot)[1][0].tolist() == [2.0, 8.0, 18.0]
    assert np.asarray(cot).tolist() == [1.0, 2.0, 3.0]
    print("ok")
""")


def test_read_only_memmap_cotangent():
    """Enzyme zeroes an output's shadow: it must be pyjlad's buffer, never a read-only map (was SIGSEGV)."""
    proc = subprocess.run([sys.executable, "-c", _READ_ONLY_COTANGENT], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


_OUT_OF_MEMORY = textwrap.dedent("""
    import resource, numpy as np, pyjlad
    from numba import njit

    @njit
    def f(x):
        return np.sum(np.sin(x) * x * x)   # temporaries allocated inside the differentiated code

    small = np.linspace(0.0, 1.0, 1000)
    expected = np.cos(small) * small ** 2 + 2 * np.sin(small) * small
    np.testing.assert_allclose(pyjlad.gradient(f, small), expected, rtol=1e-13)
    big = np.linspace(0.0, 1.0, 30_000_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(open("/proc/self/statm").read().split()[0]) * 4096
    resource.setrlimit(resource.RLIMIT_AS, (in_use + big.nbytes + (64 << 20), hard))  # room for the shadow only
    try:
        pyjlad.gradient(f, big)
        print("no MemoryError")
    except MemoryError as exc:
        print("MemoryError:", exc)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    np.testing.assert_allclose(pyjlad.gradient(f, small), expected, rtol=1e-13)  # and the process goes on
    print("alive")
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_out_of_memory_inside_the_derivative_is_a_memory_error():
    """A failed malloc in differentiated code was a SIGSEGV; now the driver's exit raises MemoryError."""
    proc = subprocess.run([sys.executable, "-c", _OUT_OF_MEMORY], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MemoryError: out of memory while differentiating f" in proc.stdout
    assert proc.stdout.strip().endswith("alive")


_DEEP_RECURSION = textwrap.dedent("""
    import math, pyjlad
    from numba import njit

    @njit
    def damped(x, n):
        if n <= 0:
            return x
        return 0.999 * damped(x, n - 1) + 0.001 * math.sin(x)

    n = 300_000   # deeper than the main thread's 8 MiB stack holds (the plain call would segfault)
    expected = 0.999 ** n + math.cos(0.5) * (1 - 0.999 ** n)   # d_n = 0.999 d_(n-1) + 0.001 cos x, d_0 = 1
    g = pyjlad.gradient(damped, 0.5, n)
    assert abs(g - expected) < 1e-12, (g, expected)
    print("ok")
""")


def test_deep_recursion_runs_on_a_deep_stack():
    proc = subprocess.run([sys.executable, "-c", _DEEP_RECURSION], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


def test_recursion_is_found_in_the_call_graph():
    from pyjlad.portable import has_recursion

    direct = "define i32 @f(i32 %n) {\nentry:\n  %r = call i32 @f(i32 %n)\n  ret i32 %r\n}\n"
    mutual = ("define void @a() {\nentry:\n  call void @b()\n  ret void\n}\n"
              "define void @b() {\nentry:\n  call void @a()\n  ret void\n}\n")
    chain = ("define void @a() {\nentry:\n  call void @b()\n  ret void\n}\n"
             "define void @b() {\nentry:\n  call void @c()\n  ret void\n}\ndeclare void @c()\n")
    assert has_recursion(direct) and has_recursion(mutual) and not has_recursion(chain)
