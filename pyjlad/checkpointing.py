"""Gradients of long time loops in bounded memory: :func:`checkpointed_loop` (issue 20, part 1).

``loss(step(...step(step(state0, params, 0), params, 1)..., params, n - 1))``
is differentiated with respect to ``state0`` and ``params`` by reversing the
loop one step at a time: each step's vector-Jacobian product is one Enzyme
reverse sweep of ``step`` (a :class:`~pyjlad.numba_calls.RawSweep` called
from ``@njit`` code), and the states those sweeps need are recomputed from
snapshots kept by the multi-level periodic schedule of
:mod:`pyjlad.checkpoint_schedule`, sized to ``max_memory``. The loops over
steps (the forward sweeps storing snapshots, the recomputations, the reverse
sweeps of a leaf chunk, and the walk over the levels) are ``@njit`` functions
built once per ``step``: no Python runs per step or per chunk. ``docs/checkpointing.md``
describes the schedule and its costs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numba.core.errors import TypingError

from .activity import Activity
from .checkpoint_schedule import Schedule, plan
from .errors import ArgumentError, ArgumentTypeError
from .export import describe_function
from .export_compile import as_numba_function
from .memo import cached_for
from .out_of_bounds import check_guards
from .shadow_guards import guarded_zeros
from .sweep import Sweep

__all__ = ["checkpointed_loop", "CheckpointedLoop", "DEFAULT_MAX_MEMORY"]

#: The default cap on what the schedule allocates: 256 MiB.
DEFAULT_MAX_MEMORY = 256 * 2**20


def checkpointed_loop(step: Any, loss: Any, n_steps: int, *, max_memory: int = DEFAULT_MAX_MEMORY
                      ) -> CheckpointedLoop:
    """The loop ``state = step(state, params, k) for k in range(n_steps); return loss(state)``, with a
    gradient that keeps at most ``max_memory`` bytes of states.

    Parameters
    ----------
    step : @njit function
        ``step(state, params, k) -> new state``: an array of the state's shape and dtype (a new array:
        ``step`` must not modify ``state``); ``k`` is the step index (an int).
    loss : @njit function
        ``loss(state) -> float``.
    n_steps : int
        Steps of the loop (``0``: the gradient of ``loss`` at ``state0``).
    max_memory : int
        Bytes the gradient's snapshots and working states may take (default 256 MiB); the step's own
        temporaries come on top. The fewest levels of snapshots that fit are used: see
        :class:`pyjlad.checkpoint_schedule.Schedule`.

    Returns
    -------
    CheckpointedLoop
        ``loop(state0, params)`` is the value; ``loop.value_and_grad(state0, params)`` is
        ``(value, (d_state0, d_params))``; ``loop.schedule(state0, params)`` the schedule used.

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> @njit
    ... def step(u, a, k):
    ...     return u * a + 1.0
    >>> @njit
    ... def loss(u):
    ...     return np.sum(u)
    >>> loop = pyjlad.checkpointed_loop(step, loss, 10, max_memory=200)
    >>> loop(np.array([1.0, 2.0]), 2.0)          # u10 = a^10 u0 + a^9 + ... + 1
    5118.0
    >>> value, (du0, da) = loop.value_and_grad(np.array([1.0, 2.0]), 2.0)
    >>> du0.tolist(), da                          # d/da = 10 a^9 u0 + sum_j j a^(j-1), summed
    ([1024.0, 1024.0], 23554.0)
    >>> s = loop.schedule(np.array([1.0, 2.0]), 2.0)
    >>> s.levels, s.strides, s.states_stored, s.recomputed_steps
    (2, (4,), 7, 7)
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
        raise ArgumentError(f"n_steps must be a non-negative int, got {n_steps!r}")
    if isinstance(max_memory, bool) or not isinstance(max_memory, (int, np.integer)) or max_memory <= 0:
        raise ArgumentError(f"max_memory must be a positive number of bytes, got {max_memory!r}")
    for name, f in (("step", step), ("loss", loss)):
        if not callable(f):
            raise ArgumentTypeError(f"{name} must be an @njit function, got {type(f).__name__}")
    return CheckpointedLoop(as_numba_function(step), as_numba_function(loss), int(n_steps), int(max_memory))


