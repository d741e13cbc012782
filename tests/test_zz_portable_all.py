"""Every module the test suite exported (wrappers included) is accepted by LLVM 15, 16, 19 and 22.

This file runs last (pytest collects test files in name order) and checks what
the other tests recorded (``conftest.py`` fills ``cases.EXPORTED``).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from cases import EXPORTED


@pytest.mark.parametrize("version", (15, 16, 19, 22))
def test_every_exported_module_is_portable(version: int) -> None:
    tool = shutil.which(f"llvm-as-{version}")
    if tool is None:
        pytest.skip(f"llvm-as-{version} is not installed (apt-get install llvm-{version})")
    if len(EXPORTED) < 20:
        pytest.skip("run the whole suite: this checks the modules the other tests exported")
    failures = []
    for name, text in EXPORTED.items():
        result = subprocess.run([tool, "-o", "/dev/null", "-"], input=text, capture_output=True, text=True)
        if result.returncode != 0:
            failures.append(f"{name}: {result.stderr.strip()[:300]}")
    assert not failures, "\n".join(failures)
