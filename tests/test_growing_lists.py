"""Lists that grow (``list.append``, and Numba's own lists in ``np.partition`` and ``np.unique``), against JAX in float64.

Numba grows a list with ``NRT_MemInfo_varsize_realloc``, which Enzyme could not see into: every such function was
refused. pyjlad's runtime now grows a list itself, copying its header and its items apart, each typed for Enzyme
by the items' kind, read from the list's destructor (:mod:`pyjlad.list_growth`): copied as one block, typed by
the header, a float32 list's gradient came out wrong without a word, and a float64 list's was refused as untrusted.
Each list here grows several times (Numba allocates 4 slots, then about an eighth more each time), so items are
copied while their adjoints are live. Every derivative is compared with JAX's (or a hand-derived one) computed
from copies taken before the call; the caller's arrays are checked unchanged.
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from corpus.family_containers import extend_in_helper, extend_in_helper_jax
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)

X = np.array([0.3, -1.2, 0.8, 2.0, 0.1, -0.5])
N = 300  # appends: the list is reallocated about twenty times


@njit
def products_of_a_grown_list(x):
    items = []
    for k in range(N):
        items.append(x[k % 6] * (k % 5))
    total = 0.0
    for k in range(len(items)):
        total += items[k] * items[len(items) - 1 - k]
    return total


def products_of_a_grown_list_jax(x):
    k = np.arange(N)
    items = x[k % 6] * (k % 5)
    return jnp.sum(items * items[::-1])


@njit
def float32_items(x):
    items = []
    for k in range(N):
        items.append(np.float32(x[k % 6] * (k % 5)))
    total = 0.0
    for v in items:
        total += v * v
    return total


def float32_items_jax(x):
    k = np.arange(N)
    return jnp.sum((x[k % 6] * (k % 5)) ** 2)


@njit
def pairs_with_the_float_first(x):
    pairs = []
    for k in range(N):
        pairs.append((x[k % 6], k % 5))
    total = 0.0
    for v, a in pairs:
        total += v * v * a
    return total


def pairs_with_the_float_first_jax(x):
    k = np.arange(N)
    return jnp.sum(x[k % 6] ** 2 * (k % 5))


@njit
def arrays_in_a_list(x):
    parts = []
    for k in range(40):
        parts.append(x[k % 6:k % 6 + 1] * (k % 5))
    total = 0.0
    for p in parts:
        total += p[0] * p[0]
    return total


def arrays_in_a_list_jax(x):
    k = np.arange(40)
    return jnp.sum((x[k % 6] * (k % 5)) ** 2)


@njit
def a_stack(x):
    stack = [0.0]
    for k in range(60):
        stack.append(x[k % 6] ** 2)
        if x[k % 6] < 0:
            stack.pop()
    total = 0.0
    while len(stack) > 0:
        total = 0.5 * total + stack.pop()
    return total


def a_stack_jax(x):
    kept = [x[k % 6] ** 2 for k in range(60) if X[k % 6] >= 0]
    total = 0.0
    for v in kept[::-1]:
        total = 0.5 * total + v
    return 0.5 * total


@njit
def a_sorted_list(x):
    items = []
    for k in range(30):
        items.append(x[k % 6] * (1.0 + 0.1 * k))
    items.sort()
    return items[0] * items[-1] + items[7]


def a_sorted_list_jax(x):
    k = np.arange(30)
    items = jnp.sort(x[k % 6] * (1.0 + 0.1 * k))
    return items[0] * items[-1] + items[7]


@njit
def partitioned(x):
    return np.partition(x, 2)[2] * np.sum(x)


def partitioned_jax(x):
    return jnp.sort(x)[2] * jnp.sum(x)


@njit
def unique_values(x):
    return np.sum(np.unique(x) ** 2) * x[0]


def unique_values_jax(x):
    return jnp.sum(jnp.sort(x) ** 2) * x[0]  # X's values are distinct (jnp.unique passes no gradient)


@njit
def clipped_to_array_bounds(x):
    lo, hi = np.full(6, -0.6), np.full(6, 0.9)
    return np.sum(np.clip(x, lo, hi) ** 2 * x)


def clipped_to_array_bounds_jax(x):
    return jnp.sum(jnp.clip(x, -0.6, 0.9) ** 2 * x)  # no element of X at a bound


# Lists that start with items (a literal, a repeated list): until 2026-12-06 the header copied as integers took the
# first items' bytes with it (the header's length was read from the list's first size), and their adjoints were
# lost without a word (a float64 literal's first two items, a float32's first).
@njit
def a_literal_grown(x):
    items = [x[0] * 2.0, x[1]]
    for k in range(2, N):
        items.append(np.sin(x[k % 6]) * items[k - 2])
    total = 0.0
    for v in items:
        total += v * v
    return total


def a_literal_grown_jax(x):
    items = [x[0] * 2.0, x[1]]
    for k in range(2, N):
        items.append(jnp.sin(x[k % 6]) * items[k - 2])
    return sum(v * v for v in items)


@njit
def a_float32_literal_grown(x):
    items = [np.float32(x[0] * 2.0)]
    for k in range(1, N):
        items.append(np.float32(np.sin(x[k % 6])) * items[k - 1])
    total = 0.0
    for v in items:
        total += v * v
    return total


def a_float32_literal_grown_jax(x):
    items = [x[0] * 2.0]
    for k in range(1, N):
        items.append(jnp.sin(x[k % 6]) * items[k - 1])
    return sum(v * v for v in items)


@njit
def a_repeated_list_grown(x):
    items = [0.0] * 5
    for k in range(5):
        items[k] = x[k] ** 2
    for k in range(N):
        items.append(items[-5] * 0.5 + x[k % 6])
    return sum(items)


def a_repeated_list_grown_jax(x):
    items = [x[k] ** 2 for k in range(5)]
    for k in range(N):
        items.append(items[-5] * 0.5 + x[k % 6])
    return sum(items)


CASES = [
    (products_of_a_grown_list, products_of_a_grown_list_jax, 1e-10),
    (float32_items, float32_items_jax, 1e-5),
    (pairs_with_the_float_first, pairs_with_the_float_first_jax, 1e-10),
    (arrays_in_a_list, arrays_in_a_list_jax, 1e-10),
    (a_stack, a_stack_jax, 1e-10),
    (a_sorted_list, a_sorted_list_jax, 1e-10),
    (partitioned, partitioned_jax, 1e-10),
    (unique_values, unique_values_jax, 1e-10),
    (clipped_to_array_bounds, clipped_to_array_bounds_jax, 1e-10),
    (a_literal_grown, a_literal_grown_jax, 1e-10),
    (a_float32_literal_grown, a_float32_literal_grown_jax, 1e-4),
    (a_repeated_list_grown, a_repeated_list_grown_jax, 1e-10),
    (extend_in_helper, extend_in_helper_jax, 1e-10),  # the corpus's (tests/corpus/family_containers.py)
]


@pytest.mark.parametrize("f, f_jax, rtol", CASES, ids=[c[0].__name__ for c in CASES])
def test_gradient_of_a_growing_list(f, f_jax, rtol):
    x = X.copy()
    before = x.copy()
    expected = np.asarray(jax.grad(f_jax)(jnp.asarray(before)))
    got = pyjlad.grad(f)(x)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    assert x.tobytes() == before.tobytes()


@pytest.mark.parametrize("f, f_jax, rtol", CASES[:4] + CASES[-4:], ids=[c[0].__name__ for c in CASES[:4] + CASES[-4:]])
def test_jvp_of_a_growing_list(f, f_jax, rtol):
    x, v = X.copy(), np.linspace(-0.4, 0.6, 6)
    before, v_before = x.copy(), v.copy()
    expected = float(jax.jvp(f_jax, (jnp.asarray(before),), (jnp.asarray(v_before),))[1])
    value, tangent = pyjlad.jvp(f, (x,), (v,))
    np.testing.assert_allclose(tangent, expected, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(value, float(f_jax(jnp.asarray(before))), rtol=rtol)
    assert x.tobytes() == before.tobytes() and v.tobytes() == v_before.tobytes()


def test_gradients_repeat_and_numba_lists_still_work_after():
    """The grown payloads are freed by pyjlad's runtime; Numba's own lists in the same process are unaffected."""
    gradient = pyjlad.grad(products_of_a_grown_list)
    first = gradient(X.copy())
    for _ in range(20):
        np.testing.assert_array_equal(gradient(X.copy()), first)
    assert products_of_a_grown_list(X.copy()) == pytest.approx(float(products_of_a_grown_list_jax(jnp.asarray(X))))


def test_a_list_of_pairs_with_the_integer_first_is_refused_with_the_rewrite():
    @njit
    def pairs(x):
        items = []
        for k in range(20):
            items.append((k % 5, x[k % 6]))
        total = 0.0
        for a, v in items:
            total += v * v * a
        return total

    x = X.copy()
    with pytest.raises(pyjlad.EnzymeError) as info:
        pyjlad.grad(pairs)(x)
    assert "a list that grows" in str(info.value) and "(x, i) rather than (i, x)" in str(info.value)
    assert x.tobytes() == X.tobytes()


#: The lists whose second derivatives Enzyme types: every case but those sorting (Numba's quicksort keeps its stack
#: of index pairs in a list, which Enzyme v0.0.289 cannot type in a Hessian-vector product).
SORTING = {a_sorted_list, partitioned, unique_values, clipped_to_array_bounds}
SECOND_ORDER = [c for c in CASES if c[0] not in SORTING]


@pytest.mark.parametrize("f, f_jax, rtol", SECOND_ORDER, ids=[c[0].__name__ for c in SECOND_ORDER])
def test_hessian_of_a_growing_list(f, f_jax, rtol, caplog, monkeypatch):
    """A Hessian-vector product of a growing list was refused until 2026-12-06: Enzyme's forward derivative of the
    reverse sweep fills and copies the items' tangents with a ``memset`` and a ``memcpy`` of its own, which it then
    could not type. The fill of new slots and the copy of float items are loops of float stores now
    (:func:`pyjlad.list_growth.hint_list_types`), typed in every mode: built without loose types."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")  # so that Enzyme runs, and its attempts are logged
    x = X.copy()
    before = x.copy()
    expected = np.asarray(jax.hessian(f_jax)(jnp.asarray(before)))
    with caplog.at_level(logging.DEBUG, logger="pyjlad"):
        got = pyjlad.hessian(f, x)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)
    assert x.tobytes() == before.tobytes()
    assert [r for r in caplog.records if "Enzyme on" in r.getMessage()]
    assert not [r for r in caplog.records if "loose" in r.getMessage()]  # "-enzyme-loose-types" among the options


