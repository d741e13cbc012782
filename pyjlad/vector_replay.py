"""Repeated vector-mode products, replayed: a call with arguments like an earlier one's skips planning.

Working out how to sweep a function (its argument types, output shape, which arrays it
writes, which layout builds: :mod:`pyjlad.vector_plan`, :mod:`pyjlad.vector_products`) costs
tens of microseconds of Python per call, as much as the sweep itself for a 64x64 Jacobian.
Jacobians, Hessians and batched ``jvp``/``vjp`` (:mod:`pyjlad.vector_products`) use it.
A product that succeeded leaves a *replay* here: the decided sweeps as one callable, kept
per function under a key of everything the decisions depend on (the product and its options,
the engine, the arguments' types and sizes: :func:`~pyjlad.vector_plan.call_key`; a Hessian's,
their types only, as it sizes its buffers per call). A later call with the same key runs the replay; one
whose output shape turns out different (an output sized by the arguments' values), or
whose layout is refused after all, drops it and plans again.

Examples
--------
>>> def twice(x):
...     return 2 * x
>>> remember(twice, ("k",), lambda args: twice(*args))
>>> replayed(twice, ("k",), (3,)), replayed(twice, ("other",), (3,))
(6, None)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .memo import cached_for
from .outputs import OutputShapeChanged
from .vector_plan import Refused
from .vector_sweeps import NotInterleaved

__all__ = ["remember", "replayed"]

#: Replays kept per function (argument shapes, products, options); more clear the table.
MAX_REPLAYS = 16

Replay = Callable[[tuple[Any, ...]], Any]


def _replays(f: Any) -> dict[tuple, Replay]:
    return cached_for(f, ("vector-replays",), dict)


def replayed(f: Any, key: tuple, args: tuple[Any, ...]) -> Any:
    """The result of the replay kept for ``f`` and ``key`` run on ``args``; ``None`` where there is none,
    or it no longer applies (then dropped: the caller plans again)."""
    table = _replays(f)
    replay = table.get(key)
    if replay is None:
        return None
    try:
        return replay(args)
    except (OutputShapeChanged, Refused, NotInterleaved):
        table.pop(key, None)
        return None


def remember(f: Any, key: tuple, replay: Replay) -> None:
    """Keep ``replay`` (``args -> result``) for ``f`` and ``key``."""
    table = _replays(f)
    if key not in table and len(table) >= MAX_REPLAYS:
        table.clear()
    table[key] = replay
