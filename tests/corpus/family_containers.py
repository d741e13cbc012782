"""Containers inside the differentiated function: lists that grow (``append``, ``extend``, ``pop``, literals and
repeated lists grown after, comprehensions, lists of tuples and of arrays, a list grown in a helper) and sets of
integers (``add``, ``in``, ``sorted(set(...))``).

Until 2026-12-06 the corpus held none, and two defects went unseen: every set was refused, and a list that
starts with items (a literal) then grows lost its first items' adjoints without a word. Lists grow past
Numba's first allocation (4 slots, then about an eighth more each time); sets past their first table (8 slots).
The lists of floats check ``gradient``, ``jvp`` and ``hvp`` (refused until 2026-12-06, when Enzyme could not type the
copies of a list's tangents); a program that sorts a list (``sorted`` of a set) or grows a list of arrays checks
``gradient`` and ``jvp``: the Hessian-vector products of Numba's quicksort (which keeps its stack in a list) and
of a list of array views stay refused (README, Limitations).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import F32, args, indices, normal
from corpus.program import program

FAMILY = "containers"
FIRST = ("gradient", "jvp")
LISTS = ("gradient", "jvp", "hvp")
N = 60  # appends: the list is reallocated about a dozen times


@njit
def append_loop(x):
    items = []
    for k in range(N):
        items.append(np.sin(x[k % x.size]) * (k % 7))
    total = 0.0
    for k in range(len(items)):
        total += items[k] * items[len(items) - 1 - k]
    return total


def append_loop_jax(x):
    k = np.arange(N)
    items = jnp.sin(x[k % x.size]) * (k % 7)
    return jnp.sum(items * items[::-1])


@njit
def literal_then_append(x):
    items = [x[0] * 2.0, x[1], x[2] ** 2]
    for k in range(3, N):
        items.append(items[k - 3] * np.cos(x[k % x.size]))
    total = 0.0
    for v in items:
        total += v * v
    return total


def literal_then_append_jax(x):
    items = [x[0] * 2.0, x[1], x[2] ** 2]
    for k in range(3, N):
        items.append(items[k - 3] * jnp.cos(x[k % x.size]))
    return sum(v * v for v in items)


@njit
def repeated_then_append(x):
    items = [0.0] * 4
    for k in range(4):
        items[k] = x[k] * x[k + 1]
    for k in range(N):
        items.append(items[-4] * 0.5 + x[k % x.size])
    return sum(items)


def repeated_then_append_jax(x):
    items = [x[k] * x[k + 1] for k in range(4)]
    for k in range(N):
        items.append(items[-4] * 0.5 + x[k % x.size])
    return sum(items)


@njit
def comprehension(x):
    squares = [v * v for v in x for _ in range(6)]
    return sum(squares) + squares[3] * squares[-1]


def comprehension_jax(x):
    squares = jnp.repeat(x * x, 6)
    return jnp.sum(squares) + squares[3] * squares[-1]


@njit
def pairs_float_first(x):
    pairs = []
    for k in range(N):
        pairs.append((x[k % x.size] * 1.5, k))
    total = 0.0
    for value, k in pairs:
        total += np.tanh(value) * k
    return total


def pairs_float_first_jax(x):
    k = np.arange(N)
    return jnp.sum(jnp.tanh(x[k % x.size] * 1.5) * k)


@njit
def list_of_rows(x):
    rows = []
    for k in range(N // 4):
        rows.append(x[k % x.shape[0]] * (k + 1.0))
    total = 0.0
    for r in rows:
        total += np.sum(np.sin(r))
    return total


def list_of_rows_jax(x):
    return sum(jnp.sum(jnp.sin(x[k % x.shape[0]] * (k + 1.0))) for k in range(N // 4))


@njit
def stack_pop(x):
    stack = [x[0]]
    total = 0.0
    for k in range(1, N):
        stack.append(stack[-1] * 0.9 + x[k % x.size])
        if k % 3 == 0:
            total += stack.pop() ** 2
    for v in stack:
        total += v
    return total


def stack_pop_jax(x):
    stack, total = [x[0]], 0.0
    for k in range(1, N):
        stack.append(stack[-1] * 0.9 + x[k % x.size])
        if k % 3 == 0:
            total = total + stack.pop() ** 2
    return total + sum(stack)


@njit
def _grow(items, x, k):
    items.extend([x[k % x.size], x[(k + 1) % x.size] * k])


@njit
def extend_in_helper(x):
    items = [x[0]]
    for k in range(N // 2):
        _grow(items, x, k)
    total = 0.0
    for k in range(len(items)):
        total += items[k] * np.cos(items[len(items) - 1 - k])
    return total


def extend_in_helper_jax(x):
    items = [x[0]]
    for k in range(N // 2):
        items += [x[k % x.size], x[(k + 1) % x.size] * k]
    return sum(items[k] * jnp.cos(items[len(items) - 1 - k]) for k in range(len(items)))


@njit
def first_visits(x, index):
    seen = set()
    total = 0.0
    for i in index:
        if i not in seen:
            seen.add(i)
            total += np.sin(x[i]) * len(seen)
    return total


def first_visits_jax(x, index):
    seen, total = [], 0.0
    for i in index.tolist():
        if i not in seen:
            seen.append(i)
            total = total + jnp.sin(x[i]) * len(seen)
    return total


@njit
def class_means(x, labels):
    total = 0.0
    for c in sorted(set(labels)):
        mean, count = 0.0, 0
        for k in range(labels.size):
            if labels[k] == c:
                mean += x[k]
                count += 1
        total += (mean / count) ** 2
    return total


def class_means_jax(x, labels):
    total = 0.0
    for c in sorted(set(labels.tolist())):
        chosen = np.flatnonzero(labels == c)
        total = total + (jnp.sum(x[chosen]) / chosen.size) ** 2
    return total


program(FAMILY, "append_loop/1d", append_loop, append_loop_jax, args(normal(7)), transforms=LISTS)
program(FAMILY, "append_loop/1d-f32", append_loop, append_loop_jax, args(normal(7, dtype=np.float32)),
        transforms=LISTS, **F32)
program(FAMILY, "literal_then_append/1d", literal_then_append, literal_then_append_jax, args(normal(7)),
        transforms=LISTS)
program(FAMILY, "literal_then_append/1d-f32", literal_then_append, literal_then_append_jax,
        args(normal(7, dtype=np.float32)), transforms=LISTS, **F32)
program(FAMILY, "repeated_then_append/1d", repeated_then_append, repeated_then_append_jax, args(normal(6)),
        transforms=LISTS)
program(FAMILY, "comprehension/1d", comprehension, comprehension_jax, args(normal(5)), transforms=LISTS)
program(FAMILY, "pairs_float_first/1d", pairs_float_first, pairs_float_first_jax, args(normal(6)), transforms=LISTS)
program(FAMILY, "list_of_rows/2d", list_of_rows, list_of_rows_jax, args(normal(4, 3)), transforms=FIRST,
        notes="a list of arrays: its hvp is refused (the fill of its new slots, pointers and integers, untyped)")
program(FAMILY, "stack_pop/1d", stack_pop, stack_pop_jax, args(normal(5)), transforms=LISTS)
program(FAMILY, "extend_in_helper/1d", extend_in_helper, extend_in_helper_jax, args(normal(6)), transforms=LISTS)
program(FAMILY, "first_visits/1d", first_visits, first_visits_jax, args(normal(12), indices(12, 40)),
        transforms=("gradient", "hvp"))
program(FAMILY, "class_means/1d", class_means, class_means_jax, args(normal(40), indices(11, 40)),
        transforms=FIRST, notes="sorted() of the set makes a list that grows: its hvp is refused")