def test_a_hessian_vector_product_of_a_sorted_list_is_refused_before_it_runs():
    """Enzyme types a list's copies in a gradient and a jvp, not the stack of index pairs Numba's quicksort keeps in a
    list inside a Hessian-vector product: built with loose types, one such product (then, a stack popped and grown)
    freed an invalid pointer when run and aborted the process. pyjlad refuses it instead, naming the list, and the
    process goes on."""
    x, v = X.copy(), np.linspace(-0.4, 0.6, 6)
    with pytest.raises(pyjlad.EnzymeError) as info:
        pyjlad.hvp(a_sorted_list, (x,), v)
    assert "a list that grows" in str(info.value) and "preallocated NumPy array" in str(info.value)
    assert info.value.diagnostics
    with pytest.raises(pyjlad.EnzymeError, match="a list that grows"):
        pyjlad.hessian(a_sorted_list, x)
    assert x.tobytes() == X.tobytes()
    expected = np.asarray(jax.grad(a_sorted_list_jax)(jnp.asarray(X)))
    np.testing.assert_allclose(pyjlad.grad(a_sorted_list)(x), expected, rtol=1e-10)


# Lists of integers (an index list, pairs of indices, flags): until 2026-12-07 their Hessians and Hessian-vector
# products were refused ("the copies of the list's tangents"), although such a list has no tangents: Enzyme's
# forward derivative of the reverse sweep could not type the copy of the items in pyjlad's list growth, the zero
# fill of new slots, or a list literal's constant items. The copy and fill are calls of pyjlad's own whose pointers
# are typed as integers, and a constant stored into an integer list has a hint (pyjlad.list_growth.hint_list_types).
# The oracles are JAX's Hessians of twins whose selections are computed from copies of the point taken before the call.
XI = np.array([0.3, -1.2, 0.8, 2.0, 0.1, -0.5, 1.4, -0.2])


