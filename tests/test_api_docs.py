"""The API reference (``docs/api``, Sphinx autodoc over the docstrings) builds with warnings as errors
and documents every public name."""

from __future__ import annotations

import posixpath
import subprocess
import sys
from pathlib import Path

import pytest

import pyjlad
import pyjlad.config
import pyjlad.gpu

ROOT = Path(__file__).resolve().parents[1]


def _public_names() -> set[str]:
    names = {f"pyjlad.{n}" for n in pyjlad.__all__ if n != "__version__"}
    names |= {f"pyjlad.gpu.{n}" for n in pyjlad.gpu.__all__}
    names |= {f"pyjlad.config.{n}" for n in pyjlad.config.__all__}
    names |= {"pyjlad.interop.jax.to_jax", "pyjlad.interop.torch.to_torch", "pyjlad.log.timed"}
    return names


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("api")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs" / "api"), str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_the_reference_builds_without_warnings(built: Path) -> None:
    page = (built / "index.html").read_text()
    assert "Examples" in page and "pyjlad.gpu.vmap_grad" in page


def test_every_public_name_is_documented(built: Path) -> None:
    from sphinx.util.inventory import InventoryFile

    with open(built / "objects.inv", "rb") as fh:
        inventory = InventoryFile.load(fh, "", posixpath.join)
    entries = inventory.items() if hasattr(inventory, "items") else inventory.data.items()
    documented = {name for _, objects in entries for name in objects}
    missing = _public_names() - documented
    assert not missing, f"docs/api/index.rst does not document {sorted(missing)}"
