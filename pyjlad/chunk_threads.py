"""The chunks of a vector sweep on several threads, for the Jacobians, Hessians and batched products of
``parallel=True`` functions.

Enzyme builds no parallel derivative of a width-``W`` sweep (:mod:`pyjlad.parallel_derivatives`: vector
mode differentiates the function's serial copy). Their directions come in
chunks of ``W`` that are independent of one another, so for a ``parallel=True`` function (the setting
``PYJLAD_PARALLEL_DERIVATIVES`` on, the default) the chunks run on ``numba.get_num_threads()`` threads
instead, each chunk one call of the serial vector derivative (a ``nogil`` call: the threads run at once),
each thread with its own buffers (:func:`run_chunks`). A sweep is as wide as :func:`sweep_width` says: no
wider than the directions need, and for such a function narrow enough that every thread gets a chunk
(a Jacobian of 20 columns on 2 threads: two chunks of 16 directions, each thread one, instead of one
chunk of 32 on one thread). On a first call the first chunk runs alone. A Hessian taken one
Hessian-vector product per column runs its columns the same way, each product one of the function's serial
copy (``Sweep.serial``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from . import config
from .parallel_derivatives import PARALLEL_TWIN

__all__ = ["chunk_threads", "one_loop_thread", "run_chunks", "runs_in_parallel", "sweep_width"]

S = TypeVar("S")


def chunk_threads(f: Any) -> int:
    """How many threads run the chunks of ``f``'s vector sweeps: ``numba.get_num_threads()`` for a
    ``parallel=True`` Numba function (or the wrapper writing its results, :mod:`pyjlad.outputs`) with the
    setting on, else 1.

    Examples
    --------
    >>> from numba import njit
    >>> chunk_threads(njit(lambda x: x))
    1
    """
    if not runs_in_parallel(f):
        return 1
    import numba

    return max(1, numba.get_num_threads())


def runs_in_parallel(f: Any) -> bool:
    """Whether ``f`` is a ``parallel=True`` Numba function (or the wrapper writing its results,
    :mod:`pyjlad.outputs`) whose derivatives use Numba's threads: the setting ``PYJLAD_PARALLEL_DERIVATIVES`` on.

    Examples
    --------
    >>> from numba import njit
    >>> runs_in_parallel(njit(lambda x: x))
    False
    """
    parallel = getattr(f, "targetoptions", {}).get("parallel") or getattr(f, PARALLEL_TWIN, None)
    return bool(parallel) and config.parallel_derivatives()


@contextlib.contextmanager
def one_loop_thread(threads: int) -> Iterator[None]:
    """Where ``threads`` > 1 (chunks running on several threads), the ``prange`` loops of a parallel derivative
    called in the block run on this thread alone (``numba.set_num_threads(1)``, which holds for the calling
    thread only, restored after): the chunks, not their loops, use the cores, and a chunk's result does
    not depend on how many threads ran it (a parallel derivative's atomic adds may order sums differently).

    Examples
    --------
    >>> import numba
    >>> before = numba.get_num_threads()
    >>> with one_loop_thread(2):
    ...     numba.get_num_threads()
    1
    >>> numba.get_num_threads() == before
    True
    """
    if threads < 2:
        yield
        return
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(before)


def sweep_width(chunk: int, count: int, threads: int = 1) -> int:
    """Directions per vector sweep for ``count`` directions on ``threads`` threads, at most ``chunk``.

    The directions each thread would get (``count / threads``, rounded up) rounded up to a power of two,
    at least 2 (a sweep of width 1 is not vector mode), and never more than ``chunk``; ``chunk`` itself
    where it is 1. A sweep's cost grows with its width, used or not, so a narrower one is cheaper where
    the directions are few (a 3-column Jacobian: 4 lanes, not 32); the power of two bounds how many
    widths one function is compiled for.

    Examples
    --------
    >>> sweep_width(32, 3), sweep_width(32, 100), sweep_width(32, 20, threads=2), sweep_width(1, 50)
    (4, 32, 16, 1)
    """
    if chunk < 2:
        return chunk
    each = -(-count // max(1, threads))
    return min(chunk, max(2, 1 << max(0, each - 1).bit_length()))


def run_chunks(starts: Sequence[int], threads: int, new_state: Callable[[], S],
               work: Callable[[S, int], None], first_alone: bool = True) -> list[S]:
    """``work(state, start)`` for each of ``starts``, on up to ``threads`` threads; the states used, the
    calling thread's first.

    With ``first_alone``, the first chunk runs in the calling thread before any other starts, so that what
    it raises (a layout the function refuses, Enzyme refusing the sweep) reaches the caller exactly as from
    a serial loop and the derivative is compiled once (callers whose sweep has run before pass False).
    Then each thread (the caller's among them) makes a state of its own with ``new_state()`` (its buffers)
    and takes the next chunk until none is left. An exception in any thread stops the others taking
    chunks and is raised here.

    Examples
    --------
    >>> done = []
    >>> states = run_chunks(range(0, 10, 2), 3, list, lambda state, start: done.append(start))
    >>> sorted(done), len(states) <= 3
    ([0, 2, 4, 6, 8], True)
    """
    first = new_state()
    states = [first]
    if not starts:
        return states
    rest = list(starts)
    if first_alone or threads < 2:
        work(first, rest.pop(0))
    if threads < 2 or len(rest) < 2:
        for start in rest:
            work(first, start)
        return states
    lock = threading.Lock()
    taken = iter(rest)
    failed: list[BaseException] = []

    def take() -> int | None:
        with lock:
            return None if failed else next(taken, None)

    def drain(state: S) -> None:
        try:
            while (start := take()) is not None:
                work(state, start)
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            with lock:
                failed.append(exc)

    def worker() -> None:
        try:
            state = new_state()
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            with lock:
                failed.append(exc)
            return
        with lock:
            states.append(state)
        drain(state)

    helpers = [threading.Thread(target=worker, name=f"pyjlad-chunks-{k}", daemon=True)
               for k in range(min(threads, len(rest)) - 1)]
    for helper in helpers:
        helper.start()
    drain(first)
    for helper in helpers:
        helper.join()
    if failed:
        raise failed[0]
    return states
