"""No transform modifies an array the caller passed (issue 13, item 2).

Every public transform is called twice on the same caller-owned arrays (inputs,
tangents, cotangents, constants, in C, Fortran and strided layouts). After each
call every one of those arrays must be bit-identical to a copy taken before the
first call, and the second call must give the same derivative as the first (a
transform that zeroed or accumulated into a caller's array changes the second
result: the failure that zeroed PyTorch's ``grad_outputs`` between steps).
Results are also checked against hand-derived formulas.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad import Active, Const, Duplicated, Forward, Reverse

rng = np.random.default_rng(1322)


@njit
def scalar_loss(x, y, c):
    # sum(c * x^2) * y
    s = 0.0
    for i in range(x.shape[0]):
        s += c[i] * x[i] * x[i]
    return s * y


@njit
def array_out(x, c):
    return x * x * c


@njit
def tuple_out(x, c):
    return x * c, np.sum(x * x)


@njit
def writes_out(out, x):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i] * x[i]


@njit
def matrix_loss(a):
    # sum(a_ij^2 * (i + 1))
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += a[i, j] * a[i, j] * (i + 1)
    return s


def _layouts(n: int) -> dict[str, np.ndarray]:
    base = rng.uniform(0.5, 1.5, size=2 * n)
    return {"contiguous": base[:n].copy(), "strided": base[::2], "reversed": base[::-1][:n]}


def _matrices() -> dict[str, np.ndarray]:
    a = rng.uniform(-1.0, 1.0, size=(3, 4))
    return {"C": np.ascontiguousarray(a), "F": np.asfortranarray(a), "strided": rng.uniform(size=(6, 8))[::2, ::2]}


class Guard:
    """Copies of caller-owned arrays taken before the calls; ``check`` compares bit for bit."""

    def __init__(self, *arrays: np.ndarray) -> None:
        self.arrays = arrays
        self.copies = [a.copy() for a in arrays]

    def check(self) -> None:
        for k, (a, before) in enumerate(zip(self.arrays, self.copies)):
            assert a.tobytes() == before.tobytes(), f"caller array {k} was modified"


def _twice(call):
    first = call()
    second = call()
    return first, second


def _same(a, b):
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for u, v in zip(a, b):
            _same(u, v)
    elif a is None:
        assert b is None
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("layout", ["contiguous", "strided", "reversed"])
def test_reverse_transforms_leave_inputs_alone(layout):
    x = _layouts(5)[layout]
    c = rng.uniform(0.5, 2.0, size=5)
    y = 1.7
    guard = Guard(x, c)
    expected_x = 2.0 * c * x * y
    expected_y = float(np.sum(c * x * x))
    for call in (
        lambda: pyjlad.gradient(scalar_loss, x, y, c, wrt=(0, 1)),
        lambda: pyjlad.value_and_gradient(scalar_loss, x, y, c, wrt=(0, 1))[1],
        lambda: pyjlad.grad(scalar_loss, wrt=(1, 0))(x, y, c)[::-1],
        lambda: pyjlad.value_and_grad(scalar_loss, wrt=(0, 1))(x, y, c)[1],
        lambda: pyjlad.vjp(scalar_loss, (x, y, c), 1.0)[1][:2],
    ):
        first, second = _twice(call)
        guard.check()
        _same(first, second)
        np.testing.assert_allclose(first[0], expected_x, rtol=1e-13)
        np.testing.assert_allclose(first[1], expected_y, rtol=1e-13)


@pytest.mark.parametrize("layout", ["contiguous", "strided", "reversed"])
def test_forward_transforms_leave_inputs_and_tangents_alone(layout):
    x = _layouts(4)[layout]
    t = _layouts(4)[layout]
    c = rng.uniform(0.5, 2.0, size=4)
    guard = Guard(x, t, c)
    first, second = _twice(lambda: pyjlad.jvp(scalar_loss, (x, 2.0, c), (t, 0.5, None)))
    guard.check()
    _same(first, second)
    np.testing.assert_allclose(first[1], np.sum(2 * c * x * t) * 2.0 + np.sum(c * x * x) * 0.5, rtol=1e-13)
    first, second = _twice(lambda: pyjlad.jvp(array_out, (x, c), (t, None)))
    guard.check()
    _same(first, second)
    np.testing.assert_allclose(first[1], 2 * x * c * t, rtol=1e-13)


@pytest.mark.parametrize("layout", ["contiguous", "strided", "reversed"])
def test_vjp_leaves_array_cotangents_alone(layout):
    x = _layouts(4)[layout]
    cot = _layouts(4)[layout]
    c = rng.uniform(0.5, 2.0, size=4)
    guard = Guard(x, cot, c)
    first, second = _twice(lambda: pyjlad.vjp(array_out, (x, c), cot)[1])
    guard.check()
    _same(first, second)
    np.testing.assert_allclose(first[0], 2 * x * c * cot, rtol=1e-13)
    np.testing.assert_allclose(first[1], x * x * cot, rtol=1e-13)


def test_vjp_leaves_arrays_inside_tuple_cotangents_alone():
    x = rng.uniform(0.5, 1.5, size=4)
    c = rng.uniform(0.5, 2.0, size=4)
    cot_array = rng.uniform(-1.0, 1.0, size=4)
    guard = Guard(x, c, cot_array)
    first, second = _twice(lambda: pyjlad.vjp(tuple_out, (x, c), (cot_array, 0.25))[1])
    guard.check()
    _same(first, second)
    np.testing.assert_allclose(first[0], c * cot_array + 0.25 * 2 * x, rtol=1e-13)


def test_vjp_of_function_writing_its_output_leaves_the_cotangent_alone():
    x = rng.uniform(0.5, 1.5, size=3)
    out = np.zeros(3)
    cot = rng.uniform(-1.0, 1.0, size=3)
    guard = Guard(x, cot)
    first, second = _twice(lambda: pyjlad.vjp(writes_out, (out, x), cot)[1][1])
    guard.check()
    _same(first, second)
    np.testing.assert_allclose(first, 3 * x * x * cot, rtol=1e-13)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_jacobian_hessian_hvp_leave_inputs_alone(mode, layout):
    a = _matrices()[layout]
    v = _matrices()[layout]
    guard = Guard(a, v)
    weights = np.arange(1, a.shape[0] + 1, dtype=float)[:, None] * np.ones_like(a)
    first, second = _twice(lambda: pyjlad.jacobian(matrix_loss, a, mode=mode))
    guard.check()
    _same(first, second)
    np.testing.assert_allclose(first, 2 * weights * a, rtol=1e-13)
    first, second = _twice(lambda: pyjlad.hvp(matrix_loss, (a,), v))
    guard.check()
    _same(first, second)
    np.testing.assert_allclose(first, 2 * weights * v, rtol=1e-13)
    hess = pyjlad.hessian(matrix_loss, a)
    guard.check()
    np.testing.assert_allclose(hess.reshape(a.size, a.size), np.diag(2 * weights.ravel()), atol=1e-13)


def test_autodiff_touches_only_the_shadows_it_documents():
    x = rng.uniform(0.5, 1.5, size=4)
    c = rng.uniform(0.5, 2.0, size=4)
    dx = np.zeros(4)
    guard = Guard(x, c)
    derivs, value = pyjlad.autodiff(Reverse, scalar_loss, Duplicated(x, dx), Active(1.5), Const(c))
    guard.check()
    np.testing.assert_allclose(dx, 2 * c * x * 1.5, rtol=1e-13)  # reverse mode accumulates into dx
    assert derivs[1] == pytest.approx(float(np.sum(c * x * x)), rel=1e-13)
    tx = rng.uniform(size=4)
    tangent_guard = Guard(x, c, tx)
    tangent, _ = pyjlad.autodiff(Forward, scalar_loss, Duplicated(x, tx), Const(1.5), c)
    tangent_guard.check()
    assert tangent == pytest.approx(float(np.sum(2 * c * x * tx)) * 1.5, rel=1e-13)


def test_duplicated_shadow_sharing_memory_with_its_primal_is_refused():
    x = rng.uniform(size=4)
    before = x.copy()
    with pytest.raises(ValueError, match="shares memory"):
        pyjlad.autodiff(Reverse, scalar_loss, Duplicated(x, x), Active(1.0), Const(np.ones(4)))
    with pytest.raises(ValueError, match="shares memory"):
        pyjlad.autodiff(Reverse, scalar_loss, Duplicated(x[:3], x[1:]), Active(1.0), Const(np.ones(3)))
    assert x.tobytes() == before.tobytes()


def test_torch_bridge_keeps_grad_outputs_across_steps():
    torch = pytest.importorskip("torch")
    from pyjlad.interop.torch import to_torch

    f = to_torch(array_out)
    c = torch.tensor(rng.uniform(0.5, 2.0, size=3))
    seed = torch.tensor(rng.uniform(-1.0, 1.0, size=3))
    seed_before = seed.clone()
    grads = []
    for _ in range(2):
        x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
        f(x, c).backward(seed)
        grads.append(x.grad.clone())
    assert torch.equal(seed, seed_before)
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    torch.testing.assert_close(grads[0], 2 * torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64) * c * seed)


def test_jax_bridge_leaves_host_arrays_alone():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from pyjlad.interop.jax import to_jax

    jax.config.update("jax_enable_x64", True)
    f = to_jax(scalar_loss)
    x = np.array([0.5, 1.0, 2.0])
    c = np.array([1.0, 2.0, 3.0])
    guard = Guard(x, c)
    for _ in range(2):
        g = jax.grad(f)(jnp.asarray(x), 2.0, jnp.asarray(c))
        np.testing.assert_allclose(np.asarray(g), 2 * c * x * 2.0, rtol=1e-13)
    guard.check()
