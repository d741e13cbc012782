"""Which symbols a function references is read by the IR lexer, not by stripping ``c"..."`` with a regex.

The regex ``c"[^"]*"`` that removed string constants before the symbols were collected also matched the
end of any quoted name ending in ``c`` (``%"arg.spéc"``, ``@".const.f.<locals>.func"``) and swallowed
every symbol up to the next quote: a callee, a libm declaration or Numba's allocator went missing from
the portable module (Enzyme then failed on a function that references an undefined symbol), and a
recursive call could go unseen by ``has_recursion``. Numba quotes the names of arguments and variables
with non-ASCII characters, so any ``@njit`` function with such an argument ending in ``c`` was affected.
"""

from __future__ import annotations

import math
import shutil
import subprocess

import jax
import jax.numpy as jnp
import numba
import numpy as np
import pytest

import pyjlad
from pyjlad.export import export, numba_argtypes
from pyjlad.ir.lexer import substitute, texts_of, tokenize
from pyjlad.portable import _references, has_recursion
from pyjlad.portable_pipeline import make_portable

jax.config.update("jax_enable_x64", True)

# A quoted parameter ending in c, a call, a string constant holding "@fake", a comment naming @ghost,
# then a second quoted name: the old regex took everything between the two quotes for a string.
_QUOTED_C_IR = r"""define i32 @entry(ptr noalias %retptr, ptr noalias %excinfo, double %"arg.sp\C3\A9c") {
entry:
  %t = tail call double @tanh(double %"arg.sp\C3\A9c") ; uses @ghost? no: a comment
  %e = tail call double @llvm.exp.f64(double %t)
  %m = load i8, ptr @.const.msg, align 1
  %p = tail call ptr @".const.f.<locals>.func"(ptr @env)
  %s = fmul double %e, %"arg.sp\C3\A9c"
  store double %s, ptr %retptr, align 8
  ret i32 0
}
"""


def test_reference_scan_reads_quoted_names_strings_and_comments_apart() -> None:
    refs = _references(_QUOTED_C_IR, "@entry")
    assert refs == {"@tanh", "@llvm.exp.f64", "@.const.msg", '@".const.f.<locals>.func"', "@env"}
    data = '@.const.msg = internal constant [8 x i8] c"a @7$N$\\00"\n'
    assert _references(data, "@.const.msg") == set()
    # a quoted global ending in c followed by more references and, later, a quote
    call = 'call void @g(ptr @".const.<locals>.func", ptr @env, ptr @"q")'
    assert _references(call, "@w") == {"@g", '@".const.<locals>.func"', "@env", '@"q"'}


_KINDS = ("comment", "cstring", "string", "global", "local", "attrgroup", "metadata", "comdat", "word")


@pytest.mark.parametrize("source", ["handwritten", "numba"])
def test_fast_token_scans_agree_with_the_lexer(source: str) -> None:
    """texts_of / substitute (what the reference scan and the renames use) read exactly as tokenize does."""
    if source == "handwritten":
        text = _QUOTED_C_IR + _DECLARATIONS + 'attributes #0 = { "a"="b c" }\n!0 = !{!"x@y", i64 1}\n'
    else:
        func = numba.njit(lambda a, spéc: np.sum(np.sin(a)) * spéc)
        func(np.ones(3), 2.0)
        text = next(iter(func.inspect_llvm().values()))  # Numba's whole module: wrappers, constants
    tokens = tokenize(text)
    for kind in _KINDS:
        assert texts_of(text, kind) == [t.text for t in tokens if t.kind == kind], kind
        mark = lambda s: f"<{s}>"  # noqa: E731
        assert substitute(text, kind, mark) == "".join(mark(t.text) if t.kind == kind else t.text
                                                       for t in tokens), kind


_DECLARATIONS = ("declare double @tanh(double)\ndeclare double @llvm.exp.f64(double)\n"
                 "declare ptr @\".const.f.<locals>.func\"(ptr)\n"
                 "@.const.msg = internal constant [2 x i8] c\"a\\00\"\n@env = internal global ptr null\n")


def test_portable_module_keeps_what_follows_a_quoted_name_ending_in_c() -> None:
    text = make_portable(_QUOTED_C_IR + _DECLARATIONS, "entry", name="pyjlad_entry").text
    for symbol in ("@tanh(", "@llvm.exp.f64(", "@.const.msg =", "@env ="):
        assert symbol in text, symbol
    tool = shutil.which("llvm-as-15")
    assert tool is not None, "llvm-as-15 (part of the Enzyme toolchain) is not installed"
    result = subprocess.run([tool, "-o", "/dev/null", "-"], input=text, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_recursion_is_found_past_a_quoted_name_ending_in_c() -> None:
    recursive = ('define i32 @f(i32 %"n\\C3\\A9c") {\nentry:\n  %a = add i32 %"n\\C3\\A9c", 1\n'
                 '  %r = call i32 @f(i32 %a)\n  %b = add i32 %r, %"n\\C3\\A9c"\n  ret i32 %b\n}\n')
    assert has_recursion(recursive)


# Real Numba functions whose arguments Numba quotes (non-ASCII) and whose names end in c.

@numba.njit
def scaled_tanh(spéc, x):
    return math.tanh(x) * math.exp(spéc)


@numba.njit
def sine_energy(x, spéc):
    y = np.sin(x) * 2.0
    return np.sum(y * y) * spéc


def _quoted_names_ending_in_c(text: str) -> set[str]:
    return {t.text for t in tokenize(text) if t.kind in ("local", "global") and t.text.endswith('c"')}


def _jax_scaled_tanh(s, x):
    return jnp.tanh(x) * jnp.exp(s)


def _jax_sine_energy(x, s):
    return jnp.sum((jnp.sin(x) * 2.0) ** 2) * s


CASES = [
    pytest.param(scaled_tanh, _jax_scaled_tanh, (0.7, 0.3), id="scalar-libm-calls"),
    pytest.param(sine_energy, _jax_sine_energy, (np.linspace(-1.0, 2.0, 9), 1.5), id="array-temporary"),
]


@pytest.mark.parametrize("func,oracle,args", CASES)
def test_gradient_of_function_with_quoted_argument_ending_in_c(func, oracle, args) -> None:
    exported = export(func, numba_argtypes(args))
    assert _quoted_names_ending_in_c(exported.module.text), "the shape under test is gone"
    before = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)
    grads = pyjlad.gradient(func, *args, wrt=(0, 1))
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)
    expected = jax.grad(oracle, argnums=(0, 1))(*[jnp.asarray(a, dtype=jnp.float64) for a in before])
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-14)
