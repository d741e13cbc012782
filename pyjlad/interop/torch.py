"""Numba functions as PyTorch autograd functions whose derivatives come from pyjlad.

``to_torch(f)`` returns a function of CPU tensors; ``backward()`` through it
runs pyjlad's reverse sweep (one Enzyme-compiled VJP) for the incoming gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MissingDependencyError

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without PyTorch
    raise MissingDependencyError("pyjlad.interop.torch needs PyTorch: pip install torch") from exc

from ..export import as_numba_function
from ..products import vjp

__all__ = ["to_torch"]


def _numpy(t: Any) -> Any:
    array = t.detach().cpu().numpy()
    return array if array.ndim else float(array)


def to_torch(f: Any, *, engine: str | None = None) -> Any:
    """Wrap ``f`` (float and float-array arguments) as a differentiable PyTorch function.

    Examples
    --------
    >>> import numpy as np, torch
    >>> from pyjlad.interop.torch import to_torch
    >>> loss = to_torch(lambda x: np.sum(x ** 3))
    >>> x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    >>> (2 * loss(x)).backward()
    >>> x.grad.tolist()
    [6.0, 24.0]
    """
    numba_f = as_numba_function(f)

    class NumbaFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            ctx.save_for_backward(*tensors)
            return torch.as_tensor(np.asarray(numba_f(*[_numpy(t) for t in tensors])))

        @staticmethod
        def backward(ctx, grad_output):
            tensors = ctx.saved_tensors
            primals = tuple(_numpy(t) for t in tensors)
            cot = _numpy(grad_output)
            _, cots = vjp(f, primals, cot, engine=engine)
            return tuple(
                None if c is None else torch.as_tensor(np.asarray(c), dtype=t.dtype)
                for c, t in zip(cots, tensors)
            )

    def call(*tensors):
        return NumbaFunction.apply(*tensors)

    call.__wrapped__ = f
    return call
