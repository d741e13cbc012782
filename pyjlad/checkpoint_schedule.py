"""The snapshot schedule of :func:`pyjlad.checkpointed_loop`: multi-level periodic checkpointing.

A loop of ``n`` steps is reversed with ``m`` levels of periodic snapshots. With
the ratio ``c``, the smallest integer with ``c ** m >= n``, level ``i`` (``1 <=
i < m``) cuts each segment of the level above into chunks of ``c ** (m - i)``
steps and keeps the state at the start of each chunk; the last level (the leaf)
keeps every state of one chunk, and the gradient goes back through them one step
at a time. ``m = 1`` stores every state, ``m = 2`` is the classic ``sqrt(n)``
scheme, and ``m = ceil(log2 n)`` (``c = 2``) keeps ``O(log n)`` states.

Costs, for ``n`` steps and ``m`` levels:

- states held at once: about ``m * c`` (``ceil(n / s1) + sum of ceil(s_i / s_{i+1})
  + s_{m-1}``, with ``s_i = c ** (m - i)``), plus 4 working states (the final state,
  two adjoints, the step's output buffer) and one params-sized adjoint;
- primal steps: ``n`` (the first sweep) plus at most ``n`` recomputed per level
  below the first: at most ``m * n`` in all (exact counts in :class:`Schedule`);
- one reverse sweep of the step (an Enzyme vjp) per step: ``n``.

:func:`plan` takes the fewest levels whose memory fits the cap (fewest
recomputations).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .errors import OutOfMemoryError

__all__ = ["Schedule", "plan", "smallest", "WORK_STATES"]

#: States the reverse sweep holds besides the snapshots: final state, two adjoints, the step's output buffer.
WORK_STATES = 4


@dataclass(frozen=True)
class Schedule:
    """What the checkpointed gradient of an ``n_steps`` loop stores and recomputes.

    Attributes
    ----------
    n_steps : int
        Steps of the loop.
    strides : tuple of int
        Chunk length of each level below the first, from the top (``()`` for one level: store every state);
        the leaf keeps every state of a chunk of ``strides[-1]`` steps (of all ``n_steps`` for one level).
    state_bytes, params_bytes : int
        Bytes of one state and of the params.
    states_stored : int
        Snapshots held at once (every level's buffer together).
    forward_steps : int
        Primal steps run: the first sweep's ``n_steps`` and the recomputed ones.

    The properties :attr:`memory_bytes` (``(states_stored + WORK_STATES) * state_bytes + params_bytes``),
    :attr:`recomputed_steps` and :attr:`vjp_steps` derive from these.

    Examples
    --------
    >>> s = plan(100, 24, 8, max_memory=10**6)
    >>> s.levels, s.states_stored, s.recomputed_steps
    (1, 100, 0)
    >>> s = plan(100, 24, 8, max_memory=1000)
    >>> s.levels, s.strides, s.states_stored, s.recomputed_steps
    (2, (10,), 20, 90)
    """

    n_steps: int
    strides: tuple[int, ...]
    state_bytes: int
    params_bytes: int
    states_stored: int
    forward_steps: int

    @property
    def levels(self) -> int:
        """Levels of snapshots (1: every state stored; 2: ``sqrt(n)``)."""
        return len(self.strides) + 1

    @property
    def memory_bytes(self) -> int:
        """Bytes the schedule allocates (snapshots, working states, the params' adjoint)."""
        return (self.states_stored + WORK_STATES) * self.state_bytes + self.params_bytes

    @property
    def recomputed_steps(self) -> int:
        """Primal steps run again in the reverse sweep."""
        return self.forward_steps - self.n_steps

    @property
    def vjp_steps(self) -> int:
        """Reverse sweeps of the step."""
        return self.n_steps

    def buffer_rows(self) -> tuple[int, ...]:
        """States of each level's snapshot buffer, from the top; the last is the leaf's."""
        if not self.strides:
            return (self.n_steps,)
        tops = (self.n_steps, *self.strides)
        return tuple(-(-a // b) for a, b in zip(tops[:-1], tops[1:])) + (self.strides[-1],)


def _ratio(n: int, m: int) -> int:
    """The smallest integer ``c >= 2`` with ``c ** m >= n``."""
    c = max(2, int(round(n ** (1.0 / m))))
    while c > 2 and (c - 1) ** m >= n:
        c -= 1
    while c ** m < n:
        c += 1
    return c


def _strides(n: int, m: int) -> tuple[int, ...]:
    c = _ratio(n, m)
    return tuple(min(c ** (m - i), n) for i in range(1, m))


def _forward_steps(n: int, strides: tuple[int, ...]) -> int:
    """Primal steps the schedule runs (the first sweep and every recomputation)."""
    @functools.cache
    def below(level: int, length: int) -> int:
        # a segment of `length` steps at `level` (0-based index into strides; len(strides) = the leaf)
        if level == len(strides):
            return length - 1
        chunk = strides[level]
        p = -(-length // chunk)
        runs = (p - 1) * chunk
        last = length - (p - 1) * chunk
        return runs + (p - 1) * below(level + 1, chunk) + below(level + 1, last)

    if n == 0:
        return 0
    if not strides:
        return n
    chunk = strides[0]
    p = -(-n // chunk)
    return n + (p - 1) * below(1, chunk) + below(1, n - (p - 1) * chunk)


def _schedule(n: int, m: int, state_bytes: int, params_bytes: int) -> Schedule:
    strides = _strides(n, m) if m > 1 else ()
    probe = Schedule(n, strides, state_bytes, params_bytes, 0, 0)
    stored = sum(probe.buffer_rows()) if n else 0
    return Schedule(n, strides, state_bytes, params_bytes, stored, _forward_steps(n, strides))


def plan(n_steps: int, state_bytes: int, params_bytes: int, max_memory: int) -> Schedule:
    """The schedule with the fewest levels whose :attr:`Schedule.memory_bytes` fit ``max_memory``.

    Raises
    ------
    OutOfMemoryError
        If every number of levels (up to ``c = 2``: ``O(log n)`` states) needs more than ``max_memory``; the message says how much.

    Examples
    --------
    >>> s = plan(10**7, 24, 8, max_memory=100 * 2**20)
    >>> s.levels, s.strides, s.states_stored, s.recomputed_steps
    (2, (3163,), 6325, 9996838)
    >>> plan(10**6, 8 * 2**20, 8, max_memory=2**28)
    Traceback (most recent call last):
    ...
    pyjlad.errors.OutOfMemoryError: a checkpointed loop of 1000000 steps with states of 8388608 bytes needs at least 352321544 bytes (38 snapshots, 13 levels); max_memory is 268435456
    """
    for m in range(1, _most_levels(n_steps) + 1):
        schedule = _schedule(n_steps, m, state_bytes, params_bytes)
        if schedule.memory_bytes <= max_memory:
            return schedule
    best = smallest(n_steps, state_bytes, params_bytes)
    raise OutOfMemoryError(
        f"a checkpointed loop of {n_steps} steps with states of {state_bytes} bytes needs at least "
        f"{best.memory_bytes} bytes ({best.states_stored} snapshots, {best.levels} levels); "
        f"max_memory is {max_memory}")


def _most_levels(n: int) -> int:
    """Levels at ``c = 2``: ``ceil(log2 n)`` (at least 1)."""
    top = 1
    while (1 << top) < n:
        top += 1
    return top


def smallest(n_steps: int, state_bytes: int, params_bytes: int) -> Schedule:
    """The schedule that needs the least memory (the ``max_memory`` below which :func:`plan` refuses).

    Examples
    --------
    >>> s = smallest(100, 24, 8)
    >>> s.levels, s.strides, s.states_stored, s.memory_bytes
    (3, (25, 5), 14, 440)
    """
    schedules = [_schedule(n_steps, m, state_bytes, params_bytes) for m in range(1, _most_levels(n_steps) + 1)]
    return min(schedules, key=lambda s: (s.memory_bytes, s.forward_steps))
