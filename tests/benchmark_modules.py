"""The benchmark scripts whose kernels the tests share, loaded as modules (once each)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@functools.cache
def load(filename: str) -> ModuleType:
    """``benchmarks/<filename>`` as a module named after it (its kernels compiled once per test session)."""
    name = filename.removesuffix(".py") + "_kernels"
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
