"""``to_torch`` under PyTorch's transforms, against PyTorch's own derivatives of the equivalent torch code.

backward (with ``needs_input_grad``), ``gradcheck``, ``gradgradcheck``, double
backward, ``torch.func.grad``/``vmap``/``jvp``/``jacrev``/``jacfwd``/``hessian``;
integer tensors as constants; array-valued functions. float64 throughout.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interop_models import counted, energy, squares
from numba import njit

import pyjlad
from pyjlad.interop.torch import to_torch

D = torch.float64


def energy_torch(x, k):
    d = torch.diff(x)
    return torch.sum(k * d * d + torch.cos(x[:-1]) * k)


@njit
def one(x):
    return energy(x, 0.7)


def one_torch(x):
    return energy_torch(x, 0.7)


def _x(n: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.tensor(np.random.default_rng(seed).normal(size=n), dtype=D)


def _close(a, b, rtol=1e-12) -> None:
    np.testing.assert_allclose(np.asarray(a.detach() if isinstance(a, torch.Tensor) else a),
                               np.asarray(b.detach() if isinstance(b, torch.Tensor) else b), rtol=rtol, atol=1e-14)


def test_backward_honours_needs_input_grad() -> None:
    f = to_torch(energy)
    x, k = _x().requires_grad_(), torch.tensor(0.7, dtype=D)
    f(x, k).backward()
    xr = x.detach().clone().requires_grad_()
    energy_torch(xr, 0.7).backward()
    _close(x.grad, xr.grad)
    assert k.grad is None


def test_gradcheck_and_gradgradcheck() -> None:
    f = to_torch(energy)
    x, k = _x(5).requires_grad_(), torch.tensor(0.7, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(f, (x, k))
    g = to_torch(one)
    assert torch.autograd.gradcheck(g, (x,))
    assert torch.autograd.gradgradcheck(g, (x,))


def test_double_backward_and_hessian_against_torch() -> None:
    g = to_torch(one)
    x = _x(5, seed=1).requires_grad_()
    (gx,) = torch.autograd.grad(g(x), x, create_graph=True)
    (penalty,) = torch.autograd.grad((gx ** 2).sum(), x)  # a gradient penalty
    xr = x.detach().clone().requires_grad_()
    (gr,) = torch.autograd.grad(one_torch(xr), xr, create_graph=True)
    (want,) = torch.autograd.grad((gr ** 2).sum(), xr)
    _close(gx, gr)
    _close(penalty, want)
    _close(torch.func.hessian(g)(x.detach()), torch.func.hessian(one_torch)(x.detach()))


def test_second_derivatives_of_several_float_arguments_are_refused_clearly() -> None:
    f = to_torch(energy)
    x, k = _x().requires_grad_(), torch.tensor(0.7, dtype=D, requires_grad=True)
    (gx,) = torch.autograd.grad(f(x, k), x, create_graph=True)
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="one float argument"):
        gx.sum().backward()


def test_torch_func_grad_jvp_and_jacobians() -> None:
    f = to_torch(energy)
    x, k = _x(), torch.tensor(0.7, dtype=D)
    for got, want in zip(torch.func.grad(f, argnums=(0, 1))(x, k), torch.func.grad(energy_torch, argnums=(0, 1))(x, k)):
        _close(got, want)
    tx, tk = _x(seed=2), torch.tensor(0.3, dtype=D)
    _, tangent = torch.func.jvp(f, (x, k), (tx, tk))
    _, want = torch.func.jvp(energy_torch, (x, k), (tx, tk))
    _close(tangent, want)
    _close(torch.func.jacrev(f)(x, k), torch.func.jacrev(energy_torch)(x, k))
    _close(torch.func.jacfwd(f)(x, k), torch.func.jacfwd(energy_torch)(x, k))


@pytest.mark.parametrize("in_dims", [(0, None), (0, 0), (None, 0)])
def test_torch_func_vmap_of_values_and_gradients(in_dims) -> None:
    f = to_torch(energy)
    xs = torch.tensor(np.random.default_rng(3).normal(size=(5, 6)), dtype=D)
    ks = torch.linspace(0.1, 0.9, 5, dtype=D)
    x_arg = xs if in_dims[0] == 0 else xs[0]
    k_arg = ks if in_dims[1] == 0 else torch.tensor(0.4, dtype=D)
    _close(torch.func.vmap(f, in_dims=in_dims)(x_arg, k_arg), torch.func.vmap(energy_torch, in_dims=in_dims)(x_arg, k_arg),
           rtol=1e-13)
    got = torch.func.vmap(torch.func.grad(f, argnums=(0, 1)), in_dims=in_dims)(x_arg, k_arg)
    want = torch.func.vmap(torch.func.grad(energy_torch, argnums=(0, 1)), in_dims=in_dims)(x_arg, k_arg)
    for g, w in zip(got, want):
        _close(g, w)


def test_per_sample_gradients_equal_pyjlad_vmap() -> None:
    f = to_torch(energy)
    xs = np.random.default_rng(4).normal(size=(7, 6))
    got = torch.func.vmap(torch.func.grad(f), in_dims=(0, None))(torch.tensor(xs), torch.tensor(0.6, dtype=D))
    assert np.array_equal(got.numpy(), pyjlad.vmap(pyjlad.grad(energy), in_axes=(0, None))(xs, 0.6))


def test_integer_tensors_are_constants() -> None:
    f = to_torch(counted)
    x = _x(8, seed=5).requires_grad_()
    f(x, torch.tensor(5)).backward()
    xn = x.detach().numpy()
    want = np.where(np.arange(8) < 5, np.cos(xn) * xn + np.sin(xn), 0.0)
    _close(x.grad, want)


def test_array_valued_functions() -> None:
    f = to_torch(squares)
    x = _x(4, seed=6)

    def squares_torch(v):
        return v * v + torch.sin(v)

    _close(torch.func.jacrev(f)(x), torch.func.jacrev(squares_torch)(x))
    xs = torch.tensor(np.random.default_rng(7).normal(size=(3, 4)), dtype=D)
    _close(torch.func.vmap(f)(xs), torch.func.vmap(squares_torch)(xs), rtol=1e-13)
    _close(torch.func.vmap(torch.func.jacrev(f))(xs), torch.func.vmap(torch.func.jacrev(squares_torch))(xs))
    assert torch.autograd.gradcheck(f, (x.clone().requires_grad_(),))


def test_the_callers_tensors_are_unchanged() -> None:
    f = to_torch(energy)
    x, k = _x(5, seed=8).requires_grad_(), torch.tensor(0.7, dtype=D, requires_grad=True)
    xs = torch.tensor(np.random.default_rng(9).normal(size=(3, 5)), dtype=D)
    before = [t.detach().clone() for t in (x, k, xs)]
    f(x, k).backward()
    torch.func.vmap(torch.func.grad(f), in_dims=(0, None))(xs, k.detach())
    torch.func.hessian(to_torch(one))(x.detach())
    for t, b in zip((x, k, xs), before):
        assert torch.equal(t.detach(), b)


@njit
def doubled_in_place(x):
    x *= 2.0  # f(x) = 4 sum(x^2): gradient 8x, Hessian 8 I
    return np.sum(x * x)


@njit
def doubled_out(x):
    x *= 2.0
    return x * x  # 4 x^2: Jacobian diag(8x)


def test_a_function_writing_its_argument_leaves_the_tensor_and_gets_the_derivative_at_the_point() -> None:
    """It wrote the caller's tensor (views of its memory) and the backward differentiated at the written point:
    x twice doubled, the gradient 16x for 8x (found by a user-style probe, 2026-12-04). Oracle: by hand."""
    x0 = torch.tensor([1.0, 2.0, -3.0], dtype=D)
    x = x0.clone().requires_grad_()
    f = to_torch(doubled_in_place)
    value = f(x)
    value.backward()
    assert value.item() == pytest.approx(4.0 * 14.0, rel=1e-15)
    assert torch.equal(x.detach(), x0)
    _close(x.grad, 8.0 * x0)
    _close(torch.func.hessian(f)(x0.clone()), 8.0 * torch.eye(3, dtype=D))
    xs = torch.stack([x0, 2.0 * x0])
    batch = xs.clone()
    _close(torch.func.vmap(torch.func.grad(f))(batch), 8.0 * xs)
    _close(torch.func.vmap(f)(batch), 4.0 * (xs * xs).sum(dim=1))
    assert torch.equal(batch, xs)
    y = x0.clone().requires_grad_()
    out = to_torch(doubled_out)(y)
    out.backward(torch.ones(3, dtype=D))
    _close(out, 4.0 * x0 * x0)
    _close(y.grad, 8.0 * x0)
    assert torch.equal(y.detach(), x0)


def test_python_numbers_are_constants() -> None:
    """A Python int was an AttributeError ('int' object has no attribute 'detach'); now a constant tensor."""
    f = to_torch(energy)
    x = _x(5, seed=3).requires_grad_()
    for k in (2, 0.7):
        x.grad = None
        value = f(x, k)
        value.backward()
        xr = x.detach().clone().requires_grad_()
        want = energy_torch(xr, float(k))
        want.backward()
        _close(value, want)
        _close(x.grad, xr.grad)
    _close(torch.func.grad(f)(x.detach(), 2), torch.func.grad(lambda y: energy_torch(y, 2.0))(x.detach()))