class CheckpointedLoop:
    """A loop made by :func:`checkpointed_loop`; see there.

    Attributes
    ----------
    last_schedule : Schedule or None
        The schedule of the last gradient, with the primal steps it ran counted
        (:attr:`~pyjlad.checkpoint_schedule.Schedule.forward_steps`).
    """

    def __init__(self, step: Any, loss: Any, n_steps: int, max_memory: int) -> None:
        self.step, self.loss, self.n_steps, self.max_memory = step, loss, n_steps, max_memory
        self.last_schedule: Schedule | None = None

    def __repr__(self) -> str:
        return (f"pyjlad.checkpointed_loop({describe_function(self.step)}, {describe_function(self.loss)}, "
                f"{self.n_steps}, max_memory={self.max_memory})")

    def __call__(self, state0: Any, params: Any) -> float:
        """The loop's value: ``n_steps`` steps from ``state0``, then ``loss`` (no snapshots)."""
        state, p = self._checked(state0, params)
        pristine = np.copy(p)
        value = float(_kernels(self.step, self.loss, np.ndim(p) > 0).run(state, p, self.n_steps))
        _params_unchanged(p, pristine)
        return value

    def schedule(self, state0: Any, params: Any) -> Schedule:
        """The schedule the gradient at ``(state0, params)`` uses (from the sizes alone; nothing runs)."""
        state = _as_state(state0)
        return plan(self.n_steps, state.nbytes, _as_params(params).nbytes, self.max_memory)

    def grad(self, state0: Any, params: Any) -> tuple[np.ndarray, Any]:
        """``(d_state0, d_params)``: :meth:`value_and_grad` without the value."""
        return self.value_and_grad(state0, params)[1]

    def value_and_grad(self, state0: Any, params: Any) -> tuple[float, tuple[np.ndarray, Any]]:
        """``(value, (d_state0, d_params))``; ``d_params`` a float for a float ``params``, else an array.

        Raises
        ------
        OutOfMemoryError
            If no schedule fits ``max_memory`` (the message says how many bytes the smallest needs).
        """
        from .transforms import value_and_grad

        state, p = self._checked(state0, params)
        pristine = p.copy()
        schedule = plan(self.n_steps, state.nbytes, p.nbytes, self.max_memory)
        kern = _kernels(self.step, self.loss, p.ndim > 0)
        run = _Run(kern, schedule, state, p)
        final = run.forward()
        value, lam = value_and_grad(self.loss, engine="embedded")(final)
        lam = np.ascontiguousarray(lam, dtype=state.dtype).reshape(state.shape)
        d_state0 = run.reverse(lam)
        check_guards(self.step, (state, p if p.ndim else float(p), 0), run.shadows, rerun=False)
        _params_unchanged(p, pristine)
        self.last_schedule = Schedule(schedule.n_steps, schedule.strides, schedule.state_bytes,
                                      schedule.params_bytes, schedule.states_stored, run.forward_steps)
        d_params = float(run.dp_scalar) if p.ndim == 0 else run.dp.copy()
        return float(value), (d_state0.copy(), d_params)

    def _checked(self, state0: Any, params: Any) -> tuple[np.ndarray, Any]:
        """Copies of the arguments, and ``step``/``loss`` checked once on them, in the user's terms."""
        state, p = _as_state(state0).copy(), _as_params(params).copy()
        arg = p if p.ndim else p[()]
        if self.n_steps:
            before = state.copy()
            try:
                out = self.step(state, arg, 0)
            except (TypingError, TypeError) as exc:  # Numba's typing, or a wrong number of arguments
                raise ArgumentTypeError(f"step cannot be called as step(state, params, k) with a {state.dtype} "
                                        f"array of shape {state.shape}, params {_describe(params)} and an int k: "
                                        f"{str(exc).splitlines()[0]}") from None
            if not isinstance(out, np.ndarray) or out.shape != state.shape or out.dtype != state.dtype:
                got = f"a {out.dtype} array of shape {out.shape}" if isinstance(out, np.ndarray) else repr(type(out))
                raise ArgumentError(f"step must return an array of the state's shape {state.shape} and dtype "
                                    f"{state.dtype}; it returned {got}")
            if not np.array_equal(before, state, equal_nan=True):
                raise ArgumentError("step modifies its state argument; it must return a new array instead")
            _params_unchanged(p, _as_params(params))
            state = before
        try:
            value = self.loss(state.copy())
        except (TypingError, TypeError) as exc:
            raise ArgumentTypeError(f"loss cannot be called as loss(state) with a {state.dtype} array of shape "
                                    f"{state.shape}: {str(exc).splitlines()[0]}") from None
        if not isinstance(value, (float, np.floating)):
            raise ArgumentTypeError(f"loss must return a float, it returned {type(value).__name__}")
        return state, arg


