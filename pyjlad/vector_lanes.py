"""An array and its ``W`` shadows in one buffer, the ``W`` directions of each element adjacent.

Enzyme's vector mode reads and writes the ``W`` shadows of an array element as
``W`` separate accesses. Stacked one after the other (``W`` slices of the
array), they are ``nitems`` elements apart and LLVM emits ``W`` scalar loads
and inserts per element; interleaved, one element apart, they are consecutive
and its SLP vectorizer makes them vector loads and stores. An interleaved array
is one buffer of shape ``(*shape, W + 1)``: ``[..., 0]`` the primal (passed to
the function as a strided view, Numba's ``A`` layout), ``[..., 1:]`` the ``W``
shadows, each addressed with the primal's strides (the driver:
:mod:`pyjlad.engines.vector_driver`, ``Sweep.interleaved``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .shadow_guards import guarded

__all__ = ["HessianLanes", "Lanes"]


class Lanes:
    """One array argument of a width-``W`` sweep and its ``W`` shadows, interleaved.

    Examples
    --------
    >>> import numpy as np
    >>> lanes = Lanes(np.array([1.0, 2.0]), 3)
    >>> lanes.load(np.array([5.0, 6.0]), np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    >>> lanes.buffer.tolist()
    [[5.0, 1.0, 0.0, 0.0], [6.0, 0.0, 1.0, 0.0]]
    >>> lanes.primal.tolist(), lanes.directions()[1].tolist()
    ([5.0, 6.0], [0.0, 1.0])
    """

    def __init__(self, like: Any, width: int) -> None:
        like = np.asarray(like)
        self.width = width
        self.buffer = guarded((*like.shape, width + 1), like.dtype)  # (a guard zone after it: a read one past
        # the end reads zeros there, and its adjoint is added there, where the sweep's check finds it)
        self.primal = self.buffer[..., 0]  # what the function gets (strided: Numba's A layout)
        self.shadows = self.buffer[..., 1:]  # what the driver gets (its data pointer: shadow 0)
        ndim = self.primal.ndim
        self._stacked = self.shadows.transpose((ndim, *range(ndim)))  # the shadows as (W, *shape), a view
        self._flat = self.buffer.reshape(-1)

    def load(self, primal: Any = None, directions: Any = None) -> None:
        """The primal (copied in; kept where ``None``) and the ``W`` shadows: ``directions`` stacked
        ``(W, *shape)``, or zeros."""
        if directions is None and primal is not None:
            self.buffer.fill(0)  # (whole: cheaper than the strided shadows)
            self.primal[...] = primal
            return
        if primal is not None:
            self.primal[...] = primal
        self._stacked[...] = 0 if directions is None else directions

    def clear(self) -> None:
        """Primal and shadows zero."""
        self.buffer.fill(0)

    def load_units(self, primal: Any, start: int, stop: int) -> None:
        """As :meth:`load`, the shadows the unit directions ``start, ..., stop - 1`` (elements in C order),
        then zeros: shadow ``k`` is one at element ``start + k``, set in place.

        >>> lanes = Lanes(np.zeros((2, 2)), 3)
        >>> lanes.load_units(None, 1, 3)
        >>> lanes.directions().reshape(3, 4).tolist()
        [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
        """
        self.load(primal)
        self.set_units(start, stop)

    def set_units(self, start: int, stop: int) -> None:
        """Shadow ``k`` one at element ``start + k``, for ``k < stop - start`` (the rest left as it is)."""
        stride = self.width + 1  # element e's shadow k sits at e * stride + 1 + k in the flat buffer
        first = start * stride + 1
        self._flat[first:first + (stop - start) * (stride + 1):stride + 1] = 1

    def directions(self) -> np.ndarray:
        """The ``W`` shadows stacked ``(W, *shape)`` (a view)."""
        return self._stacked


class HessianLanes:
    """The argument of a width-``W`` Hessian sweep (:func:`~pyjlad.engines.vector_driver.vector_hvp_driver`),
    interleaved: per element, the primal, its gradient (the inner reverse sweep's shadow), ``W``
    tangents ``v_k`` and the ``W`` tangents of the gradient, ``H v_k`` (one buffer ``(*shape, 2 W + 2)``).

    Examples
    --------
    >>> import numpy as np
    >>> lanes = HessianLanes(np.zeros(2), 2)
    >>> lanes.load(np.array([3.0, 4.0]), np.eye(2))
    >>> lanes.buffer.tolist()
    [[3.0, 0.0, 1.0, 0.0, 0.0, 0.0], [4.0, 0.0, 0.0, 1.0, 0.0, 0.0]]
    >>> lanes.shadows()[1].shape  # the gradient buffer: one per element
    (2,)
    """

    def __init__(self, like: Any, width: int) -> None:
        like = np.asarray(like)
        self.width = width
        self.buffer = guarded((*like.shape, 2 * width + 2), like.dtype)  # (a guard zone after it, as Lanes)
        self.primal = self.buffer[..., 0]
        axes = (like.ndim, *range(like.ndim))
        self._tangents = self.buffer[..., 2:width + 2]
        self._products = self.buffer[..., width + 2:]
        self._stacked_tangents = self._tangents.transpose(axes)

    def load(self, primal: Any, directions: Any) -> None:
        """The primal (copied in), the ``W`` directions stacked ``(W, *shape)``; gradient and products zero."""
        self.buffer.fill(0)  # (whole: cheaper than the strided shadows)
        self.primal[...] = primal
        self._stacked_tangents[...] = directions

    def shadows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the driver gets (their data pointers): the tangents, the gradient, the products."""
        return self._tangents, self.buffer[..., 1], self._products

    def columns(self) -> np.ndarray:
        """``H v_k`` as the columns of a ``(size, W)`` matrix (a view)."""
        return self._products.reshape(-1, self._products.shape[-1])
