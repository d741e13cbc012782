"""Numba's compiled callees inlined before Enzyme (:mod:`pyjlad.inline_callees`).

What is inlined (small modules), that the module Enzyme gets for NumPy code per sample calls no Numba
callee any more, and that derivatives of programs whose callees are now inlined (NumPy per sample, a
user's ``@njit`` helper called in a loop) match ``jax`` in float64, the caller's arrays unchanged. A callee
with a custom rule is registered by address and keeps its call: ``tests/test_rules.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.inline_callees import inlinable, mark_inlinable, more_inlinable
from pyjlad.ir import parse

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

from corpus.family_ml import classifier_jax, classifier_numpy  # noqa: E402 (the corpus's)

RNG = np.random.default_rng(20261201)

_CALLEE = """define linkonce_odr i32 @{name}(ptr %p){attrs} {{
  ret i32 0
}}
"""


def _module(callees: dict[str, str], entry_body: list[str], extra: str = "") -> str:
    text = "".join(_CALLEE.format(name=name, attrs=attrs) for name, attrs in callees.items())
    return text + "define i32 @entry(ptr %p) {\n" + "\n".join(entry_body) + "\n  ret i32 0\n}\n" + extra


def _chosen(text: str) -> list[str]:
    return [f.name for f in inlinable(parse(text))]


def test_numba_callees_called_directly_are_chosen() -> None:
    """Numba's callees are; pyjlad's BLAS wrapper, which its passes find by name, is not."""
    text = _module({"_ZN5numba1fE": "", "numba_xxgemv.d": ""},
                   ["  %a = call i32 @_ZN5numba1fE(ptr %p)", "  %b = call i32 @numba_xxgemv.d(ptr %p)"])
    assert _chosen(text) == ["_ZN5numba1fE"]


def test_callees_calling_what_pyjlad_finds_by_its_call_are_kept() -> None:
    """A callee that calls LAPACK is kept, and so is one that calls it; one that calls a BLAS product is not."""
    text = _module({"_ZN5numba5outerE": "", "_ZN5numba5innerE": "", "_ZN5numba4gemvE": ""},
                   ["  %a = call i32 @_ZN5numba5outerE(ptr %p)", "  %b = call i32 @_ZN5numba4gemvE(ptr %p)"],
                   "declare i32 @numba_xxgetrf(ptr)\ndeclare i32 @numba_xxgemv.d(ptr)\n")
    text = text.replace("define linkonce_odr i32 @_ZN5numba5outerE(ptr %p) {\n",
                        "define linkonce_odr i32 @_ZN5numba5outerE(ptr %p) {\n  %x = call i32 @_ZN5numba5innerE(ptr %p)\n")
    text = text.replace("define linkonce_odr i32 @_ZN5numba5innerE(ptr %p) {\n",
                        "define linkonce_odr i32 @_ZN5numba5innerE(ptr %p) {\n  %y = call i32 @numba_xxgetrf(ptr %p)\n")
    text = text.replace("define linkonce_odr i32 @_ZN5numba4gemvE(ptr %p) {\n",
                        "define linkonce_odr i32 @_ZN5numba4gemvE(ptr %p) {\n  %z = call i32 @numba_xxgemv.d(ptr %p)\n")
    assert _chosen(text) == ["_ZN5numba4gemvE"]


def test_sorting_and_selection_are_kept() -> None:
    text = _module({"_ZN5numba4misc9quicksort3runE": "", "_ZN5numba2np13_median_innerE": ""},
                   ["  %a = call i32 @_ZN5numba4misc9quicksort3runE(ptr %p)",
                    "  %b = call i32 @_ZN5numba2np13_median_innerE(ptr %p)"])
    assert _chosen(text) == []


@pytest.mark.parametrize("attrs, extra", [
    (" noinline", ""),
    (' "enzyme_inactive"', ""),
    (" #7", "attributes #7 = { noinline nounwind }\n"),
    (" #7", 'attributes #7 = { "enzyme_math"="exp" }\n'),
], ids=["noinline", "enzyme-attribute", "noinline-group", "enzyme-group"])
def test_callees_that_say_so_are_kept(attrs, extra) -> None:
    text = _module({"_ZN5numba1fE": attrs}, ["  %a = call i32 @_ZN5numba1fE(ptr %p)"], extra)
    assert _chosen(text) == []


def test_the_retry_chooses_callees_whatever_they_call() -> None:
    """The retry after Enzyme failed (:func:`more_inlinable`): a callee calling LAPACK or Numba's sort is chosen
    too (those calls stay calls); what says ``noinline``, is passed by address or sorts itself still is not."""
    text = _module({"_ZN5numba5outerE": "", "_ZN5numba4misc9quicksort3runE": "", "_ZN5numba6pinnedE": " noinline"},
                   ["  %a = call i32 @_ZN5numba5outerE(ptr %p)", "  %b = call i32 @_ZN5numba6pinnedE(ptr %p)"],
                   "declare i32 @numba_xxgetrf(ptr)\n")
    text = text.replace("@_ZN5numba5outerE(ptr %p) {\n", "@_ZN5numba5outerE(ptr %p) {\n"
                        "  %x = call i32 @_ZN5numba4misc9quicksort3runE(ptr %p)\n  %y = call i32 @numba_xxgetrf(ptr %p)\n")
    assert _chosen(text) == [] and more_inlinable(text)
    assert [f.name for f in inlinable(parse(text), whatever_they_call=True)] == ["_ZN5numba5outerE"]
    assert mark_inlinable(text, whatever_they_call=True)[1] == 1


def test_address_taken_callees_are_kept() -> None:
    passed = _module({"_ZN5numba1fE": ""}, ["  %a = call i32 @_ZN5numba1fE(ptr @_ZN5numba1fE)"])
    registered = _module({"_ZN5numba1fE": ""}, ["  %a = call i32 @_ZN5numba1fE(ptr %p)"],
                         "@__enzyme_register_gradient_f = global [3 x ptr] [ptr @_ZN5numba1fE, ptr null, ptr null]\n")
    assert _chosen(passed) == [] and _chosen(registered) == []


def test_runtime_uncalled_and_non_odr_functions_are_kept() -> None:
    text = _module({"NRT_decref": "", "_ZN5numba1gE": ""}, ["  %a = call i32 @NRT_decref(ptr %p)",
                                                           "  %b = call i32 @_ZN5numba1hE(ptr %p)"])
    text += "define i32 @_ZN5numba1hE(ptr %p) {\n  ret i32 1\n}\n"
    assert _chosen(text) == []


def test_invariant_reads_copies_are_chosen() -> None:
    """pyjlad.invariant_reads' internal copy of a Numba callee is (only ever called directly, by construction);
    another internal function is not."""
    text = _module({}, ["  %a = call i32 @_ZN5numba1fE.pyjlad.reads(ptr %p)", "  %b = call i32 @_ZN5numba1gE(ptr %p)"])
    text += "".join(f"define internal i32 @{name}(ptr %p) {{\n  ret i32 0\n}}\n"
                    for name in ("_ZN5numba1fE.pyjlad.reads", "_ZN5numba1gE"))
    assert _chosen(text) == ["_ZN5numba1fE.pyjlad.reads"]


def test_marking_adds_the_attribute_and_nothing_else() -> None:
    text = _module({"_ZN5numba1fE": ""}, ["  %a = call i32 @_ZN5numba1fE(ptr %p)"])
    marked, count = mark_inlinable(text)
    assert count == 1
    assert marked.replace(" alwaysinline", "") == parse(text).render()
    assert "@_ZN5numba1fE(ptr %p) alwaysinline {" in marked
    assert mark_inlinable(_module({}, [])) == (_module({}, []), 0)


def _enzyme_input(tmp_path, monkeypatch, call) -> str:
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    call()
    (found,) = tmp_path.glob("*/*-enzyme.input.ll")
    return found.read_text()


def test_numpy_per_sample_calls_no_numba_callee(tmp_path, monkeypatch) -> None:
    """Before: the module Enzyme got called ``dot_2_mv``, ``npy_max`` and ``dot_3`` once per sample."""
    w, x, y = RNG.normal(size=(4, 6)) / 3, RNG.normal(size=(9, 6)), RNG.integers(0, 4, 9)
    f = njit(classifier_numpy.py_func)  # a dispatcher of its own: built here, with the dump on
    text = _enzyme_input(tmp_path, monkeypatch, lambda: pyjlad.grad(f, wrt=0)(w, x, y))
    entry = parse(text).function("pyjlad_classifier_numpy")
    callees = {c.callee for c in entry.calls()}
    assert not [c for c in callees if c.startswith("@_ZN")], callees


def _check(f, f_jax, args, wrt) -> None:
    copies = [np.copy(a) for a in args]
    expected = jax.grad(f_jax, argnums=wrt)(*[jnp.asarray(a) for a in copies])
    got = pyjlad.grad(f, wrt=wrt)(*args)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-12, atol=1e-13)
    for a, c in zip(args, copies):
        np.testing.assert_array_equal(a, c)


def test_numpy_per_sample_hvp_matches_jax() -> None:
    w, x, y = RNG.normal(size=(5, 7)) / 3, RNG.normal(size=(30, 7)), RNG.integers(0, 5, 30)
    v = RNG.normal(size=w.shape)
    w0, x0, v0 = w.copy(), x.copy(), v.copy()
    expected = jax.jvp(jax.grad(lambda w_: classifier_jax(w_, jnp.asarray(x0), jnp.asarray(y))),
                       (jnp.asarray(w0),), (jnp.asarray(v0),))[1]
    got = pyjlad.hvp(classifier_numpy, (w, x, y), v, wrt=0)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-11, atol=1e-13)
    for a, c in ((w, w0), (x, x0), (v, v0)):
        np.testing.assert_array_equal(a, c)


@njit
def _energy(a, b):
    d = a - b
    return math.sqrt(np.dot(d, d) + 1.0)


@njit
def pair_energies(x):
    """A user's helper called per pair: it is inlined, with its temporary ``d``."""
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(i + 1, x.shape[0]):
            s += _energy(x[i], x[j])
    return s