def _params_unchanged(p: Any, pristine: Any) -> None:
    """Raise where the step wrote into ``p``, the loop's copy of the parameters (equal to ``pristine`` before)."""
    if not np.array_equal(p, pristine, equal_nan=True):
        raise ArgumentError("step modifies its params argument; the checkpointed loop reruns steps, so every step "
                            "must see the same params: compute a new value instead of writing into params")


def _describe(params: Any) -> str:
    return f"a {params.dtype} array of shape {params.shape}" if isinstance(params, np.ndarray) else repr(params)


def _as_state(state0: Any) -> np.ndarray:
    if not isinstance(state0, np.ndarray) or state0.dtype not in (np.float64, np.float32) or state0.ndim == 0:
        raise ArgumentTypeError(f"state0 must be a float64 or float32 array of 1 or more dimensions, got "
                                f"{_describe(state0) if isinstance(state0, np.ndarray) else type(state0).__name__}")
    return np.ascontiguousarray(state0)


def _as_params(params: Any) -> np.ndarray:
    """``params`` as an array (0-d for a float); a float or a float array only."""
    if isinstance(params, (float, np.floating)) and not isinstance(params, np.float16):
        return np.asarray(params, dtype=np.float64 if isinstance(params, float) else params.dtype)
    if isinstance(params, np.ndarray) and params.dtype in (np.float64, np.float32) and params.ndim > 0:
        return np.ascontiguousarray(params)
    raise ArgumentTypeError(f"params must be a float or a float64/float32 array, got "
                            f"{_describe(params) if isinstance(params, np.ndarray) else type(params).__name__}")


class _Run:
    """One gradient: the snapshot buffer of ``schedule`` (every level's rows, one after the other)."""

    def __init__(self, kern: Any, schedule: Schedule, state: np.ndarray, p: Any) -> None:
        self.kern, self.schedule, self.state0, self.p = kern, schedule, state, p
        rows = schedule.buffer_rows() if schedule.n_steps else (0,)
        self.offsets = np.cumsum((0, *rows[:-1])).astype(np.int64)
        self.chunks = np.array((schedule.n_steps, *schedule.strides), dtype=np.int64)
        self.rows = rows
        self.buffer = np.empty((sum(rows), *state.shape), state.dtype)
        self.forward_steps = 0
        self.dp_scalar = 0.0
        self.dp = guarded_zeros(np.asarray(p))  # (guard zones: pyjlad.shadow_guards)
        self.shadows: list[tuple[int, np.ndarray]] = [(1, self.dp)]  # (step's argument, a shadow it may overrun)

    def forward(self) -> np.ndarray:
        """The first sweep: all ``n`` steps, keeping the top level's snapshots; the final state."""
        n = self.schedule.n_steps
        if n == 0:
            return self.state0.copy()
        every = int(self.chunks[1]) if len(self.chunks) > 1 else 1
        self.forward_steps += n
        return self.kern.advance(self.state0, self.p, 0, n, every, self.buffer, 0, self.rows[0])

    def reverse(self, lam: np.ndarray) -> np.ndarray:
        """The adjoint of ``state0`` from ``lam``, the adjoint of the final state."""
        if self.schedule.n_steps == 0:
            return lam
        # The state's adjoint alternates between two buffers (the loss's gradient, guarded by its own sweep, and
        # one more), each with a guard zone a step reading past the state's end adds into.
        lam, spare, self.dp_scalar, recomputed = self.kern.backward(
            self.buffer, self.offsets, self.chunks, self.p, lam, guarded_zeros(lam), np.zeros_like(lam), self.dp)
        self.shadows += [(0, lam), (0, spare)]
        self.forward_steps += recomputed
        return lam


