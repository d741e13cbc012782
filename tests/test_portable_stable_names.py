"""The portable module is the same text in every process, so its gradient is found on disk.

Numba names the constant bytes of a string literal ``@.bytes.<hash(bytes)>`` (``insert_const_bytes``),
and Python's ``hash`` of bytes changes from one process to the next. Such globals (the message of
``np.sum(a, axis=0)``'s bounds check, a ``raise`` with a run-time message) reached the portable module,
whose text is part of the gradient cache's key: those functions missed the disk cache in every new
process (13 of the fuzzer's first 80 programs). ``make_portable`` names them by their content.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pyjlad.portable_pipeline import make_portable

_ROOT = Path(__file__).resolve().parent.parent  # the pyjlad under test, also in the subprocesses

_IR = r"""define i32 @entry(ptr noalias %retptr, ptr noalias %excinfo, double %x) {
entry:
  %a = load i8, ptr @.bytes.{A}, align 1
  %b = load i8, ptr @.bytes.{A}.1, align 1
  %c = load i8, ptr @.bytes.{B}, align 1
  %d = load i8, ptr @.const.text, align 1
  store double %x, ptr %retptr, align 8
  ret i32 0
}
@.bytes.{A} = internal constant [6 x i8] c"axis \00"
@.bytes.{A}.1 = internal constant [6 x i8] c"axis \00"
@.bytes.{B} = internal constant [3 x i8] c"ok\00"
@.const.text = internal constant [15 x i8] c"see @.bytes.5 \00"
"""


def _portable(a: str, b: str) -> str:
    ir = _IR.replace("{A}", a).replace("{B}", b)
    return make_portable(ir, "entry", name="f").text


def test_hash_named_constants_are_named_by_content() -> None:
    one = _portable("-4446739099191175225", "644432172271701276")
    two = _portable("2837831316271529413", "-17")
    assert one == two
    names = re.findall(r"^(@\S+) = ", one, re.MULTILINE)
    assert len(names) == 4 and len(set(names)) == 4
    assert not [n for n in names if re.fullmatch(r"@\.bytes\.-?\d+(\.\d+)*", n)], names
    # the two of the same content are numbered in module order; text inside c"..." is data, never renamed
    assert any(n + ".1" in names for n in names), names
    assert 'c"see @.bytes.5 \\00"' in one
    tool = shutil.which("llvm-as-15")
    assert tool is not None, "llvm-as-15 (part of the Enzyme toolchain) is not installed"
    result = subprocess.run([tool, "-o", "/dev/null", "-"], input=one, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


_UID_IR = r"""@_ZN08NumbaEnv4main4calleB{L}v{U}B2xyEd = common global ptr null
@".const.missing Environment: _ZN08NumbaEnv4main4calleB{L}v{U}B2xyEd" = internal constant [{N} x i8] c"missing Environment: _ZN08NumbaEnv4main4calleB{L}v{U}B2xyEd\00"

define i32 @_ZN4main5entryB2v1B2xyEd(ptr noalias %retptr, ptr noalias %excinfo, double %x) {
entry:
  %r = call i32 @_ZN4main4calleB{L}v{U}B2xyEd(ptr %retptr, ptr %excinfo, double %x)
  %s = call i32 @_ZN4main6externB3v42B2xyEd(ptr %retptr, ptr %excinfo, double %x)
  ret i32 %r
}

define i32 @_ZN4main4calleB{L}v{U}B2xyEd(ptr noalias %retptr, ptr noalias %excinfo, double %x) {
entry:
  %e = load ptr, ptr @_ZN08NumbaEnv4main4calleB{L}v{U}B2xyEd, align 8
  %m = load i8, ptr @".const.missing Environment: _ZN08NumbaEnv4main4calleB{L}v{U}B2xyEd", align 1
  store double %x, ptr %retptr, align 8
  ret i32 0
}

