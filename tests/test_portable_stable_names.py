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

from pyjlad.portable import make_portable

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
    func, args = functions[sys.argv[2]]
    before = [np.array(v, copy=True) for v in args]
    text = export(func, numba_argtypes(args)).module.text
    grad = pyjlad.gradient(func, *args)
    assert all(np.array_equal(v, b) for v, b in zip(args, before))
    out = {"sha": hashlib.sha256(text.encode()).hexdigest(), "keys": keys, "grad": np.asarray(grad).tolist(),
           "bytes": sorted(set(re.findall(r"@\\.bytes\\.[-\\w.]+", text)))}
    print(json.dumps(out))
""")


#: Hand-derived gradients: d/da sum(sin(sum(a, axis=0))) = cos(column sums) in every row; d/dx x*x*n = 2*x*n.
_EXPECTED = {"column_sines": np.broadcast_to(np.cos(np.sum(np.arange(6.0).reshape(3, 2) / 7.0, axis=0)), (3, 2)),
             "checked_square": 2 * 1.5 * 3}


@pytest.mark.parametrize("name", sorted(_EXPECTED))
def test_second_process_with_another_hash_seed_hits_the_disk_cache(tmp_path: Path, name: str) -> None:
    """One function per process: what a process compiled before also changes names (see the report)."""
    results = []
    for mode, seed in (("cold", "1"), ("warm", "2")):  # two seeds: Python's hash() of bytes differs
        env = {**os.environ, "PYJLAD_GRADIENT_CACHE_DIR": str(tmp_path), "PYTHONHASHSEED": seed,
               "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-c", _SCRIPT, mode, name], env=env, capture_output=True, text=True,
                             timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    cold, warm = results
    assert cold["bytes"], f"{name} no longer holds a string constant: the shape under test is gone"
    assert cold["sha"] == warm["sha"], (cold["bytes"], warm["bytes"])
    assert cold["keys"] and cold["keys"] == warm["keys"]
    for result in results:
        np.testing.assert_allclose(result["grad"], _EXPECTED[name], rtol=1e-12)
