"""pyjlad's layering, read from the source with ``ast``: the vocabulary at the bottom, one activity enum.

``pyjlad/activity.py`` (modes, annotations, :class:`~pyjlad.activity.Activity`) imports nothing of
pyjlad but ``errors``, as EnzymeCore sits below Enzyme; ``pyjlad/sweep.py`` (what a transform asks
an engine for) sits on it and below the engines. And activities are spelled ``Activity.DUP``, not
``"dup"``: one vocabulary, not a second one of strings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pyjlad"

#: The string values of the activities (``Activity``'s members), which only ``activity.py`` spells.
ACTIVITY_VALUES = frozenset({"const", "diff", "diff_noneed", "active", "dup", "dupnoneed"})
#: Modules where one of those strings is a word of another vocabulary.
OTHER_VOCABULARIES = {
    "pyjlad.outputs": {"const"},  # the kind of one part of a function's output: "scalar", "array", "const"
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def pyjlad_imports(path: Path) -> set[str]:
    """The pyjlad modules ``path`` imports (relative imports resolved; ``from . import x`` gives ``pyjlad.x``).

    A name imported from a package counts as its submodule when one exists, else as the package.
    """
    name = module_name(path)
    package = name if _is_package(path) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "pyjlad")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pyjlad":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if _module_path(sub) is not None else target)
    return found


def _module_path(name: str) -> Path | None:
    relative = Path(*name.split(".")[1:])
    for candidate in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_closure(name: str) -> set[str]:
    """Every pyjlad module ``name`` imports, directly or through others.

    The packages' ``__init__`` modules that Python runs on the way to a submodule are not followed:
    ``pyjlad/__init__.py`` is the public facade, importing everything.
    """
    seen: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        path = _module_path(current)
        assert path is not None, f"no source for {current}"
        for imported in pyjlad_imports(path):
            if imported not in seen and imported != "pyjlad":
                seen.add(imported)
                todo.append(imported)
    return seen


def test_the_import_reader_sees_relative_and_absolute_imports() -> None:
    # The reader the checks below rely on: it must find what a module is known to import.
    assert {"pyjlad.engines.base", "pyjlad.sweep", "pyjlad.activity"} <= imported_closure("pyjlad.engines.embedded")
    assert "pyjlad.engines" in imported_closure("pyjlad.annotated")
    assert "pyjlad.activity" in pyjlad_imports(PACKAGE / "sweep.py")


def test_activity_is_the_bottom_of_the_dependency_graph() -> None:
    imported = imported_closure("pyjlad.activity")
    assert imported <= {"pyjlad.errors"}, (
        f"pyjlad/activity.py (the vocabulary) must import nothing of pyjlad but errors; it reaches {sorted(imported)}"
    )


def test_sweep_sits_below_the_engines() -> None:
    imported = imported_closure("pyjlad.sweep")
    assert imported <= {"pyjlad.activity", "pyjlad.errors", "pyjlad.shadow_guards"}, sorted(imported)


@pytest.mark.parametrize("module", ["pyjlad.activity", "pyjlad.sweep", "pyjlad.products", "pyjlad.product_args",
                                    "pyjlad.annotated", "pyjlad.transforms"])
def test_the_api_reaches_engines_only_through_their_package(module: str) -> None:
    # The public API asks pyjlad.engines for a compiled sweep; it does not reach into an engine.
    inside = {m for m in pyjlad_imports(_module_path(module)) if m.startswith("pyjlad.engines.")}
    assert not inside, f"{module} imports {sorted(inside)}"


def _activity_literals(text: str, module: str) -> list[tuple[int, str]]:
    """The string constants of ``text`` (module ``module``) that spell an activity (docstrings do not)."""
    allowed = OTHER_VOCABULARIES.get(module, set())
    return sorted((node.lineno, node.value) for node in ast.walk(ast.parse(text, module))
                  if isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value in ACTIVITY_VALUES and node.value not in allowed)


def test_activities_are_spelled_with_the_enum() -> None:
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {value!r}"
                 for path in sorted(PACKAGE.rglob("*.py")) if path.name != "activity.py"
                 for line, value in _activity_literals(path.read_text(), module_name(path))]
    assert not offenders, "use pyjlad.activity.Activity's members, not strings:\n" + "\n".join(offenders)


def test_the_literal_scan_finds_a_string_activity() -> None:
    # The scan above must be able to fail: comparisons with "dup" and "const" are found, a docstring is not,
    # and "const" is allowed only where it is a word of another vocabulary.
    text = '"""Docs mention "dup"."""\n\ndef f(act):\n    return act == "dup" or act in ("const",)\n'
    assert _activity_literals(text, "pyjlad.probe") == [(4, "const"), (4, "dup")]
    assert _activity_literals(text, "pyjlad.outputs") == [(4, "dup")]


#: The modules outside ``pyjlad/ir/`` that use regular expressions, and what their patterns read: none of
#: them reads LLVM IR text (the IR is read through ``pyjlad.ir``'s tokens and parsed items; issue 15).
#: A new entry needs a reason of the same kind; IR belongs to ``pyjlad.ir``.
REGEX_USERS = {
    "pyjlad.cache.layout": "cache file names (keys, shards, temporary files)",
    "pyjlad.engines.blas": "one BLAS function name",
    "pyjlad.engines.julia": "Julia's version output and juliacall's start-up error message",
    "pyjlad.export_abi": "a NumPy dtype name (float64 -> 64)",
    "pyjlad.refusals": "Numba's qualified names of implementations and Enzyme's diagnostics text",
    "pyjlad.stable_names": "the uid tags and .bytes.<hash> inside one name token (applied by pyjlad.ir.lexer)",
    "pyjlad.toolchain.runner": "the key lines of opt's error output (stderr)",
}


def imports_re(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name == "re" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "re":
            return True
    return False


def test_no_regular_expressions_over_ir_text_outside_the_ir_layer() -> None:
    users = {module_name(path) for path in PACKAGE.rglob("*.py")
             if not module_name(path).startswith("pyjlad.ir") and imports_re(ast.parse(path.read_text()))}
    assert users - REGEX_USERS.keys() == set(), "new regex users outside pyjlad/ir/: read IR through pyjlad.ir"
    assert REGEX_USERS.keys() - users == set(), "REGEX_USERS lists modules that no longer use re: remove them"
