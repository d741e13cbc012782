"""Each test tests/sampled_tests.py samples or leaves to the full run still exists (a renamed test would silently
run in the default run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sampled_tests import FULL_ONLY, SAMPLED

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("family", sorted(SAMPLED))
def test_each_sampled_test_is_a_parametrized_test_function(family):
    path, name = family.split("::")
    tree = ast.parse((ROOT / path).read_text())
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert name in functions, f"{family} is not a test function any more"
    decorators = [ast.unparse(d) for d in functions[name].decorator_list]
    assert any("parametrize" in d for d in decorators), f"{family} is not parametrized"
    assert SAMPLED[family] in (2, 3)


@pytest.mark.parametrize("nodeid", sorted(FULL_ONLY))
def test_each_test_left_to_the_full_run_exists(nodeid):
    """A renamed test would silently run in the default run again; a renamed variant likewise."""
    path, name = nodeid.split("::")
    function, _, variant = name.partition("[")
    tree = ast.parse((ROOT / path).read_text())
    assert function in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}, nodeid
    assert not variant or variant.rstrip("]").split("-")[0] in (ROOT / path).read_text(), nodeid