class _Kernels:
    """The ``@njit`` loops of one ``step`` and ``loss``, for float or array params."""

    def __init__(self, step: Any, loss: Any, array_params: bool) -> None:
        from .numba_calls import raw_sweep

        @njit
        def writer(out, state, p, k):  # out[...] = step(state, p, k): the function whose reverse sweep is a vjp
            y = step(state, p, k)
            of = out.reshape(out.size)
            yf = np.ascontiguousarray(y).reshape(y.size)
            for i in range(of.size):
                of[i] = yf[i]

        sweep = raw_sweep(writer, Sweep("ad", "reverse", (Activity.DIFF, Activity.DIFF, Activity.DIFF, Activity.CONST)))

        @njit
        def advance(s, p, k0, nsteps, every, buf, off, nsnap):
            """``nsteps`` steps from ``s``; every ``every``-th state (``nsnap`` of them) into ``buf[off:]``.

            From a copy of ``s``: ``s`` is a snapshot row when recomputing, and a step that writes into its
            state argument (only some steps do; the check in ``_checked`` sees step 0) must not change it."""
            s = s.copy()
            for i in range(nsteps + 1):
                if i % every == 0 and i // every < nsnap:
                    buf[off + i // every] = s
                if i < nsteps:
                    s = step(s, p, k0 + i)
            return s

        if array_params:
            @njit
            def leaf(buf, off, p, k0, length, lam, tmp, out, dp):
                """Back through the steps ``k0 .. k0 + length - 1`` from their states ``buf[off:]``."""
                for j in range(length - 1, -1, -1):
                    sweep((out, buf[off + j], p, k0 + j), (lam, tmp, dp), 0.0)
                    lam, tmp = tmp, lam   # the sweep zeroes the seed it reads (out's shadow)
                return lam, tmp, 0.0
        else:
            @njit
            def leaf(buf, off, p, k0, length, lam, tmp, out, dp):
                acc = 0.0
                for j in range(length - 1, -1, -1):
                    _, _, adj = sweep((out, buf[off + j], p, k0 + j), (lam, tmp), 0.0)
                    acc += adj[0]
                    lam, tmp = tmp, lam
                return lam, tmp, acc

        @njit
        def backward(buf, offs, chunks, p, lam, tmp, out, dp):
            """The schedule's reverse sweep, levels walked depth first (the top's snapshots already in ``buf``):
            ``(adjoint of state0, spare buffer, scalar params' adjoint, primal steps recomputed)``."""
            m = chunks.shape[0]
            if m == 1:
                lam, tmp, acc = leaf(buf, 0, p, 0, chunks[0], lam, tmp, out, dp)
                return lam, tmp, acc, 0
            acc, recomputed = 0.0, 0
            k0, ln, j = np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m, np.int64)
            ln[0] = chunks[0]
            j[0] = (chunks[0] + chunks[1] - 1) // chunks[1] - 1
            lvl = 0
            while lvl >= 0:
                if j[lvl] < 0:   # this segment is done: on to the previous piece of its parent
                    lvl -= 1
                    if lvl >= 0:
                        j[lvl] -= 1
                    continue
                c = chunks[lvl + 1]
                start = k0[lvl] + j[lvl] * c
                length = min(c, ln[lvl] - j[lvl] * c)
                child = lvl + 1
                buf[offs[child]] = buf[offs[lvl] + j[lvl]]
                if child == m - 1:
                    advance(buf[offs[child]], p, start, length - 1, 1, buf, offs[child], length)
                    recomputed += length - 1
                    lam, tmp, a = leaf(buf, offs[child], p, start, length, lam, tmp, out, dp)
                    acc += a
                    j[lvl] -= 1
                else:
                    cc = chunks[child + 1]
                    pieces = (length + cc - 1) // cc
                    advance(buf[offs[child]], p, start, (pieces - 1) * cc, cc, buf, offs[child], pieces)
                    recomputed += (pieces - 1) * cc
                    k0[child], ln[child], j[child] = start, length, pieces - 1
                    lvl = child
            return lam, tmp, acc, recomputed

        @njit
        def run(s, p, n):
            for k in range(n):
                s = step(s, p, k)
            return loss(s)

        self.advance, self.leaf, self.backward, self.run = advance, leaf, backward, run


def _kernels(step: Any, loss: Any, array_params: bool) -> _Kernels:
    return cached_for(step, ("checkpointed-loop", loss, array_params), lambda: _Kernels(step, loss, array_params))
