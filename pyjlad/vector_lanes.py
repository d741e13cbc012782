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

__all__ = ["HessianLanes", "Lanes", "interleaved_indices", "lanes_for", "loaded"]


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
        self.buffer = np.zeros((*like.shape, width + 1), like.dtype)
        self.primal = self.buffer[..., 0]  # what the function gets (strided: Numba's A layout)
        self.shadows = self.buffer[..., 1:]  # what the driver gets (its data pointer: shadow 0)
        ndim = self.primal.ndim
        self._stacked = self.shadows.transpose((ndim, *range(ndim)))  # the shadows as (W, *shape), a view

    def load(self, primal: Any, directions: Any = None) -> None:
        """The primal (copied in) and the ``W`` shadows: ``directions`` stacked ``(W, *shape)``, or zeros."""
        self.primal[...] = primal
        self._stacked[...] = 0 if directions is None else directions

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
        self.buffer = np.zeros((*like.shape, 2 * width + 2), like.dtype)
        self.primal = self.buffer[..., 0]
        axes = (like.ndim, *range(like.ndim))
        self._tangents = self.buffer[..., 2:width + 2]
        self._products = self.buffer[..., width + 2:]
        self._stacked_tangents = self._tangents.transpose(axes)
        self._stacked_products = self._products.transpose(axes)

    def load(self, primal: Any, directions: Any) -> None:
        """The primal (copied in), the ``W`` directions stacked ``(W, *shape)``; gradient and products zero."""
        self.buffer[..., 1:] = 0
        self.primal[...] = primal
        self._stacked_tangents[...] = directions

    def shadows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What the driver gets (their data pointers): the tangents, the gradient, the products."""
        return self._tangents, self.buffer[..., 1], self._products

    def products(self) -> np.ndarray:
        """``H v_k`` stacked ``(W, *shape)`` (a view)."""
        return self._stacked_products


def lanes_for(primals: tuple[Any, ...], indices: list[int], writes: tuple[bool, ...], width: int) -> dict[int, Lanes]:
    """An interleaved buffer per array among ``primals[indices]`` that the function does not write (one
    it writes keeps its layout: a function may write it through a view, such as ``ravel()``, that is a
    copy of a strided array)."""
    return {i: Lanes(primals[i], width) for i in indices
            if isinstance(primals[i], np.ndarray) and not (writes and writes[i])}


def interleaved_indices(lanes: dict[int, Lanes], out_lanes: Lanes | None) -> tuple[int, ...]:
    """The swept function's arguments that are interleaved (the output buffer first, if any)."""
    if out_lanes is None:
        return tuple(sorted(lanes))
    return (0, *sorted(i + 1 for i in lanes))


def loaded(args: tuple[Any, ...], lanes: dict[int, Lanes], directions: list[Any] | None) -> tuple[Any, ...]:
    """``args`` with each interleaved array replaced by its buffer's primal view, loaded with the array
    and its directions (``directions[i]``; zeros where ``None``)."""
    passed = list(args)
    for i, lane in lanes.items():
        lane.load(args[i], None if directions is None else directions[i])
        passed[i] = lane.primal
    return tuple(passed)
