"""``python -m pyjlad``: doctor, toolchain install, export."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyjlad.abi import FunctionABI


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyjlad", *args], capture_output=True, text=True, cwd=cwd)


def test_doctor_is_green_after_setup() -> None:
    out = _run("doctor")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[OK  ] engine embedded (default)" in out.stdout
    assert "LLVM version 15" in out.stdout


def test_doctor_fails_and_names_the_fix_when_the_plugin_is_missing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYJLAD_ENZYME_PLUGIN", str(tmp_path / "missing.so"))
    out = _run("doctor")
    assert out.returncode == 1
    assert "pyjlad toolchain install" in out.stdout


def test_toolchain_install_is_idempotent() -> None:
    out = _run("toolchain", "install")
    assert out.returncode == 0, out.stderr
    assert "Enzyme toolchain ready" in out.stdout


def test_export_writes_portable_ir_and_abi(tmp_path: Path) -> None:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent("""
        import math
        from numba import njit

        @njit
        def energy(x, k):
            s = 0.0
            for i in range(x.shape[0]):
                s += k * math.sin(x[i]) ** 2
            return s
    """))
    out = _run("export", "mymodel.py:energy", "--signature", "float64[::1], float64", "-o", "out", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    ll = tmp_path / "out" / "pyjlad_energy.ll"
    abi = FunctionABI.from_dict(json.loads((tmp_path / "out" / "pyjlad_energy.json").read_text()))
    assert abi.entry == "pyjlad_energy" and [a.kind for a in abi.args] == ["array", "scalar"]
    tool = shutil.which("llvm-as-15")
    if tool is None:
        pytest.skip("llvm-as-15 is not installed")
    check = subprocess.run([tool, "-o", "/dev/null", str(ll)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_export_reports_bad_functions(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def f(x):\n    return {'a': x}\n")
    out = _run("export", "bad.py:f", "--signature", "float64", cwd=tmp_path)
    assert out.returncode == 1
    assert "error:" in out.stderr and "real scalar" in out.stderr


def test_help_everywhere() -> None:
    for args in (["--help"], ["doctor", "--help"], ["toolchain", "install", "--help"], ["export", "--help"],
                 ["bench", "--help"]):
        out = _run(*args)
        assert out.returncode == 0 and "usage" in out.stdout


def test_export_for_the_gpu_writes_the_nvptx_module(tmp_path: Path) -> None:
    (tmp_path / "sample.py").write_text("import math\ndef f(x, k):\n    return math.sin(k * x)\n")
    out = _run("export", "sample.py:f", "--signature", "float64, float64", "--target", "nvptx", "-o", "gpu",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "gpu" / "pyjlad_f.nvptx.ll").read_text()
    assert "@__nv_sin(" in text and "@llvm.sin.f64" not in text  # libdevice, which CUDA.jl links
    bad = _run("export", "sample.py:f", "--signature", "float64[:], float64", "--target", "nvptx", cwd=tmp_path)
    assert bad.returncode == 1  # math.sin of an array does not compile: a clear error, no file


def test_doctor_json_is_the_same_report_as_data(tmp_path: Path, monkeypatch) -> None:
    report = json.loads(_run("doctor", "--json").stdout)
    assert report["ok"] is True and report["default_engine"] == "embedded"
    embedded = next(e for e in report["engines"] if e["name"] == "embedded")
    assert embedded["ok"] and embedded["default"] and "LLVM version 15" in embedded["detail"]
    assert {"pyjlad", "python", "numba", "llvmlite", "llvm", "numpy", "cache", "enzyme", "opt"} <= set(report)
    monkeypatch.setenv("PYJLAD_ENZYME_PLUGIN", str(tmp_path / "missing.so"))
    out = _run("doctor", "--json")
    assert out.returncode == 1 and json.loads(out.stdout)["ok"] is False


def _fake_benchmarks(folder: Path) -> Path:
    """Stand-ins for the benchmark scripts (what bench runs and passes is under test, not the benchmarks)."""
    from pyjlad.cli import _BENCHMARKS

    folder.mkdir()
    for name in _BENCHMARKS:
        (folder / name).write_text(textwrap.dedent(f"""
            import json, sys
            from pathlib import Path
            print("{name} ran", sys.argv[1:])
            if "--out" in sys.argv:
                out = Path(sys.argv[sys.argv.index("--out") + 1])
                out.mkdir(parents=True, exist_ok=True)
                (out / "results.json").write_text(json.dumps({{"quick": "--quick" in sys.argv}}))
        """))
    return folder


def test_bench_quick_writes_to_a_chosen_folder_and_prints_json(tmp_path: Path) -> None:
    scripts = _fake_benchmarks(tmp_path / "benchmarks")
    out = _run("bench", "--benchmarks", str(scripts), "--quick", "--out", str(tmp_path / "o"), "--json",
               cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)  # stdout holds the JSON document only
    assert document["results"] == {"quick": True} and document["out"] == str(tmp_path / "o")
    assert [s["script"] for s in document["scripts"]] == ["suite.py"]
    assert "suite.py ran" in out.stderr and not (scripts / "results.json").exists()


def test_bench_quick_never_writes_over_the_committed_results(tmp_path: Path) -> None:
    scripts = _fake_benchmarks(tmp_path / "benchmarks")
    out = _run("bench", "--benchmarks", str(scripts), "--quick", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "pyjlad-bench" / "results.json").is_file() and not (scripts / "results.json").exists()
    assert "== [1/1] benchmarks/suite.py --quick" in out.stdout


def test_the_suite_names_a_missing_peer_instead_of_a_traceback(tmp_path: Path) -> None:
    """The real ``benchmarks/suite.py``, one of its peers not importable (until 2026-12-07: a ModuleNotFoundError
    traceback when the ``bench`` extra, autograd among it, was not installed)."""
    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    code = (f"import sys; sys.path.insert(0, {str(benchmarks)!r}); import suite; suite.PEERS = ('jax', 'no_such_peer'); "
            f"sys.argv = ['suite.py', '--quick', '--out', {str(tmp_path)!r}]; suite.main()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "no_such_peer cannot be imported" in out.stderr and "pip install -e '.[bench]'" in out.stderr
    assert not list(tmp_path.iterdir())  # nothing measured, nothing written


def test_a_closed_pipe_is_no_traceback() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "pyjlad", "doctor"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # as `pyjlad doctor | head -1` does
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err


@pytest.mark.parametrize(("spec", "signature", "said"), [
    ("missing.py:f", "float64", "error: missing.py: no such file"),
    ("nomodule_here:f", "float64", "error: cannot import 'nomodule_here'"),
    ("m.py:g", "float64", "error: m has no 'g' (it defines: f, njit"),
    ("m.py:f", "float64[:", "error: --signature 'float64[:' is not a list of Numba types"),
])
def test_export_mistakes_are_one_error_line_not_a_traceback(tmp_path: Path, spec: str, signature: str,
                                                           said: str) -> None:
    """Each printed a Python traceback before (a user-style probe, 2026-12-04)."""
    (tmp_path / "m.py").write_text("from numba import njit\n\n@njit\ndef f(x):\n    return x * x\n")
    proc = _run("export", spec, "--signature", signature, "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode != 0
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
