"""Sphinx configuration of pyjlad's API reference (built from the docstrings).

Build: ``.venv/bin/python -m sphinx -W --keep-going -b html docs/api docs/api/_build``
(``tests/test_api_docs.py`` builds it with warnings as errors and checks that every
public name is documented).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pyjlad  # noqa: E402

project = "pyjlad"
release = version = pyjlad.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
html_theme = "alabaster"
exclude_patterns = ["_build"]
suppress_warnings = ["ref.python"]  # cross-references to NumPy/Numba/JAX types are not resolved offline