@njit
def cubes_of_the_positive(x):
    chosen = []
    for k in range(x.shape[0]):
        if x[k] > 0:
            chosen.append(k)
    total = 0.0
    for k in chosen:
        total += x[k] ** 3
    return total


def cubes_of_the_positive_jax(x, at):
    chosen = np.flatnonzero(at > 0)
    return jnp.sum(x[chosen] ** 3)


@njit
def int32_order(x):
    order = []
    for k in range(x.shape[0]):
        order.append(np.int32(x.shape[0] - 1 - k))
    total = 0.0
    for j in range(len(order)):
        total += np.sin(x[order[j]]) * (j + 1)
    return total


def int32_order_jax(x, at):
    return jnp.sum(jnp.sin(x[::-1]) * jnp.arange(1, x.shape[0] + 1))


@njit
def flags_of_the_small(x):
    flags = []
    for k in range(x.shape[0]):
        flags.append(x[k] * x[k] < 1.0)
    total = 0.0
    for k in range(len(flags)):
        total += x[k] ** 2 * x[(k + 1) % x.shape[0]] if flags[k] else np.exp(x[k])
    return total


def flags_of_the_small_jax(x, at):
    return jnp.sum(jnp.where(at * at < 1.0, x ** 2 * jnp.roll(x, -1), jnp.exp(x)))


