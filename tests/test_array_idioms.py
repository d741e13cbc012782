"""Array idioms Enzyme used to refuse: joining arrays, running sums, determinants of products.

Three causes, each checked here through the class of functions it broke:

* ``np.linalg.det(B @ C)`` ("Illegal updateAnalysis") and ``np.cumsum(X, axis=0)``
  ("Illegal replace ficticious phi"): pyjlad read Numba's IR after Numba had
  generated machine code, and LLVM's code generator rewrites the module in place
  (one ``alloca`` then held the product's array struct and, later, the pair
  ``slogdet`` returns; strength-reduced loop counters). Enzyme now gets the IR
  as LLVM's optimizer left it.
* ``np.concatenate``, ``np.stack``, ``np.hstack``/``np.vstack`` of 1-D arrays
  ("Illegal orIn: {[-1]:Integer} right: {[-1]:Pointer}"): Numba compiles its
  library functions once per process, vectorized, and the loop vectorizer's
  overlap checks compare addresses as integers. Addresses that are only
  compared now come from a function Enzyme's type analysis does not enter.
* ``np.where`` and boolean-mask assignment returning arrays, ``np.percentile``,
  ``np.quantile`` ("cannot find deal with ptr that isnt arg" in reverse mode; in
  forward mode a tangent phi of a ``<4 x i1>`` phi placed after other
  instructions, "PHI nodes not grouped at top of basic block"): Enzyme fails on
  the vectorized loops of these library functions; pyjlad retries with vector
  operations, loads and stores split into scalar ones.
* Slice assignment into a fresh array with its ends wrapped around (``y[1:-1] = x;
  y[0] = x[-1]; y[-1] = x[0]``) aborted the process in reverse mode: LLVM 22's GVN
  asserts on a load of Enzyme's cache (``!invariant.group``) whose address the
  optimizer folded to a constant (see ``pyjlad.engines.native.drop_invariant_groups``
  and ``tests/test_native.py``).
* ``np.cumsum(X, axis=k)`` of a 2-D array still needs Enzyme's loose-types retry
  (the ``memset`` zeroing its fresh accumulator has no type Enzyme can deduce);
  forward and reverse sweeps are checked so that a dropped adjoint or tangent
  would show.

Every derivative is compared with JAX in float64 (computed from copies of the
inputs), and the caller's arrays are checked unchanged.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.address_comparisons import ADDRESS_FUNCTION, opaque_address_comparisons
from pyjlad.export import export, numba_argtypes

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20240611)
V1, V2, V3 = (RNG.standard_normal(3) for _ in range(3))
M1, M2, M3 = (RNG.standard_normal((2, 3)) for _ in range(3))
T3 = RNG.standard_normal((2, 3, 4))
SQ1, SQ2 = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
#: Seven values at least 0.1 apart, none within 0.1 of 0 (comparisons keep a margin).
SPREAD = RNG.permutation(np.array([-1.7, -0.9, -0.3, 0.2, 0.6, 1.1, 1.9])) + 0.01 * RNG.standard_normal(7)


def mask_assign(x):
    y = x.copy()
    y[x < 0.0] = 0.0
    return y * x


def pad_wrapped(x):
    """Slice assignment into a fresh array, its ends wrapped around (corpus ``indexing/setitem_slice/1d``)."""
    y = np.zeros(x.shape[0] + 2)
    y[1:-1] = x
    y[0] = x[-1]
    y[-1] = x[0]
    return y[1:] * y[:-1]


def jpad_wrapped(x):
    y = jnp.concatenate([x[-1:], x, x[:1]])
    return y[1:] * y[:-1]


def pad_rows(x):
    y = np.zeros((x.shape[0] + 2, x.shape[1]))
    y[1:-1] = x
    y[0] = x[-1]
    return y[1:] * y[:-1]


def jpad_rows(x):
    y = jnp.concatenate([x[-1:], x, jnp.zeros((1, x.shape[1]))])
    return y[1:] * y[:-1]


def mask_assign_array(x, y):
    z = x.copy()
    m = x > y
    z[m] = y[m]
    return z


@njit
def weighted_squares(out):
    """A scalar that depends on where each element of ``out`` lands."""
    flat = out.ravel()
    return np.sum(flat * flat * np.arange(1.0, flat.size + 1.0))


def jweighted_squares(out):
    flat = out.ravel()
    return jnp.sum(flat * flat * jnp.arange(1.0, flat.size + 1.0))


def _case(name, numba_body, jax_body, args):
    return pytest.param(numba_body, jax_body, args, id=name)


# (Numba function, JAX twin, arguments): each returns an array.
ARRAY_CASES = [
    _case("concatenate 2 1-D", lambda x, y: np.concatenate((x, y)), lambda x, y: jnp.concatenate((x, y)), (V1, V2)),
    _case("concatenate 3 1-D", lambda x, y, z: np.concatenate((x, y, z)),
          lambda x, y, z: jnp.concatenate((x, y, z)), (V1, V2, V3)),
    _case("concatenate 2 2-D axis 0", lambda x, y: np.concatenate((x, y), axis=0),
          lambda x, y: jnp.concatenate((x, y), axis=0), (M1, M2)),
    _case("concatenate 3 2-D axis 1", lambda x, y, z: np.concatenate((x, y, z), axis=1),
          lambda x, y, z: jnp.concatenate((x, y, z), axis=1), (M1, M2, M3)),
    _case("stack 2 1-D", lambda x, y: np.stack((x, y)), lambda x, y: jnp.stack((x, y)), (V1, V2)),
    _case("stack 3 1-D axis 1", lambda x, y, z: np.stack((x, y, z), axis=1),
          lambda x, y, z: jnp.stack((x, y, z), axis=1), (V1, V2, V3)),
    _case("stack 2 2-D", lambda x, y: np.stack((x, y)), lambda x, y: jnp.stack((x, y)), (M1, M2)),
    _case("stack 2 2-D axis 2", lambda x, y: np.stack((x, y), axis=2), lambda x, y: jnp.stack((x, y), axis=2),
          (M1, M2)),
    _case("hstack 3 1-D", lambda x, y, z: np.hstack((x, y, z)), lambda x, y, z: jnp.hstack((x, y, z)), (V1, V2, V3)),
    _case("hstack 2 2-D", lambda x, y: np.hstack((x, y)), lambda x, y: jnp.hstack((x, y)), (M1, M2)),
    _case("vstack 2 1-D", lambda x, y: np.vstack((x, y)), lambda x, y: jnp.vstack((x, y)), (V1, V2)),
    _case("vstack 3 2-D", lambda x, y, z: np.vstack((x, y, z)), lambda x, y, z: jnp.vstack((x, y, z)), (M1, M2, M3)),
    _case("cumsum 2-D axis 0", lambda x: np.cumsum(x, axis=0), lambda x: jnp.cumsum(x, axis=0), (M1,)),
    _case("cumsum 2-D axis 1", lambda x: np.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1), (M1,)),
    _case("cumsum 3-D axis 1", lambda x: np.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1), (T3,)),
    _case("cumsum 3-D axis 2", lambda x: np.cumsum(x, axis=2), lambda x: jnp.cumsum(x, axis=2), (T3,)),
    _case("cumsum 2-D flat", lambda x: np.cumsum(x), lambda x: jnp.cumsum(x), (M1,)),
    _case("cumprod 2-D flat", lambda x: np.cumprod(x), lambda x: jnp.cumprod(x), (M1,)),
    _case("inv(B @ C)", lambda b, c: np.linalg.inv(b @ c), lambda b, c: jnp.linalg.inv(b @ c), (SQ1, SQ2)),
    _case("solve(A.T @ A, v)", lambda a, v: np.linalg.solve(a.T @ a, v), lambda a, v: jnp.linalg.solve(a.T @ a, v),
          (SQ1, V1)),
    _case("where scalar branches", lambda x: np.where(x > 0.0, x * x, -0.5 * x),
          lambda x: jnp.where(x > 0.0, x * x, -0.5 * x), (SPREAD,)),
    _case("where two arrays", lambda x, y: np.where(x > y, np.sin(x), y * x),
          lambda x, y: jnp.where(x > y, jnp.sin(x), y * x), (SPREAD, SPREAD[::-1].copy())),
    _case("where 2-D", lambda x: np.where(x > 0.0, np.exp(x), x), lambda x: jnp.where(x > 0.0, jnp.exp(x), x),
          (SPREAD[:6].reshape(2, 3),)),
    _case("mask assignment", mask_assign, lambda x: jnp.where(x < 0.0, 0.0, x) * x, (SPREAD,)),
    _case("mask assignment from an array", mask_assign_array, lambda x, y: jnp.where(x > y, y, x),
          (SPREAD, SPREAD[::-1].copy())),
    _case("slice assignment, ends wrapped", pad_wrapped, jpad_wrapped, (SPREAD[:5],)),
    _case("slice assignment, 2-D rows", pad_rows, jpad_rows, (M1.T.copy(),)),
]

# (Numba function, JAX twin, arguments): each returns a float.
SCALAR_CASES = [
    _case("det(B @ C)", lambda b, c: np.linalg.det(b @ c), lambda b, c: jnp.linalg.det(b @ c), (SQ1, SQ2)),
    _case("det(A.T @ A)", lambda a: np.linalg.det(a.T @ a), lambda a: jnp.linalg.det(a.T @ a), (SQ1,)),
    _case("det(A @ A.T + I)", lambda a: np.linalg.det(a @ a.T + np.eye(3)),
          lambda a: jnp.linalg.det(a @ a.T + jnp.eye(3)), (SQ1,)),
    _case("slogdet(A @ A.T + I)", lambda a: np.linalg.slogdet(a @ a.T + np.eye(3))[1],
          lambda a: jnp.linalg.slogdet(a @ a.T + jnp.eye(3))[1], (SQ1,)),
    _case("percentile", lambda x: np.percentile(x, 30.0), lambda x: jnp.percentile(x, 30.0), (SPREAD,)),
    _case("quantile of a 2-D array", lambda x: np.quantile(x, 0.75), lambda x: jnp.quantile(x, 0.75),
          (SPREAD[:6].reshape(3, 2),)),
    _case("slogdet(B @ C) sign * logdet", lambda b, c: np.prod(np.array(np.linalg.slogdet(b @ c))),
          lambda b, c: jnp.prod(jnp.array(jnp.linalg.slogdet(b @ c))), (SQ1, SQ2)),
]


def _copies(args):
    return tuple(np.array(a, copy=True) for a in args)


def _assert_unchanged(args, before):
    for a, b in zip(args, before):
        assert a.tobytes() == b.tobytes()


def _loss_of(body):
    """``weighted_squares(body(*args))`` as an ``@njit`` function of as many arguments as ``body``."""
    inner = njit(body)
    n = body.__code__.co_argcount
    names = ", ".join(f"a{k}" for k in range(n))
    namespace = {"inner": inner, "weighted_squares": weighted_squares}
    exec(f"def loss({names}):\n    return weighted_squares(inner({names}))\n", namespace)  # noqa: S102
    return njit(namespace["loss"])


@pytest.mark.parametrize("body, jbody, args", ARRAY_CASES)
def test_gradient_through_an_array_idiom(body, jbody, args):
    before = _copies(args)
    wrt = tuple(range(len(args)))
    expected = jax.grad(lambda *a: jweighted_squares(jbody(*a)), argnums=wrt)(*map(jnp.asarray, before))
    got = pyjlad.gradient(_loss_of(body), *args, wrt=wrt)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-12, atol=1e-12)
    _assert_unchanged(args, before)


@pytest.mark.parametrize("body, jbody, args", SCALAR_CASES)
def test_gradient_of_a_scalar_idiom(body, jbody, args):
    before = _copies(args)
    wrt = tuple(range(len(args)))
    expected = jax.grad(jbody, argnums=wrt)(*map(jnp.asarray, before))
    got = pyjlad.gradient(njit(body), *args, wrt=wrt)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-11, atol=1e-12)
    _assert_unchanged(args, before)


# Jacobians and vector-Jacobian products of array results, in both sweep directions: the
# loose-types retry of cumsum along an axis must neither drop adjoints nor leave tangents unset.
JACOBIAN_IDS = ["concatenate 2 1-D", "stack 3 1-D axis 1", "vstack 2 1-D", "hstack 2 2-D", "cumsum 2-D axis 0",
                "cumsum 2-D axis 1", "cumsum 3-D axis 1", "solve(A.T @ A, v)", "where scalar branches",
                "where two arrays", "where 2-D", "mask assignment", "mask assignment from an array",
                "slice assignment, ends wrapped", "slice assignment, 2-D rows"]


@pytest.mark.parametrize("body, jbody, args", [c for c in ARRAY_CASES if c.id in JACOBIAN_IDS])
def test_jacobian_and_vjp_of_an_array_result(body, jbody, args):
    before = _copies(args)
    f = njit(body)
    wrt = tuple(range(len(args)))
    expected = jax.jacobian(jbody, argnums=wrt)(*map(jnp.asarray, before))
    for mode in ("reverse", "forward", "forward"):  # twice forward: fresh shadows must start at zero
        got = pyjlad.jacobian(f, *args, wrt=wrt, mode=mode)
        got = got if isinstance(got, tuple) else (got,)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, np.asarray(e), rtol=1e-11, atol=1e-12, err_msg=mode)
    value = jbody(*map(jnp.asarray, before))
    cotangent = RNG.standard_normal(value.shape)
    _, pullback = jax.vjp(jbody, *map(jnp.asarray, before))
    for _ in range(2):
        got_value, cotangents = pyjlad.vjp(f, args, cotangent)
        np.testing.assert_allclose(got_value, np.asarray(value), rtol=1e-12, atol=1e-12)
        for g, e in zip(cotangents, pullback(jnp.asarray(cotangent))):
            np.testing.assert_allclose(g, np.asarray(e), rtol=1e-11, atol=1e-12)
    _assert_unchanged(args, before)


FLOAT32_IDS = ["concatenate 2 1-D", "stack 2 2-D", "cumsum 2-D axis 0", "vstack 3 2-D"]


@pytest.mark.parametrize("body, jbody, args", [c for c in ARRAY_CASES if c.id in FLOAT32_IDS])
def test_float32_gradient_through_an_array_idiom(body, jbody, args):
    args32 = tuple(a.astype(np.float32) for a in args)
    before = _copies(args32)
    wrt = tuple(range(len(args)))
    # The oracle in float64 at the float32 inputs.
    expected = jax.grad(lambda *a: jweighted_squares(jbody(*a)), argnums=wrt)(
        *(jnp.asarray(a, dtype=jnp.float64) for a in before))
    got = pyjlad.gradient(_loss_of(body), *args32, wrt=wrt)
    got = got if isinstance(got, tuple) else (got,)
    for g, e in zip(got, expected):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, np.asarray(e), rtol=2e-4, atol=2e-4 * float(np.max(np.abs(e))))
    _assert_unchanged(args32, before)


def test_float32_determinant_of_a_product():
    b, c = SQ1.astype(np.float32), SQ2.astype(np.float32)
    before = _copies((b, c))
    expected = jax.grad(lambda b, c: jnp.linalg.det(b @ c), argnums=(0, 1))(
        *(jnp.asarray(a, dtype=jnp.float64) for a in before))
    got = pyjlad.gradient(njit(lambda b, c: np.linalg.det(b @ c)), b, c, wrt=(0, 1))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-4, atol=1e-4 * float(np.max(np.abs(e))))
    _assert_unchanged((b, c), before)


def _entry_function(text: str, entry: str) -> str:
    match = re.search(r"^define [^\n]*@" + re.escape(entry) + r"\(.*?^}", text, re.MULTILINE | re.DOTALL)
    assert match is not None
    return match.group(0)


@njit
def _neighbour_products(x):
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(1, x.shape[1]):
            s += x[i, j] * x[i, j - 1]
    return s


def test_enzyme_gets_the_ir_before_code_generation():
    # LLVM's code generator rewrote the module Numba keeps: loop strength reduction's counters
    # and addresses (lsr.iv, scevgep), and the product's array struct sharing a stack slot with
    # the pair slogdet returns (Enzyme: "Illegal updateAnalysis").
    _neighbour_products(M1)  # the user's own compile, with its machine code
    exported = export(_neighbour_products, numba_argtypes((M1,)))
    body = _entry_function(exported.enzyme_module.text, exported.module.entry)
    assert not re.findall(r"sunkaddr|lsr\.iv|scevgep", body)
    np.testing.assert_allclose(pyjlad.gradient(_neighbour_products, M1),
                               np.asarray(jax.grad(lambda x: jnp.sum(x[:, 1:] * x[:, :-1]))(jnp.asarray(M1))),
                               rtol=1e-14)

    @njit
    def det_of_product(b, c):
        return np.linalg.det(b @ c)

    det_of_product(SQ1, SQ2)
    exported = export(det_of_product, numba_argtypes((SQ1, SQ2)))
    body = _entry_function(exported.enzyme_module.text, exported.module.entry)
    retptrs = re.findall(r"call i32 @[^(]*(?:dot_2|slogdet)[^(]*\(ptr nonnull (%[\w.]+)", body)
    assert len(retptrs) == 2 and retptrs[0] != retptrs[1]


_CHECKS = """define i32 @f(ptr %a, ptr %b, i64 %n, ptr %out) {
entry:
  %pa = ptrtoint ptr %a to i64
  %pb = ptrtoint ptr %b to i64
  %d = sub i64 %pa, %pb
  %span = shl i64 %n, 3
  %reach = add i64 %d, %span
  %overlap = icmp ult i64 %reach, 128
  %kept = ptrtoint ptr %out to i64
  %moved = add i64 %kept, 8
  %back = inttoptr i64 %moved to ptr
  %stored = ptrtoint ptr %b to i64
  store i64 %stored, ptr %out, align 8
  %r = select i1 %overlap, i32 1, i32 0
  ret i32 %r
}"""


def test_only_compared_addresses_become_opaque():
    text, changed = opaque_address_comparisons(_CHECKS)
    assert changed
    assert f"%pa = call i64 {ADDRESS_FUNCTION}(ptr %a)" in text
    assert f"%pb = call i64 {ADDRESS_FUNCTION}(ptr %b)" in text
    # An address turned back into a pointer, or stored, keeps its ptrtoint: Enzyme must see it.
    assert "%kept = ptrtoint ptr %out to i64" in text
    assert "%stored = ptrtoint ptr %b to i64" in text
    assert opaque_address_comparisons(text.replace(ADDRESS_FUNCTION, "@g")) == (
        text.replace(ADDRESS_FUNCTION, "@g"), False)


def test_retries_after_enzyme_failures():
    """Which failures are retried, and how: loose types first for typing, scalarized code for vectors."""
    from pyjlad.engines.differentiate import PASSES, SCALARIZED_PASSES, _next_attempt

    typing, vector = "Cannot deduce type of x", "PHI nodes not grouped at top of basic block!"
    assert _next_attempt(PASSES, (), typing) == (PASSES, ("-enzyme-loose-types",))
    assert _next_attempt(PASSES, ("-enzyme-loose-types",), typing) == (
        SCALARIZED_PASSES, ("-enzyme-loose-types", "-scalarize-load-store"))
    assert _next_attempt(PASSES, (), vector) == (SCALARIZED_PASSES, ("-scalarize-load-store",))
    assert _next_attempt(SCALARIZED_PASSES, ("-scalarize-load-store",), typing) == (
        SCALARIZED_PASSES, ("-scalarize-load-store", "-enzyme-loose-types"))
    assert _next_attempt(SCALARIZED_PASSES, ("-scalarize-load-store", "-enzyme-loose-types"), vector) is None
    assert _next_attempt(PASSES, (), "Assertion `legalRecompute(") is None  # not retried here


def arange_weights(x):
    return np.sum(x * x * np.arange(x.shape[0]))


def arange_loop(x):
    r = np.arange(x.shape[0])
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * r[i]
    return s


def diff_arange(x):
    d = np.diff(x)
    return np.sum(d * d * np.arange(d.shape[0]))


def column_sums(x):
    a = np.sum(x, axis=0)
    return np.dot(a, a * a)


# Forward mode of functions storing integers into arrays they allocate (a vectorized np.arange, the
# integer temporaries of a sum along an axis): Enzyme could not type those stores ("Cannot deduce type
# of store") until pyjlad's last retry typed the module's integer accesses (pyjlad.ir.edit.tag_integer_accesses);
# that retry now comes before the scalarized one (on an AMD EPYC host, Enzyme ran past pyjlad's ten-minute limit
# on the scalarized np.diff times np.arange).
FORWARD_INTEGER_CASES = [
    _case("np.arange weights", arange_weights, lambda x: jnp.sum(x * x * jnp.arange(x.shape[0])), (SPREAD,)),
    _case("np.arange in a loop", arange_loop, lambda x: jnp.sum(x * x * jnp.arange(x.shape[0])), (SPREAD,)),
    _case("np.diff times np.arange", diff_arange,
          lambda x: jnp.sum(jnp.diff(x) ** 2 * jnp.arange(x.shape[0] - 1)), (SPREAD,)),
    _case("np.sum axis 0", column_sums, lambda x: jnp.dot(jnp.sum(x, axis=0), jnp.sum(x, axis=0) ** 2), (M1,)),
]


#: The cases also checked through the vector-mode forward sweep and the Hessian (each of those builds runs
#: every failing attempt before the typed one: about a minute per case on the 2-core CI machine).
ALL_SWEEPS_IDS = ("np.arange weights", "np.sum axis 0")


@pytest.mark.parametrize("body, jbody, args", FORWARD_INTEGER_CASES)
def test_forward_mode_through_integer_arrays_the_function_allocates(body, jbody, args, request):
    (x,) = args
    before = _copies(args)
    f = njit(body)
    tangent = RNG.standard_normal(x.shape)
    _, want_tangent = jax.jvp(jbody, (jnp.asarray(before[0]),), (jnp.asarray(tangent),))
    _, got_tangent = pyjlad.jvp(f, (x,), (tangent,))
    np.testing.assert_allclose(got_tangent, float(want_tangent), rtol=1e-12)
    if request.node.callspec.id in ALL_SWEEPS_IDS:
        np.testing.assert_allclose(pyjlad.jacobian(f, x, mode="forward"), np.asarray(jax.grad(jbody)(before[0])),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(pyjlad.hessian(f, x), np.asarray(jax.hessian(jbody)(before[0])), rtol=1e-12,
                                   atol=1e-12)
    _assert_unchanged(args, before)


def test_integer_accesses_are_typed_only_after_every_other_attempt_failed(monkeypatch):
    """The typed retry runs last (a module that differentiates without it is the same module as before)."""
    from pyjlad.engines import differentiate

    seen = []
    real = differentiate._differentiate

    def spy(toolchain, module, passes, what, options=(), host=False, rewrite=None):
        seen.append('!"long"' in (module.decode() if isinstance(module, bytes) else module))  # integer tags
        return real(toolchain, module, passes, what, options, host, rewrite)

    monkeypatch.setattr(differentiate, "_differentiate", spy)
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    x = SPREAD.copy()
    pyjlad.jvp(njit(arange_loop), (x,), (np.ones_like(x),))
    assert seen[-1] and not any(seen[:-1]) and len(seen) > 1  # typed once the untyped attempts had failed
    seen.clear()
    pyjlad.jvp(njit(lambda v: np.sum(v * v)), (x,), (np.ones_like(x),))
    assert seen == [False]
