"""A non-editable install is the whole library (issue 18, part 4).

The wheel is built offline from a copy of the build inputs (so the checkout gets no ``build/``),
installed into a fresh virtual environment and run from a directory outside the checkout, where
only the installed files can serve: the runtime IR, the Julia package that ``juliapkg.json``
points at, ``py.typed``, the license, the console script and ``--version``.

The new environment has no pip and no dependencies of its own: the wheel goes in with
``pip --python ... --no-deps`` and a ``.pth`` file appends this interpreter's site-packages
(numba, numpy, ...). A ``.pth`` line only adds a path: the ``.pth`` files in that folder (the
shared environment's editable install of pyjlad among them) are not run, so ``import pyjlad``
can only find the installed copy. ``venv --system-site-packages`` would not do: made from a
virtual environment's Python it shares the base interpreter's packages, not that environment's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "pyjlad")
VERSION = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "pyjlad" / "__init__.py").read_text(), re.M)[1]


def _check(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run ``cmd``; fail the test with its output when it exits non-zero."""
    out = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without anything that would put the checkout on ``sys.path``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory) -> Path:
    """The build inputs, copied out of the checkout."""
    src = tmp_path_factory.mktemp("src")
    for name in BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    return src


@pytest.fixture(scope="module")
def wheel(source_copy: Path, tmp_path_factory) -> Path:
    """A wheel built offline, with this environment's setuptools."""
    dist = tmp_path_factory.mktemp("dist")
    _check([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
            "--disable-pip-version-check", "--no-cache-dir", "-q", "-w", str(dist), str(source_copy)], env=_clean_env())
    (built,) = dist.glob("pyjlad-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory) -> Path:
    """A fresh virtual environment with the wheel installed; its ``bin/`` folder."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=False, symlinks=True)
    python = env_dir / "bin" / "python"
    _check([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
            "--disable-pip-version-check", "--no-cache-dir", "-q", str(wheel)], env=_clean_env())
    (purelib,) = (env_dir / "lib").glob("python*/site-packages")
    shared = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    shared = [p for p in shared if Path(p).is_dir()]
    (purelib / "zz_shared_environment.pth").write_text("".join(f"{p}\n" for p in shared))
    return env_dir / "bin"


def test_the_wheel_holds_every_file_of_the_package(wheel: Path, source_copy: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {p.relative_to(source_copy).as_posix() for p in (source_copy / "pyjlad").rglob("*") if p.is_file()}
    assert source - names == set(), "files of pyjlad/ that the wheel lacks"
    for must in ("pyjlad/juliapkg.json", "pyjlad/py.typed", "pyjlad/julia_project/Project.toml",
                 "pyjlad/julia_project/src/PyJlad.jl", "pyjlad/runtime/nrt.ll"):
        assert must in names
    assert {n for n in names if n.startswith("pyjlad/runtime/") and n.endswith(".ll")} == {
        f"pyjlad/runtime/{p.name}" for p in (ROOT / "pyjlad" / "runtime").glob("*.ll")}
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_the_wheel_states_its_license_and_version(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    info = f"pyjlad-{VERSION}.dist-info"
    metadata = archive.read(f"{info}/METADATA").decode()
    assert f"\nVersion: {VERSION}\n" in metadata
    assert "\nLicense-Expression: MIT\n" in metadata
    assert "\nLicense-File: LICENSE\n" in metadata
    assert archive.read(f"{info}/licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


_PROBE = textwrap.dedent("""
    import json, math, sys
    from importlib import resources
    from pathlib import Path

    import numpy as np
    from numba import njit

    import pyjlad
    from pyjlad.engines.julia import JULIA_PROJECT


    @njit
    def loss(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += math.sin(x[i]) * x[i]
        return s


    def juliapkg_paths():
        # juliapkg's own lookup (pyjuliapkg, src/juliapkg/deps.py: deps_files, find_requirements):
        # a juliapkg.json in a sys.path entry or one folder below it; "path" relative to that file.
        found = {}
        for entry in sys.path:
            root = Path(entry or ".")
            if not root.is_dir():
                continue
            for fn in [root / "juliapkg.json", *root.glob("*/juliapkg.json")]:
                if fn.is_file():
                    spec = json.loads(fn.read_text())["packages"].get("PyJlad")
                    if spec is not None:
                        found[str(fn.resolve())] = (str((fn.parent / spec["path"]).resolve()), spec["uuid"])
        return found


    x = np.linspace(-1.0, 2.0, 7)
    print(json.dumps({
        "file": pyjlad.__file__,
        "version": pyjlad.__version__,
        "gradient": pyjlad.gradient(loss, x).tolist(),
        "x": x.tolist(),
        "julia_project": str(JULIA_PROJECT.resolve()),
        "juliapkg": juliapkg_paths(),
        "runtime": str(resources.files("pyjlad.runtime").joinpath("nrt.ll")),
        "typed": str(resources.files("pyjlad").joinpath("py.typed")),
    }))
""")


def test_the_installed_package_differentiates_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    # A fresh gradient cache: the installed package compiles the gradient itself (Enzyme, its runtime IR).
    out = _check([str(installed / "python"), "-c", _PROBE], cwd=tmp_path,
                 env=_clean_env(PYJLAD_GRADIENT_CACHE_DIR=str(tmp_path / "gradients")))
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    site_packages = next((installed.parent / "lib").glob("python*/site-packages")).resolve()
    package = site_packages / "pyjlad"

    assert Path(probe["file"]).resolve() == package / "__init__.py"
    assert probe["version"] == VERSION
    x = np.linspace(-1.0, 2.0, 7)
    assert probe["x"] == x.tolist()
    np.testing.assert_allclose(probe["gradient"], np.cos(x) * x + np.sin(x), rtol=1e-13, atol=1e-15)
    assert any((tmp_path / "gradients").iterdir()), "the installed package compiled no gradient"

    assert Path(probe["runtime"]).resolve() == package / "runtime" / "nrt.ll"
    assert Path(probe["typed"]).is_file() and Path(probe["typed"]).resolve().parent == package

    # juliapkg finds the installed juliapkg.json (and no other) and its path names the shipped package.
    julia_project = package / "julia_project"
    assert probe["julia_project"] == str(julia_project)
    assert list(probe["juliapkg"]) == [str(package / "juliapkg.json")]
    (path, uuid), = probe["juliapkg"].values()
    assert path == str(julia_project)
    project = (julia_project / "Project.toml").read_text()
    assert re.search(r'^name = "PyJlad"$', project, re.M) and re.search(rf'^uuid = "{uuid}"$', project, re.M)
    assert (julia_project / "src" / "PyJlad.jl").is_file()


def test_the_installed_command_line_prints_its_version_and_name(installed: Path, tmp_path: Path) -> None:
    for cmd in ([str(installed / "pyjlad"), "--version"], [str(installed / "python"), "-m", "pyjlad", "--version"]):
        out = _check(cmd, cwd=tmp_path, env=_clean_env())
        assert out.stdout.strip() == f"pyjlad {VERSION}"
    usage = subprocess.run([str(installed / "pyjlad")], capture_output=True, text=True, cwd=tmp_path,
                           env=_clean_env())
    assert usage.returncode == 2 and usage.stderr.startswith("usage: pyjlad ")


def test_the_installed_bench_says_where_the_scripts_are(installed: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(installed / "python"), "-m", "pyjlad", "bench"], capture_output=True, text=True,
                         cwd=tmp_path, env=_clean_env())
    assert out.returncode == 2
    assert "bash scripts/run-bench.sh" in out.stderr and "--benchmarks CHECKOUT/benchmarks" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_installed_bench_runs_a_checkouts_scripts_with_the_installed_package(
        installed: Path, tmp_path: Path) -> None:
    from pyjlad.cli import _BENCHMARKS

    scripts = tmp_path / "benchmarks"
    scripts.mkdir()
    for name in _BENCHMARKS:
        (scripts / name).write_text(f"import pyjlad\nprint({name!r}, pyjlad.__file__)\n")
    out = _check([str(installed / "python"), "-m", "pyjlad", "bench", "--benchmarks", str(scripts)],
                 cwd=tmp_path, env=_clean_env())
    ran = [line.split() for line in out.stdout.splitlines() if not line.startswith("==")]
    assert [name for name, _ in ran] == list(_BENCHMARKS)
    assert all(Path(file).resolve().is_relative_to(installed.parent.resolve()) for _, file in ran)