declare i32 @_ZN4main6externB3v42B2xyEd(ptr, ptr, double)
"""


def _uid_module(uid: str) -> str:
    tag = f"v{uid}"
    message = f"missing Environment: _ZN08NumbaEnv4main4calleB{len(tag)}{tag}B2xyEd"
    return _UID_IR.replace("{L}", str(len(tag))).replace("{U}", uid).replace("{N}", str(len(message) + 1))


def _callee_names(text: str) -> set[str]:
    return set(re.findall(r"@_ZN4main4calle\w+", text))


def test_numba_uids_are_renumbered_in_module_order() -> None:
    """Numba's function uids count what the process compiled before; the module must not depend on them."""
    one = make_portable(_uid_module("29"), "_ZN4main5entryB2v1B2xyEd", name="f").text
    two = make_portable(_uid_module("1234"), "_ZN4main5entryB2v1B2xyEd", name="f").text
    assert one == two
    assert _callee_names(one) and all(re.fullmatch(r"@_ZN4main4calleB15u1h[0-9a-f]{12}B2xyEd", n)
                                      for n in _callee_names(one)), _callee_names(one)
    assert "v29" not in one
    # a declared (external) function keeps its name: it is resolved by name when the module is loaded
    assert "declare i32 @_ZN4main6externB3v42B2xyEd(" in one
    size, message = re.search(r'\[(\d+) x i8\] c"(missing Environment: [^"]*)\\00"', one).groups()
    assert int(size) == len(message) + 1 and "v29" not in message
    tool = shutil.which("llvm-as-15")
    assert tool is not None, "llvm-as-15 (part of the Enzyme toolchain) is not installed"
    result = subprocess.run([tool, "-o", "/dev/null", "-"], input=one, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_renumbered_names_differ_between_different_modules() -> None:
    """Modules linked together (LAPACK, custom rules) must not give one name to two different functions."""
    one = make_portable(_uid_module("29"), "_ZN4main5entryB2v1B2xyEd", name="f").text
    other = _uid_module("29").replace("store double %x, ptr %retptr", "store double 2.0, ptr %retptr")
    two = make_portable(other, "_ZN4main5entryB2v1B2xyEd", name="f").text
    assert _callee_names(one) and not _callee_names(one) & _callee_names(two)


_SCRIPT = textwrap.dedent("""
    import hashlib, json, re, sys
    import numpy as np
    import numba
    import pyjlad
    from pyjlad import toolchain
    from pyjlad.engines import embedded
    from pyjlad.export import export, numba_argtypes

    keys = []
    load = embedded._load_library

    def observed(key, *args, **kwargs):
        keys.append(key)
        return load(key, *args, **kwargs)

    embedded._load_library = observed
    if sys.argv[1] == "warm":
        def refuse(*a, **k):
            raise SystemExit("opt was run although the gradient was cached")
        toolchain.Toolchain.run = refuse

    @numba.njit
    def column_sines(a):
        return np.sum(np.sin(np.sum(a, axis=0)))

    @numba.njit
    def checked_square(x, n):
        if n < 0:
            raise ValueError("n must be non-negative, got " + str(n))
        return x * x * n

    functions = {"column_sines": (column_sines, (np.arange(6.0).reshape(3, 2) / 7.0,)),
                 "checked_square": (checked_square, (1.5, 3))}
    out = {}
    for name in sys.argv[2].split(","):
        func, args = functions[name]
        before = [np.array(v, copy=True) for v in args]
        text = export(func, numba_argtypes(args)).module.text
        grad = pyjlad.gradient(func, *args)
        assert all(np.array_equal(v, b) for v, b in zip(args, before))
        out[name] = {"sha": hashlib.sha256(text.encode()).hexdigest(), "grad": np.asarray(grad).tolist(),
                     "bytes": sorted(set(re.findall(r"@\\.bytes\\.[-\\w.]+", text)))}
    out["keys"] = keys
    print(json.dumps(out))
""")


#: Hand-derived gradients: d/da sum(sin(sum(a, axis=0))) = cos(column sums) in every row; d/dx x*x*n = 2*x*n.
_EXPECTED = {"column_sines": np.broadcast_to(np.cos(np.sum(np.arange(6.0).reshape(3, 2) / 7.0, axis=0)), (3, 2)),
             "checked_square": 2 * 1.5 * 3}


def _cold_then_warm(cache: Path, names: str) -> tuple[dict, dict]:
    """Run the script on ``names`` (comma-separated) in a process, then in another with another hash seed
    that refuses to run ``opt``; their outputs."""
    results = []
    for mode, seed in (("cold", "1"), ("warm", "2")):  # two seeds: Python's hash() of bytes differs
        env = {**os.environ, "PYJLAD_GRADIENT_CACHE_DIR": str(cache), "PYTHONHASHSEED": seed,
               "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-c", _SCRIPT, mode, names], env=env, capture_output=True, text=True,
                             timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return results[0], results[1]


@pytest.mark.parametrize("name", sorted(_EXPECTED))
def test_second_process_with_another_hash_seed_hits_the_disk_cache(tmp_path: Path, name: str) -> None:
    cold, warm = _cold_then_warm(tmp_path, name)
    assert cold[name]["bytes"], f"{name} no longer holds a string constant: the shape under test is gone"
    assert cold[name]["sha"] == warm[name]["sha"], (cold[name]["bytes"], warm[name]["bytes"])
    assert cold["keys"] and cold["keys"] == warm["keys"]
    for result in (cold, warm):
        np.testing.assert_allclose(result[name]["grad"], _EXPECTED[name], rtol=1e-12)


def test_a_gradient_found_on_disk_does_not_rename_the_next_function(tmp_path: Path) -> None:
    """Numba's uids count what the process compiled: the warm process, finding the first gradient on
    disk, compiles less before the second, whose callees (str(n), string concatenation) then had other
    uids in their names, so the second missed the cache although nothing about it had changed."""
    names = ",".join(sorted(_EXPECTED))
    cold, warm = _cold_then_warm(tmp_path, names)
    assert len(cold["keys"]) == 2 and cold["keys"] == warm["keys"]
    for name in _EXPECTED:
        assert cold[name]["sha"] == warm[name]["sha"], name
        for result in (cold, warm):
            np.testing.assert_allclose(result[name]["grad"], _EXPECTED[name], rtol=1e-12)
