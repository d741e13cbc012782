"""Guard zones around pyjlad's shadows (``pyjlad/shadow_guards.py``).

A function reading its argument one element (or one row) past the end, which Numba does not check without
``boundscheck=True``, used to have its derivative add into the memory after pyjlad's shadow: glibc's
bookkeeping of the next allocation, and glibc aborted the process later (``free(): invalid next size``,
``malloc(): corrupted top size``; seen for the 2-D case at 100 and 30,000 rows, and for ``hessian``). Now
each such derivative raises :class:`pyjlad.OutOfBoundsError` naming the argument (vector-mode sweeps too:
``jacobian``, ``hessian``, batched ``vjp``; and a checkpointed loop's steps). The overrunning derivatives run in a child
interpreter, so that a regression aborts the child, not the test run.

Oracles: the guard layout by hand (every element the shadow addresses written, then one step past each
end); the gradients of in-bounds stencils by their closed forms.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.shadow_guards import guarded_zeros, overran
from pyjlad.sweep import shadow_like

_CASES = textwrap.dedent('''
    import numpy as np
    from numba import njit
    import pyjlad

    @njit
    def rows(x):
        s = 0.0
        for i in range(x.shape[0]):
            for j in range(x.shape[1]):
                s += (x[i + 1, j] - x[i, j]) ** 2
        return s

    @njit
    def columns(x):
        s = 0.0
        for j in range(x.shape[1]):
            for i in range(x.shape[0]):
                s += (x[i, j + 1] - x[i, j]) ** 2
        return s

    @njit
    def pairs(w, x):
        s = 0.0
        for i in range(x.shape[0]):
            s += w * (x[i + 1] - x[i]) ** 2
        return s

    @njit
    def smoothed(x):
        out = np.empty(x.shape[0])
        for i in range(x.shape[0]):
            out[i] = 0.5 * (x[i] + x[i + 1])
        return out

    def outcome(call, *arrays):
        before = [a.copy() for a in arrays]
        try:
            call()
        except pyjlad.OutOfBoundsError as exc:
            assert isinstance(exc, IndexError)
            unchanged = all(np.array_equal(a, b) for a, b in zip(arrays, before))
            return f"raised unchanged={unchanged} {exc}"
        return "returned"

    for n in (10, 100, 30000):
        x = np.linspace(0.0, 1.0, 7 * n).reshape(n, 7)
        print(f"rows {n}\t" + outcome(lambda: pyjlad.gradient(rows, x), x))
    f = np.asfortranarray(np.linspace(0.0, 1.0, 700).reshape(7, 100))
    print("columns\t" + outcome(lambda: pyjlad.grad(columns)(f), f))
    v = np.linspace(1.0, 2.0, 2001)  # no zero: the adjoint of x[i + 1] - x[i] past the end is not 0 (unless
    # the memory read there happens to hold x[i] itself; a zero adjoint writes nothing, and nothing is found)
    backwards = v[::-2]  # a reversed view: x[i + 1] at the last i lies before the buffer's start
    print("reversed\t" + outcome(lambda: pyjlad.value_and_grad(pairs, argnums=1)(0.5, backwards), v))
    print("vjp\t" + outcome(lambda: pyjlad.vjp(smoothed, (v,), np.ones(v.shape[0])), v))
    print("hvp\t" + outcome(lambda: pyjlad.hvp(pairs, (0.5, v), np.ones(v.shape[0]), wrt=1), v))
    @njit
    def step(u, k, t):
        v = np.empty_like(u)
        for i in range(u.shape[0]):
            v[i] = u[i] + k * (u[i + 1] - u[i])
        return v

    @njit
    def energy(u):
        return np.sum(u * u)

    u = np.linspace(1.0, 2.0, 300)
    loop = pyjlad.checkpointed_loop(step, energy, 50)
    print("checkpointed\t" + outcome(lambda: loop.value_and_grad(u, 0.1), u))
    for n in (10, 300):  # vector mode: shadows stacked or interleaved, a guard zone after them
        u = np.linspace(1.0, 2.0, n)
        print(f"jacobian {n}\t" + outcome(lambda: pyjlad.jacobian(smoothed, u, mode="reverse"), u))
        print(f"hessian {n}\t" + outcome(lambda: pyjlad.hessian(pairs, 0.5, u, wrt=1), u))
        print(f"batched {n}\t" + outcome(lambda: pyjlad.vjp(smoothed, (u,), np.ones((3, n)), batched=True), u))
''')


@pytest.fixture(scope="module")
def overruns() -> dict[str, str]:
    run = subprocess.run([sys.executable, "-c", _CASES], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(line.split("\t", 1) for line in run.stdout.splitlines())


@pytest.mark.parametrize(("case", "names"), [
    ("rows 10", "rows reads its argument 0 (x, shape (10, 7))"),
    ("rows 100", "rows reads its argument 0 (x, shape (100, 7))"),
    ("rows 30000", "rows reads its argument 0 (x, shape (30000, 7))"),
    ("columns", "columns reads its argument 0 (x, shape (7, 100))"),
    ("reversed", "pairs reads its argument 1 (x, shape (1001,))"),
    ("vjp", "smoothed reads its argument 0 (x, shape (2001,))"),
    ("hvp", "pairs reads its argument 1 (x, shape (2001,))"),
    ("checkpointed", "step reads its argument 0 (u, shape (300,))"),
    *[(f"{what} {n}", f"{name} reads its argument {i} (x, shape ({n},))") for n in (10, 300)
      for what, name, i in (("jacobian", "smoothed", 0), ("hessian", "pairs", 1), ("batched", "smoothed", 0))],
])
def test_reading_past_an_arguments_end_raises_and_the_process_lives(overruns: dict[str, str], case: str,
                                                                     names: str) -> None:
    said = overruns[case]
    assert said.startswith("raised unchanged=True"), said
    assert names in said, said
    if case != "checkpointed":  # (a loop's steps run on states the caller never sees: no bounds-checked rerun)
        assert "Compiled with boundscheck=True" in said and "raises IndexError" in said, said


@pytest.mark.parametrize("make", [
    lambda: np.ones((4, 5)),
    lambda: np.asfortranarray(np.ones((4, 5))),
    lambda: np.ones((6, 8))[::2, 1::3],
    lambda: np.ones(9)[::-1],
    lambda: np.ones((5, 6))[::-2, ::-1],
    lambda: np.ones(()),
    lambda: np.ones((3, 1)),
    lambda: np.ones((300, 3), dtype=np.float32),
])
def test_a_shadow_addresses_what_its_array_does_between_two_zones(make) -> None:
    x = make()
    shadow, is_view = shadow_like(x)
    assert shadow.shape == x.shape and shadow.dtype == x.dtype and not shadow.any()
    assert is_view == (not (x.flags.c_contiguous or x.flags.f_contiguous))
    if is_view:
        assert shadow.strides == x.strides
    shadow[...] = 1.0  # every element the function may address
    assert not overran(shadow)
    buffer = shadow.base
    assert buffer.ndim == 1 and buffer.sum() == x.size
    # The zones: after the elements, and before them for a strided view, each at least one step along the
    # widest axis (and 64 bytes) wide.
    step = max([abs(s) for s in shadow.strides] + [64]) // x.itemsize
    written = np.flatnonzero(buffer)
    assert buffer.size - 1 - written[-1] >= step
    assert written[0] >= step if is_view else written[0] == 0
    ends = (0, -1) if is_view else (-1,)
    for where in ends:
        buffer[where] = 1.0
        assert overran(shadow)
        buffer[where] = 0.0
    assert not overran(shadow)


def test_a_shadow_of_no_elements_and_arrays_of_others_are_not_guarded() -> None:
    empty = guarded_zeros(np.ones((0, 3)))
    assert empty.shape == (0, 3) and not overran(empty)
    assert not overran(np.zeros(5)) and not overran(np.zeros(12)[2:7])


@njit
def _differences(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += (x[i + 1] - x[i]) ** 2
    return s


def test_in_bounds_neighbours_differentiate_as_before() -> None:
    x = np.linspace(0.0, 1.0, 50) ** 2
    x0 = x.copy()
    d = np.diff(x0)
    want = np.zeros_like(x0)
    want[1:] += 2 * d
    want[:-1] -= 2 * d
    got = pyjlad.gradient(_differences, x)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(x, x0)
    value, (got_v,) = pyjlad.vjp(_differences, (x,), 1.0)
    np.testing.assert_allclose(got_v, want, rtol=1e-13, atol=1e-15)
