"""Numba functions as PyTorch autograd functions whose derivatives come from pyjlad.

``to_torch(f)`` returns a function of CPU tensors built from
``torch.autograd.Function`` classes in the form ``torch.func`` accepts
(``forward`` without ``ctx``, ``setup_context``, a ``vmap`` rule), so
``backward()``, ``torch.autograd.gradcheck``, ``torch.func.grad``,
``torch.func.vmap`` and their compositions work:

* a scalar ``f`` (a loss): the backward multiplies the incoming gradient by
  pyjlad's gradient (one reverse sweep, only for the inputs that need one:
  ``ctx.needs_input_grad``); that gradient is itself differentiable through
  pyjlad's Hessian-vector product (``pyjlad.hvp``), so ``gradgradcheck``, double
  backward and ``torch.func.hessian`` work for functions of one float argument;
* an array-valued ``f``: the backward is pyjlad's ``vjp`` (one reverse sweep
  per incoming gradient), differentiable once;
* ``torch.func.vmap`` of the value and of the gradient of a scalar ``f`` runs
  :func:`pyjlad.vmap` (a ``prange`` loop over the samples on all cores); other
  batched calls loop over the samples.

Integer tensors are constants. The functions run on the host (CPU tensors), on the tensors' memory, but
for the arrays ``f`` writes, which it gets copies of: the caller's tensors are never written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import MissingDependencyError, UnsupportedFunctionError

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without PyTorch
    raise MissingDependencyError("pyjlad.interop.torch needs PyTorch: pip install torch") from exc

from ..batching import vmap
from ..export import as_numba_function
from ..products import hvp, vjp
from ..transforms import grad, value_and_gradient
from . import batches_with_pyjlad_vmap, written_positions

__all__ = ["to_torch"]


def _numpy(t: Any) -> Any:
    array = t.detach().cpu().numpy()
    return array[()] if array.ndim == 0 else array


def _constant(t: Any) -> Any:
    """``t`` as a tensor where it is a Python or NumPy number (a float as float64, as NumPy types it)."""
    if isinstance(t, (float, np.floating)):
        return torch.as_tensor(np.asarray(t, dtype=np.float64 if isinstance(t, float) else t.dtype))
    if isinstance(t, (bool, int, np.integer, np.bool_)):
        return torch.as_tensor(np.asarray(t))
    return t


def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


def _tensor(value: Any, like: Any) -> Any:
    return torch.as_tensor(np.asarray(value, dtype=_numpy_dtype(like)))


def _numpy_dtype(t: Any) -> Any:
    return torch.empty((), dtype=t.dtype).numpy().dtype


def _batch_first(in_dims: Sequence[int | None], tensors: Sequence[Any]) -> list[Any]:
    return [t if d is None else t.movedim(d, 0) for t, d in zip(tensors, in_dims)]


def _loop(run: Callable[..., Any], in_dims: Sequence[int | None], tensors: Sequence[Any], size: int) -> Any:
    """``run`` once per sample of a ``torch.func.vmap`` batch, results stacked (tuples item by item)."""
    moved = _batch_first(in_dims, tensors)
    rows = [run(*(t if d is None else t[i] for t, d in zip(moved, in_dims))) for i in range(size)]
    if isinstance(rows[0], tuple):
        return tuple(None if rows[0][k] is None else torch.stack([r[k] for r in rows]) for k in range(len(rows[0])))
    return torch.stack(rows)


class _Functions:
    """The autograd functions of one ``f`` (see the module's docstring)."""

    def __init__(self, f: Any, engine: str | None) -> None:
        self.f = f
        self.numba_f = as_numba_function(f)
        self.engine = engine
        self._vmaps: dict[Any, Any] = {}

    def batched(self, fn: Any, key: Any, in_axes: tuple[Any, ...]) -> Any:
        if (key, in_axes) not in self._vmaps:
            self._vmaps[key, in_axes] = vmap(fn, in_axes=in_axes)
        return self._vmaps[key, in_axes]

    @property
    def uses_pyjlad_vmap(self) -> bool:
        return batches_with_pyjlad_vmap(self.engine)

    def arguments(self, tensors: Sequence[Any], batched: bool = False) -> list[Any]:
        """The tensors as ``f``'s NumPy arguments: views of their memory, but copies of the arrays ``f`` writes
        (``batched``: the arrays stack samples on axis 0). A function writing into its argument wrote the
        caller's tensor (PyTorch cannot see a write through a view), and the backward then differentiated
        at the moved point (``x *= 2`` in ``f``: ``x`` written twice, the gradient 16x for 8x)."""
        args = [_numpy(t) for t in tensors]
        for k in written_positions(self.numba_f, args, batched):
            args[k] = np.array(args[k], copy=True)
        return args

    def value(self, tensors: Sequence[Any]) -> Any:
        return torch.as_tensor(np.asarray(self.numba_f(*self.arguments(tensors))))

    def gradients(self, wrt: tuple[int, ...], tensors: Sequence[Any]) -> tuple[Any, ...]:
        _, grads = value_and_gradient(self.numba_f, *self.arguments(tensors), wrt=wrt, engine=self.engine)
        return tuple(_tensor(g, tensors[k]) for g, k in zip(grads, wrt))


def _only_float(wrt: tuple[int, ...], tensors: Sequence[Any]) -> int:
    """The position of the one float argument, or a clear error for second derivatives of several."""
    floats = [k for k, t in enumerate(tensors) if _is_float(t)]
    if len(floats) != 1 or tuple(wrt) != (floats[0],):
        raise UnsupportedFunctionError(
            "second derivatives through pyjlad.interop.torch.to_torch are computed for functions of one float "
            f"argument; this one has {len(floats)}. Pass the other arguments as constants (a closure), or use "
            "pyjlad.hvp / pyjlad.hessian directly")
    return floats[0]


def _make(fns: _Functions) -> type:
    """The autograd Function of ``f`` (with those of its gradients, their HVP and its pullback)."""

    class Hvp(torch.autograd.Function):
        """``H_kk @ v`` for the one float argument ``k`` (third derivatives are not provided)."""

        @staticmethod
        def forward(k: int, v: Any, *tensors: Any) -> Any:
            out = hvp(fns.numba_f, tuple(fns.arguments(tensors)), _numpy(v), k, engine=fns.engine)
            return _tensor(out, tensors[k])

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            raise UnsupportedFunctionError("third derivatives through pyjlad.interop.torch.to_torch are not "
                                           "provided: pyjlad gives Hessian-vector products, not their derivatives")

        @staticmethod
        def vmap(info: Any, in_dims: tuple[Any, ...], k: int, v: Any, *tensors: Any) -> Any:
            return _loop(lambda vv, *ts: Hvp.apply(k, vv, *ts), in_dims[1:], (v, *tensors), info.batch_size), 0

    class Gradients(torch.autograd.Function):
        """pyjlad's gradient of ``f`` with respect to the float arguments ``wrt``."""

        @staticmethod
        def forward(wrt: tuple[int, ...], *tensors: Any) -> Any:
            return fns.gradients(wrt, tensors)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            ctx.wrt = inputs[0]
            ctx.save_for_backward(*inputs[1:])
            ctx.save_for_forward(*inputs[1:])

        @staticmethod
        def backward(ctx: Any, *grad_outputs: Any) -> Any:
            tensors = ctx.saved_tensors
            k = _only_float(ctx.wrt, tensors)
            result: list[Any] = [None] * (len(tensors) + 1)
            result[1 + k] = Hvp.apply(k, grad_outputs[0], *tensors)
            return tuple(result)

        @staticmethod
        def jvp(ctx: Any, wrt_tangent: Any, *tangents: Any) -> Any:
            tensors = ctx.saved_tensors
            k = _only_float(ctx.wrt, tensors)
            tangent = tangents[k] if tangents[k] is not None else torch.zeros_like(tensors[k])
            return (Hvp.apply(k, tangent, *tensors),)

        @staticmethod
        def vmap(info: Any, in_dims: tuple[Any, ...], wrt: tuple[int, ...], *tensors: Any) -> Any:
            dims = in_dims[1:]
            if not fns.uses_pyjlad_vmap:
                return _loop(lambda *ts: Gradients.apply(wrt, *ts), dims, tensors, info.batch_size), (0,) * len(wrt)
            moved = _batch_first(dims, tensors)
            axes = tuple(None if d is None else 0 for d in dims)
            out = fns.batched(grad(fns.numba_f, wrt=wrt), ("grad", wrt), axes)(*fns.arguments(moved, batched=True))
            out = out if isinstance(out, tuple) else (out,)
            return tuple(_tensor(g, tensors[k]) for g, k in zip(out, wrt)), (0,) * len(wrt)

    Pullback = _make_pullback(fns)

    class Value(torch.autograd.Function):
        """``f`` itself: backward ``grad_output * gradient`` for a number, pyjlad's vjp for an array."""

        @staticmethod
        def forward(*tensors: Any) -> Any:
            return fns.value(tensors)

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            ctx.scalar = output.ndim == 0
            ctx.save_for_backward(*inputs)
            ctx.save_for_forward(*inputs)

        @staticmethod
        def jvp(ctx: Any, *tangents: Any) -> Any:
            tensors = ctx.saved_tensors
            if not ctx.scalar:
                raise UnsupportedFunctionError("forward mode of array-valued functions through "
                                               "pyjlad.interop.torch.to_torch is not provided: use pyjlad.jvp")
            wrt = tuple(k for k, t in enumerate(tensors) if _is_float(t) and tangents[k] is not None)
            total = torch.zeros((), dtype=tensors[wrt[0]].dtype) if wrt else None
            for k, g in zip(wrt, Gradients.apply(wrt, *tensors) if wrt else ()):
                total = total + (g * tangents[k]).sum()
            return total

        @staticmethod
        def backward(ctx: Any, grad_output: Any) -> Any:
            tensors = ctx.saved_tensors
            wrt = tuple(k for k, t in enumerate(tensors) if _is_float(t) and ctx.needs_input_grad[k])
            result: list[Any] = [None] * len(tensors)
            if not wrt:
                return tuple(result)
            if not ctx.scalar:
                cots = Pullback.apply(grad_output, *tensors)
                return tuple(c if k in wrt else None for k, c in enumerate(cots))
            for k, g in zip(wrt, Gradients.apply(wrt, *tensors)):
                result[k] = grad_output * g
            return tuple(result)

        @staticmethod
        def vmap(info: Any, in_dims: tuple[Any, ...], *tensors: Any) -> Any:
            if not fns.uses_pyjlad_vmap:
                return _loop(Value.apply, in_dims, tensors, info.batch_size), 0
            moved = _batch_first(in_dims, tensors)
            axes = tuple(None if d is None else 0 for d in in_dims)
            out = fns.batched(fns.numba_f, "value", axes)(*fns.arguments(moved, batched=True))
            return torch.as_tensor(np.asarray(out)), 0

    return Value


def _make_pullback(fns: _Functions) -> type:
    """pyjlad's vjp of an array-valued ``f`` as an autograd Function (differentiable once)."""

    class Pullback(torch.autograd.Function):
        @staticmethod
        def forward(cotangent: Any, *tensors: Any) -> Any:
            _, cots = vjp(fns.f, tuple(fns.arguments(tensors)), _numpy(cotangent), engine=fns.engine)
            return tuple(None if c is None or not _is_float(t) else _tensor(c, t) for c, t in zip(cots, tensors))

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            pass

        @staticmethod
        def backward(ctx: Any, *grads: Any) -> Any:
            raise UnsupportedFunctionError("second derivatives of array-valued functions through "
                                           "pyjlad.interop.torch.to_torch are not provided")

        @staticmethod
        def vmap(info: Any, in_dims: tuple[Any, ...], cotangent: Any, *tensors: Any) -> Any:
            out = _loop(Pullback.apply, in_dims, (cotangent, *tensors), info.batch_size)
            return out, tuple(None if o is None else 0 for o in out)

    return Pullback


def to_torch(f: Any, *, engine: str | None = None) -> Any:
    """Wrap ``f`` (float, integer and array arguments) as a differentiable PyTorch function.

    Returns a function of CPU tensors; see the module's docstring for the
    transforms it supports. The result is a scalar tensor when ``f`` returns a
    number, else a tensor of ``f``'s result.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from pyjlad.interop.torch import to_torch
    >>> loss = to_torch(lambda x: np.sum(x ** 3))
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> (2 * loss(x)).backward()
    >>> x.grad.tolist()
    [6.0, 24.0]
    >>> torch.func.vmap(torch.func.grad(loss))(torch.ones(3, 2, dtype=torch.float64)).tolist()
    [[3.0, 3.0], [3.0, 3.0], [3.0, 3.0]]
    >>> torch.func.hessian(loss)(x.detach()).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    value = _make(_Functions(f, engine))

    def call(*tensors: Any) -> Any:
        # A Python number is a constant tensor (autograd saves tensors only; an int was an AttributeError), a
        # float a float64 one (torch's default dtype would round it to float32).
        return value.apply(*(_constant(t) for t in tensors))

    call.__wrapped__ = f
    return call
