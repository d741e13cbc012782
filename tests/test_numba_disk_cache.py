"""Functions compiled with ``@njit(cache=True)`` differentiate in every process, not only the first.

In a process where Numba loads such a function from its disk cache, the function has machine code but no
IR ("Inspection disabled for cached code"); pyjlad took its IR from there and refused the function with
"entry function ... is not defined in the module". pyjlad now compiles a copy afresh in that case
(``pyjlad.export_compile.inspectable_compile_result``; a ``@cfunc`` compiles itself again, uncached). Each check runs in two fresh interpreters sharing a
Numba cache directory: the first fills Numba's cache, the second loads from it. Oracles: hand-derived
gradients.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

KERNELS = textwrap.dedent('''
    import numpy as np
    from numba import cfunc, njit

    @cfunc("float64(float64, float64)", cache=True)
    def c_callback(x, y):
        return x * x * y + np.sin(x)

    @njit(cache=True)
    def soft_norm(x):
        return np.sum(np.sqrt(x * x + 2.0))

    @njit("float64(float64[:], float64)", cache=True)
    def scaled_cubes(x, a):
        return a * np.sum(x ** 3)
''')

CALLS = textwrap.dedent('''
    import json, sys, warnings
    import numpy as np
    import pyjlad
    import kernels
    warnings.simplefilter("ignore")  # Numba's "Inspection disabled for cached code"
    x = np.array([1.0, -2.0, 0.5])
    gx, ga = pyjlad.grad(kernels.scaled_cubes, wrt=(0, 1))(x, 1.5)
    soft = pyjlad.grad(kernels.soft_norm)(x).tolist()
    unchanged = x.tolist() == [1.0, -2.0, 0.5]
    cx, cy = pyjlad.grad(kernels.c_callback, wrt=(0, 1))(0.5, 2.0)
    print(json.dumps({"soft_norm": soft, "callback": [cx, cy],
                      "cubes_x": gx.tolist(), "cubes_a": ga,
                      "from_cache": bool(kernels.soft_norm.stats.cache_hits), "unchanged": unchanged}))
''')


def _run(directory: Path) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(directory / "numba-cache"), "PYTHONPATH": str(directory)}
    done = subprocess.run([sys.executable, "-c", CALLS], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_function_numba_loads_from_its_disk_cache_differentiates(tmp_path: Path) -> None:
    (tmp_path / "kernels.py").write_text(KERNELS)
    x = np.array([1.0, -2.0, 0.5])
    first, second = _run(tmp_path), _run(tmp_path)
    assert not first["from_cache"] and second["from_cache"]  # the second process really loaded Numba's cache
    for result in (first, second):
        assert result["unchanged"]  # the caller's array, compared after both gradients
        np.testing.assert_allclose(result["soft_norm"], x / np.sqrt(x * x + 2.0), rtol=1e-14)
        np.testing.assert_allclose(result["cubes_x"], 1.5 * 3 * x ** 2, rtol=1e-14)
        np.testing.assert_allclose(result["cubes_a"], np.sum(x ** 3), rtol=1e-14)
        np.testing.assert_allclose(result["callback"], [2 * 0.5 * 2.0 + np.cos(0.5), 0.25], rtol=1e-14)