def pair_energies_jax(x):
    d = x[:, None, :] - x[None, :, :]
    e = jnp.sqrt(jnp.sum(d * d, axis=-1) + 1.0)
    return jnp.sum(jnp.triu(e, k=1))


def test_user_helper_called_in_a_loop_matches_jax() -> None:
    _check(pair_energies, pair_energies_jax, (RNG.normal(size=(7, 3)),), (0,))


def test_user_helper_forward_mode_matches_jax() -> None:
    x, t = RNG.normal(size=(6, 3)), RNG.normal(size=(6, 3))
    x0, t0 = x.copy(), t.copy()
    expected = jax.jvp(pair_energies_jax, (jnp.asarray(x0),), (jnp.asarray(t0),))[1]
    got = pyjlad.jvp(pair_energies, (x,), (t,))[1]
    np.testing.assert_allclose(got, float(expected), rtol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(t, t0)


@njit
def _product(A, B):
    n = A.shape[0]
    C = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            for j in range(n):
                C[i, j] += A[i, k] * B[k, j]
    return C


@njit
def _expm_axis_sum(A):
    n = A.shape[0]
    nrm = np.max(np.sum(np.abs(A), axis=1))  # the axis check formats its message with Numba's string code: a call
    s = 0
    while nrm > 0.5:
        nrm /= 2.0
        s += 1
    As = A / 2.0 ** s
    E = np.eye(n)
    term = np.eye(n)
    for k in range(1, 10):
        term = _product(term, As) / k
        E = E + term
    for _ in range(s):
        E = _product(E, E)
    return E


@njit
def _expm_ordered_norms(A):
    n = A.shape[0]
    nrm = np.sort(np.sum(np.abs(A), axis=1))[-1]  # Numba's sort: the helper stays a call at first
    s = 0
    while nrm > 0.5:
        nrm /= 2.0
        s += 1
    As = A / 2.0 ** s
    E = np.eye(n)
    term = np.eye(n)
    for k in range(1, 10):
        term = _product(term, As) / k
        E = E + term
    for _ in range(s):
        E = _product(E, E)
    return E


@njit
def _sum_of_expm_axis_sum(A):
    return np.sum(_expm_axis_sum(A))


@njit
def _sum_of_expm_ordered_norms(A):
    return np.sum(_expm_ordered_norms(A))


def _expm_jax(a, halvings):
    """The same series in JAX, halving ``halvings`` times (the count the helpers reach at the test's point)."""
    term = E = jnp.eye(a.shape[0])
    for k in range(1, 10):
        term = term @ (a / 2.0 ** halvings) / k
        E = E + term
    for _ in range(halvings):
        E = E @ E
    return jnp.sum(E)


_EXPM_POINT = np.array([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3], [0.2, 0.1, -0.5]]) * 3


