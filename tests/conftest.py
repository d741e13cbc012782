"""Records every module the test suite exports, for the all-functions portability check."""

from __future__ import annotations

import pytest
from cases import EXPORTED

import pyjlad.export as export_module


@pytest.fixture(autouse=True, scope="session")
def _record_exported_modules():
    original = export_module._export

    def recording(func, argtypes):
        exported = original(func, argtypes)
        EXPORTED[f"{exported.name}{argtypes}"] = exported.module.text
        return exported

    export_module._export = recording
    yield
    export_module._export = original
