"""Float accesses typed for Enzyme before loose types (pyjlad/ir/edit.py: tag_float_accesses; the retry in
pyjlad/engines/differentiate.py: _floats_typed).

Enzyme v0.0.289 does not take an LLVM ``double`` for a float. The Hessian-vector product of ``np.max(x * x)``
(reverse over forward) stopped on a ``phi`` of tangents the forward derivative loads from a shadow ("Cannot
deduce type of phi"), and with loose types, the retry after it, the product was all zeros (refused by the
loose-types check since 2026-12-04). With every float load and store tagged with its TBAA type it builds
without loose types, and right; so do those of ``np.min(x * x + 1.0)`` and ``np.max(np.exp(x) * x)``, which
needed loose types too. Oracles: ``jax`` in float64, the hand-derived ``2 v_k e_k`` at
``k = argmax x^2``, and LLVM's own alias analysis (``opt -passes=aa-eval``) for what the tags tell LLVM.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.engines import compiled_sweep
from pyjlad.export import numba_argtypes
from pyjlad.ir import parse
from pyjlad.ir.edit import tag_float_accesses, tag_integer_accesses
from pyjlad.sweep import Sweep
from pyjlad.toolchain import locate

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)


def _alias_answers(text: str) -> list[str]:
    """LLVM's answers (``MayAlias``, ``NoAlias``, ...) for the load/store pairs of ``text``, by type-based alias
    analysis alone, reading the instructions' metadata."""
    proc = subprocess.run([str(locate().opt), "-passes=aa-eval", "-aa-pipeline=tbaa", "-evaluate-aa-metadata",
                           "-print-all-alias-modref-info", "-disable-output"],
                          input=text.encode(), capture_output=True, check=True)
    return [line.split(":")[0].strip() for line in proc.stderr.decode().splitlines() if "<->" in line]


_FLOAT_STORE_INTEGER_LOAD = """define void @f(ptr %p, ptr %q) {
  store double 1.0, ptr %p, align 8
  %v = load i64, ptr %q, align 8
  %w = load <4 x float>, ptr %q, align 16
  ret void
}
"""


def test_the_tags_type_every_float_access_and_tell_llvm_nothing_about_aliasing() -> None:
    """A float store and an integer load of the same memory (a copy of floats through integers) must still
    alias once both are tagged, float and integer types each in a tree of its own; the same tags in one tree
    would tell LLVM they do not (the check can fail)."""
    module = tag_integer_accesses(tag_float_accesses(parse(_FLOAT_STORE_INTEGER_LOAD)))
    text = module.render()
    body = "\n".join(module.definitions[0].body or [])
    assert body.count("!tbaa") == 3
    assert '!"double"' in text and '!"float"' in text and '!"long"' in text
    assert set(_alias_answers(text)) == {"MayAlias"}
    one_tree = text.replace("pyjlad TBAA: double", "Simple C/C++ TBAA")
    assert "NoAlias" in _alias_answers(one_tree)


def test_accesses_tagged_already_and_atomic_ones_are_left_alone() -> None:
    text = ("define void @f(ptr %p) {\n  %a = load double, ptr %p, align 8, !tbaa !0\n"
            "  %b = load atomic double, ptr %p acquire, align 8\n  ret void\n}\n"
            '!0 = !{!1, !1, i64 0}\n!1 = !{!"double", !2, i64 0}\n!2 = !{!"Simple C/C++ TBAA"}\n')
    assert tag_float_accesses(parse(text)).render() == text


def _hvp_sweep_built(f, args):
    compiled = compiled_sweep(f, Sweep("hvp", "reverse", (), 0), None)
    return compiled._build_once(numba_argtypes(args))


# NumPy's max/min reductions of an expression: each needed loose types for its Hessian-vector product (the first
# was all zeros with them). (function, jax twin, the selected index, the second derivative there by hand: the
# Hessian is that times e_k e_k^T.)
REDUCTIONS = {
    "max of squares": (lambda x: np.max(x * x), lambda y: jnp.max(y * y),
                       lambda x: np.argmax(x * x), lambda xk: 2.0),
    "min of squares plus one": (lambda x: np.min(x * x + 1.0), lambda y: jnp.min(y * y + 1.0),
                                lambda x: np.argmin(x * x), lambda xk: 2.0),
    "max of x exp(x)": (lambda x: np.max(np.exp(x) * x), lambda y: jnp.max(jnp.exp(y) * y),
                        lambda x: np.argmax(np.exp(x) * x), lambda xk: (xk + 2.0) * np.exp(xk)),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("x", [np.array([0.3, -2.0, 1.0, 0.7]), np.array([1.5, 0.2, -0.1, -0.9, 0.4])])
def test_the_hessian_vector_product_of_a_reduction_is_built_typed_and_right(monkeypatch: pytest.MonkeyPatch,
                                                                            name: str, x: np.ndarray) -> None:
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    function, twin, selected, second = REDUCTIONS[name]
    f = njit(function)
    v = np.linspace(0.5, -1.0, x.size)
    x0, v0 = x.copy(), v.copy()
    got = pyjlad.hvp(f, (x,), v)
    k = int(selected(x0))
    expected = np.zeros_like(x0)
    expected[k] = second(x0[k]) * v0[k]  # hand-derived
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=0)
    product = jax.jvp(jax.grad(twin), (jnp.asarray(x0),), (jnp.asarray(v0),))[1]
    np.testing.assert_allclose(got, np.asarray(product), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(v, v0)
    assert not _hvp_sweep_built(f, (x,)).loose_types