@pytest.mark.parametrize("f", [_sum_of_expm_axis_sum, _sum_of_expm_ordered_norms], ids=["axis-sum", "sorting"])
def test_matrix_exponential_helpers_match_jax(f, tmp_path, monkeypatch) -> None:
    """A scaling-and-squaring helper (a user-style probe, 2026-12-04): Enzyme v0.0.289's reverse mode failed on it
    as a call ("function failed verification"); pyjlad left it one because ``np.sum(a, axis=1)`` (its axis check
    formats a message with Numba's string code) or ``np.sort`` is a call in it. The retry after that failure
    inlines it. Oracle: the same series in JAX (float64); the caller's array is unchanged."""
    A = _EXPM_POINT.copy()
    halvings = int(np.ceil(np.log2(np.max(np.sum(np.abs(A), axis=1)) / 0.5)))
    expected = np.asarray(jax.grad(_expm_jax)(jnp.asarray(A), halvings))
    assert f(A.copy()) == pytest.approx(float(_expm_jax(jnp.asarray(A), halvings)), rel=1e-13)
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    np.testing.assert_allclose(pyjlad.grad(f)(A), expected, rtol=1e-12)
    np.testing.assert_array_equal(A, _EXPM_POINT)
    assert list(tmp_path.glob("*/*-enzyme.input-helpers-inlined.ll"))