@njit
def close_pairs(x):
    pairs = []
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            if abs(x[i] - x[j]) < 1.5:
                pairs.append((i, j))
    energy = 0.0
    for i, j in pairs:
        d = x[i] - x[j]
        energy += d * d * np.exp(-0.5 * (x[i] + x[j]))
    return energy


def close_pairs_jax(x, at):
    pairs = np.array([(i, j) for i in range(at.size) for j in range(i + 1, at.size) if abs(at[i] - at[j]) < 1.5])
    d = x[pairs[:, 0]] - x[pairs[:, 1]]
    return jnp.sum(d * d * jnp.exp(-0.5 * (x[pairs[:, 0]] + x[pairs[:, 1]])))


@njit
def running_minima(x):  # a list literal (a constant item) grown
    at = [0]
    for k in range(1, x.shape[0]):
        if x[k] < x[at[-1]]:
            at.append(k)
    total = 0.0
    for k in at:
        total += x[k] ** 4
    return total


def running_minima_jax(x, at):
    chosen = [0]
    for k in range(1, at.size):
        if at[k] < at[chosen[-1]]:
            chosen.append(k)
    return jnp.sum(x[np.array(chosen)] ** 4)


@njit
def _collect_the_small(x, into):
    for k in range(x.shape[0]):
        if x[k] < 0.5:
            into.append(k)


@njit
def grown_in_a_helper(x):
    chosen = [np.int64(0) for _ in range(0)]
    _collect_the_small(x, chosen)
    total = 0.0
    for k in chosen:
        total += np.cos(x[k]) * x[k]
    return total


def grown_in_a_helper_jax(x, at):
    chosen = np.flatnonzero(at < 0.5)
    return jnp.sum(jnp.cos(x[chosen]) * x[chosen])


INTEGER_LISTS = [(cubes_of_the_positive, cubes_of_the_positive_jax), (int32_order, int32_order_jax),
                 (flags_of_the_small, flags_of_the_small_jax), (close_pairs, close_pairs_jax),
                 (running_minima, running_minima_jax), (grown_in_a_helper, grown_in_a_helper_jax)]


@pytest.mark.parametrize("f, f_jax", INTEGER_LISTS, ids=[c[0].__name__ for c in INTEGER_LISTS])
def test_second_derivatives_of_a_list_of_integers(f, f_jax, caplog, monkeypatch):
    """``hessian`` (vector mode and one column at a time) and ``hvp`` of a function growing a list of integers, each
    JAX's; built without loose types; the caller's arrays unchanged."""
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")  # so that Enzyme runs, and its attempts are logged
    x, v = XI.copy(), np.linspace(-1.0, 1.0, XI.size)
    before, v_before = x.copy(), v.copy()
    expected = np.asarray(jax.hessian(lambda z: f_jax(z, before))(jnp.asarray(before)))
    with caplog.at_level(logging.DEBUG, logger="pyjlad"):
        np.testing.assert_allclose(pyjlad.hessian(f, x), expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(pyjlad.hessian(f, x, chunk=1), expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(pyjlad.hvp(f, (x,), v), expected @ v_before, rtol=1e-12, atol=1e-12)
    assert x.tobytes() == before.tobytes() and v.tobytes() == v_before.tobytes()
    assert [r for r in caplog.records if "Enzyme on" in r.getMessage()]
    assert not [r for r in caplog.records if "loose" in r.getMessage()]
    gradient = np.asarray(jax.grad(lambda z: f_jax(z, before))(jnp.asarray(before)))
    np.testing.assert_allclose(pyjlad.grad(f)(x), gradient, rtol=1e-12, atol=1e-12)
