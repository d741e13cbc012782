"""Refusals a user can act on (issue 13): the construct in the user's terms, its source line,
known limit or defect, what to write instead; Enzyme's text only in ``exc.diagnostics``."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from numba import float64, njit
from numba.experimental import jitclass
from numba.typed import Dict, List

import pyjlad
from pyjlad.errors import EnzymeError
from pyjlad.export import export, numba_argtypes
from pyjlad.refusals import demangle, explain, uses


@njit
def uses_print(x):
    s = np.sum(x * x)
    print(s)  # REFUSED
    return s


@njit
def uses_typed_list(x):
    values = List()  # REFUSED
    for v in x:
        values.append(v * v)
    s = 0.0
    for v in values:
        s += v
    return s


@njit
def uses_typed_dict(x):
    d = Dict.empty(key_type=np.int64, value_type=np.float64)  # REFUSED
    for i in range(x.shape[0]):
        d[i] = x[i]
    return d[0] * 2.0


@njit
def uses_random(x):
    return np.sum(x * np.random.rand(x.shape[0]))  # REFUSED


@njit
def uses_eigh(x):
    a = np.outer(x, x) + np.eye(x.shape[0])
    w, v = np.linalg.eigh(a)  # REFUSED
    return np.sum(w)


@njit
def uses_svd(x):
    a = np.outer(x, x) + np.eye(x.shape[0])
    return np.sum(np.linalg.svd(a)[1])  # REFUSED


@njit
def eig_helper(a):
    return np.linalg.eigvalsh(a)  # REFUSED


@njit
def uses_eig_in_a_helper(x):
    a = np.outer(x, x) + np.eye(x.shape[0])
    return np.sum(eig_helper(a))


@njit
def appends_pairs_with_the_integer_first(x):
    pairs = []  # REFUSED
    for i in range(x.shape[0]):
        pairs.append((i, x[i] * x[i]))
    total = 0.0
    for i, s in pairs:
        total += s * i
    return total


@jitclass([("w", float64[:]), ("b", float64)])
class Affine:
    def __init__(self, w, b):
        self.w = w
        self.b = b

    def value(self):
        return np.sum(self.w * self.w) + self.b


@njit
def uses_jitclass(x):
    model = Affine(x, 0.5)  # REFUSED
    return model.value()


@njit
def uses_complex_dot(x):
    w = np.exp(1j * x)
    return np.abs(np.dot(w, w.astype(np.complex128) * 0.5)) ** 2  # REFUSED


@njit
def uses_complex_matmul(x):
    m = np.exp(1j * np.outer(x, x))
    return np.sum(np.abs(m @ np.exp(1j * x)) ** 2)  # REFUSED


CASES = [
    (uses_print, "print()", "print outside"),
    (uses_complex_dot, "a product of complex arrays", "np.sum(a * b)"),
    (uses_complex_matmul, "a product of complex arrays", "np.sum(a * b)"),
    (appends_pairs_with_the_integer_first, "a list that grows", "(x, i) rather than (i, x)"),
    (uses_typed_list, "a typed list", "preallocated NumPy array"),
    (uses_typed_dict, "a typed dict", "NumPy arrays indexed by integers"),
    (uses_random, "np.random", "pass them in as an argument"),
    (uses_eigh, "np.linalg.eigh", "np.linalg.solve(A.T @ A, A.T @ b)"),
    (uses_svd, "np.linalg.svd", "inv, det, solve and cholesky"),
    (uses_eig_in_a_helper, "np.linalg.eigh / eigvalsh", "inv, det, solve and cholesky"),
    (uses_jitclass, "a jitclass instance created inside the function", "write its methods as @njit functions"),
]


def _refused_line(func) -> tuple[str, int]:
    source, first = inspect.getsourcelines(func.py_func)
    offset = next(k for k, line in enumerate(source) if "# REFUSED" in line)
    return inspect.getsourcefile(func.py_func), first + offset


@pytest.mark.parametrize("func, construct, advice", CASES, ids=[c[0].__name__ for c in CASES])
def test_refusal_names_the_construct_and_its_line(func, construct, advice):
    x = np.array([0.3, 1.2, 2.5])
    before = x.copy()
    with pytest.raises(EnzymeError) as info:
        pyjlad.gradient(func, x)
    message = str(info.value)
    first = message.splitlines()[0]
    assert first.startswith(f"pyjlad cannot differentiate {func.__name__}: it uses {construct}")
    assert "Assertion" not in first and "augmented" not in first  # Enzyme's words are not the headline
    helper = eig_helper if func is uses_eig_in_a_helper else func
    filename, line = _refused_line(helper)
    assert f"at {filename}:{line} " in message
    assert "This is a known limit of pyjlad." in message
    assert advice in message
    assert info.value.diagnostics  # Enzyme's own report is kept
    if func not in (uses_print,):
        assert "print" not in message.lower()
    if func not in (uses_typed_list, uses_typed_dict):
        assert "typed" not in message
    if func not in (appends_pairs_with_the_integer_first,):
        assert "grows" not in message
    assert x.tobytes() == before.tobytes()


def test_an_unidentified_failure_is_called_a_defect_and_names_the_numba_operation():
    """A failure inside Numba's matrix product (the shape of det(B @ C)'s former failure)."""

    @njit
    def product(b, c):
        return np.sum(b @ c)  # the line

    b = np.ones((2, 2))
    exported = export(product, numba_argtypes((b, b)))
    diagnostics = ("error: <unknown>:0:0: in function preprocess__ZN5numba2np6linalg8dot_2_mm12_3clocals_3e"
                   "8dot_implB3v99E5ArrayIdLi2E1C7mutable7alignedE i32 (ptr, ptr): Enzyme: <analysis>\n"
                   "Illegal updateAnalysis prev:{[-1]:Integer} new: {[-1]:Pointer}\n")
    error = explain(exported, EnzymeError("Enzyme failed", diagnostics=diagnostics), [])
    message = str(error)
    assert message.splitlines()[0].endswith("it uses a matrix product (@ / np.dot).")
    line = inspect.getsourcelines(product.py_func)[1] + 2
    assert f":{line} (in " in message and "np.sum(b @ c)" in message
    assert "This is a defect in pyjlad or Enzyme" in message
    assert "Illegal updateAnalysis" in message.splitlines()[-2]  # Enzyme's reason, last
    assert error.diagnostics == diagnostics


def test_enzyme_stopped_at_its_memory_limit_says_so_first():
    """Enzyme's own "LLVM ERROR: out of memory" under ``PYJLAD_OPT_MEMORY`` (the runner's words for it, first):
    the message says what stopped it, not that no construct could be identified."""

    @njit
    def product(b, c):
        return np.sum(b @ c)

    b = np.ones((2, 2))
    exported = export(product, numba_argtypes((b, b)))
    diagnostics = "LLVM ERROR: out of memory\nAllocation failed\n"
    stopped = ("Enzyme ran out of memory differentiating product: it may take 2.0 GiB (PYJLAD_OPT_MEMORY). Its "
               "derivative of this function grows without bound in Enzyme v0.0.289.\nEnzyme failed (exit status 1)")
    message = str(explain(exported, EnzymeError(stopped, diagnostics=diagnostics), []))
    assert message.splitlines()[0] == f"pyjlad cannot differentiate {exported.name}: {stopped.splitlines()[0]}"
    assert "no construct" not in message and "it uses" not in message  # not refused for what it uses
    assert "Enzyme's message: LLVM ERROR: out of memory" in message


def test_enzyme_reason_skips_ir_comment_lines():
    """An IR dump's ``; Function Attrs`` comment is not Enzyme's reason."""
    from pyjlad.refusals import enzyme_reason

    diagnostics = ("; Function Attrs: nounwind Enzyme: cached\n"
                   "error: in function f: Enzyme: cannot handle unknown binary operator\n")
    assert enzyme_reason(diagnostics) == "cannot handle unknown binary operator"
    # Enzyme's header of a function's dump (seen for Numba's merge sort): the reason follows the dump
    diagnostics = ("error: <unknown>:0:0: in function f i32 (ptr): Enzyme: oldFunc: ; Function Attrs: nounwind\n"
                   "define i32 @f(ptr %a) {\n  ret i32 0\n}\n"
                   "Cannot deduce adding type of:   %r = insertelement <4 x i64> %v, i64 %l, i64 3\n")
    assert enzyme_reason(diagnostics).startswith("Cannot deduce adding type of:   %r = insertelement")
    # a missing rule (seen: llvm.smin, before the integer-min-max pass): Enzyme's dump, then what it lacks
    diagnostics = ("error: <unknown>:0:0: in function f void (ptr): Enzyme: ; Function Attrs: mustprogress willreturn\n"
                   "define internal void @f(ptr %a) {\n  ret void\n}\n\n"
                   "cannot handle (reverse) unknown intrinsic\nllvm.smin\n"
                   "  %k = tail call i64 @llvm.smin.i64(i64 %a, i64 %b)\n")
    assert enzyme_reason(diagnostics) == "cannot handle (reverse) unknown intrinsic llvm.smin"


def test_demangle_reads_numba_symbols():
    from numba.core.itanium_mangler import mangle

    assert demangle("preprocess_" + mangle("mod.sub.f-a", [])) == "mod.sub.f-a"
    assert demangle("malloc") == "malloc"


def test_uses_labels_calls_operators_and_statements():
    x = np.array([0.3, 1.2, 2.5])
    uses_eig_in_a_helper(x)
    labels = {u.label for u in uses(uses_eig_in_a_helper, numba_argtypes((x,)))}
    assert {"np.outer", "np.eye", "call eig_helper", "np.linalg.eigvalsh", "np.sum"} <= labels


def test_helpers_reached_only_by_numba_are_not_blamed():
    """numba_gil_ensure in the module (Numba's error path) without a print() in the user's code."""

    @njit
    def product(b, c):
        return np.sum(b @ c)

    b = np.ones((2, 2))
    exported = export(product, numba_argtypes((b, b)))
    diagnostics = ("error: in function preprocess__ZN5numba2np6linalg8dot_2_mm12_3clocals_3e8dot_implB3v99E5Arr"
                   "ayIdLi2E1C7mutable7alignedE: Enzyme: Illegal updateAnalysis\n")
    message = str(explain(exported, EnzymeError("Enzyme failed", diagnostics=diagnostics),
                          ["numba_gil_ensure", "numba_dict_new_sized"]))
    assert "print()" not in message and "typed" not in message
    assert "a matrix product (@ / np.dot)" in message.splitlines()[0]


def test_forward_mode_through_numbas_quicksort():
    """np.argsort in forward mode: Enzyme could not type the integer stores inside Numba's quicksort, and the
    call was refused naming the sort; typed integer accesses (pyjlad's last retry) differentiate it."""

    @njit
    def sorted_gather(x):
        return x[np.argsort(x)] * 1.0

    x = np.array([0.3, -1.2, 2.0, 0.7])
    tangent = np.array([1.0, 2.0, 3.0, 4.0])
    before = x.copy()
    order = np.argsort(before)  # hand oracle: sorting permutes the tangents as it permutes the values
    value, got = pyjlad.jvp(sorted_gather, (x,), (tangent,))
    np.testing.assert_array_equal(value, before[order])
    np.testing.assert_array_equal(got, tangent[order])
    np.testing.assert_array_equal(pyjlad.jacobian(sorted_gather, x, mode="forward"), np.eye(4)[order])
    assert x.tobytes() == before.tobytes()


def test_a_failure_inside_numbas_quicksort_names_the_sort():
    from pyjlad.refusals import _construct_from_report

    symbol = "_ZN5numba4misc9quicksort19make_quicksort_impl12_3clocals_3e13run_quicksort241B2v1E"
    _, construct = _construct_from_report(f"Enzyme: Cannot deduce type of store in {symbol}", set())
    assert construct.name == "a sort (np.sort, np.argsort: Numba's quicksort)" and "np.argsort" in construct.labels


def test_a_numpy_implementation_is_named_as_the_user_wrote_it():
    # Numba names some implementations np_<name>_impl: the message says np.diff, not np.np_diff (and then
    # finds the line that calls np.diff).
    from pyjlad.refusals import _construct_from_report

    symbol = "_ZN5numba2np9arraymath12np_diff_impl12_3clocals_3e12diff_impl_241B2v1E"
    _, construct = _construct_from_report(f"Enzyme: failed in {symbol}", set())
    assert construct.name == "np.diff" and "np.diff" in construct.labels


@njit
def stable_argsort(x):
    idx = np.argsort(x, kind="mergesort")  # the line
    return np.sum(x[idx][2:] ** 3)


def test_a_failure_inside_numbas_merge_sort_names_it_and_the_default_kind():
    """Enzyme's report of a failure inside Numba's merge sort (its shape on an AVX-512 Xeon, where Enzyme
    failed on the sort Numba compiled for it) becomes the user's construct, line and advice."""
    x = np.array([0.3, -1.2, 2.5, 0.7, 1.9])
    exported = export(stable_argsort, numba_argtypes((x,)))
    symbol = next(s for s in re.findall(r"_ZN[\w]*argmergesort_inner[\w]*", exported.module.text))
    diagnostics = (f"error: <unknown>:0:0: in function preprocess_{symbol} void (ptr): Enzyme: oldFunc: ; Function"
                   " Attrs: nounwind\n  ret void\nCannot deduce type of load\n")
    error = explain(exported, EnzymeError("Enzyme failed", diagnostics=diagnostics), [])
    message = str(error)
    assert message.splitlines()[0].startswith("pyjlad cannot differentiate stable_argsort: it uses a merge sort")
    source, first = inspect.getsourcelines(stable_argsort.py_func)
    line = first + next(k for k, text in enumerate(source) if "# the line" in text)
    assert f":{line} " in message and "the default kind, quicksort" in message
    assert error.diagnostics == diagnostics


def test_a_merge_sort_differentiates_correctly_or_is_refused_in_those_terms():
    """Whether Enzyme can differentiate Numba's merge sort depends on the code Numba compiles for the host
    CPU (it failed on an AVX-512 Xeon, succeeds on an AMD EPYC): either way, never a wrong gradient, and the
    caller's array unchanged."""
    x = np.array([0.3, -1.2, 2.5, 0.7, 1.9])
    before = x.copy()
    order = np.argsort(before, kind="mergesort")
    expected = np.zeros_like(before)
    expected[order[2:]] = 3 * before[order[2:]] ** 2  # d/dx of sum(x[idx][2:] ** 3), by hand
    try:
        got = pyjlad.gradient(stable_argsort, x)
    except EnzymeError as exc:
        assert str(exc).splitlines()[0].startswith("pyjlad cannot differentiate stable_argsort: it uses a merge sort")
        assert "the default kind, quicksort" in str(exc) and exc.diagnostics
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-14)
    assert x.tobytes() == before.tobytes()


def test_a_refusal_says_when_numbas_debug_information_is_on(monkeypatch):
    """With ``NUMBA_DEBUGINFO`` (or ``NUMBA_ENABLE_PROFILING``) on for the process, Numba keeps its own routines
    out of line, in shapes Enzyme refuses more often: the message names the variables to unset; without it,
    it does not."""
    from numba.core import config as numba_config

    @njit
    def total(x):
        return np.sum(x * x)

    exported = export(total, numba_argtypes((np.ones(3),)))
    diagnostics = "error: in function f: Enzyme: <analysis>\nIllegal updateAnalysis prev:{[-1]:Integer} new: {}\n"
    plain = str(explain(exported, EnzymeError("Enzyme failed", diagnostics=diagnostics), []))
    assert "NUMBA_DEBUGINFO" not in plain
    monkeypatch.setattr(numba_config, "DEBUGINFO_DEFAULT", 1)
    message = str(explain(exported, EnzymeError("Enzyme failed", diagnostics=diagnostics), []))
    assert "NUMBA_DEBUGINFO=1, or NUMBA_ENABLE_PROFILING=1" in message
    assert "differentiate in a process without those variables" in message


def _expm_sorting_body(A):
    n = A.shape[0]
    nrm = np.sort(np.sum(np.abs(A), axis=1))[-1]
    s = 0
    while nrm > 0.5:
        nrm /= 2.0
        s += 1
    As = A / 2.0 ** s
    E = np.eye(n)
    term = np.eye(n)
    for k in range(1, 10):
        term = _square_product(term, As) / k
        E = E + term
    for _ in range(s):
        E = _square_product(E, E)
    return E


@njit
def _square_product(A, B):
    n = A.shape[0]
    C = np.zeros((n, n))
    for i in range(n):
        for k in range(n):
            for j in range(n):
                C[i, j] += A[i, k] * B[k, j]
    return C


_expm_sorting_helper = njit(_expm_sorting_body)
_expm_inlined = njit(inline="always")(_expm_sorting_body)


@njit
def _sum_of_expm(A):
    return np.sum(_expm_sorting_helper(A))


@njit
def _sum_of_expm_inlined(A):
    return np.sum(_expm_inlined(A))


def test_a_failing_helper_is_named_with_numbas_inlining_as_the_advice_and_it_works():
    """A scaling-and-squaring helper: Enzyme v0.0.289's reverse mode fails on it as a call ("function failed
    verification"), and differentiates it inlined (a user-style probe, 2026-12-04). pyjlad inlines such a helper
    itself on a retry (``tests/test_inline_callees.py``), but not one whose name says it sorts (it keeps Numba's
    sorting as calls by name), as this one's does. Oracle: the same truncated series and squarings in JAX
    (float64)."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    A = np.array([[0.3, -0.2, 0.1], [0.05, 0.4, -0.3], [0.2, 0.1, -0.5]]) * 3
    with pytest.raises(EnzymeError) as info:
        pyjlad.grad(_sum_of_expm)(A.copy())
    assert "decorating _expm_sorting_body with @numba.njit(inline='always') often avoids it" in str(info.value)
    jnp = jax.numpy
    s = int(np.ceil(np.log2(np.max(np.sum(np.abs(A), axis=1)) / 0.5)))  # the helper's halvings at this A

    def twin(a):
        term = E = jnp.eye(3)
        for k in range(1, 10):
            term = term @ (a / 2.0 ** s) / k
            E = E + term
        for _ in range(s):
            E = E @ E
        return jnp.sum(E)

    assert _sum_of_expm_inlined(A.copy()) == pytest.approx(float(twin(A)), rel=1e-13)
    np.testing.assert_allclose(pyjlad.grad(_sum_of_expm_inlined)(A.copy()), np.asarray(jax.grad(twin)(A)),
                               rtol=1e-12)
