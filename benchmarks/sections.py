"""Sections of ``RESULTS.md`` produced by their own benchmark scripts, each in a fresh process.

``suite.py`` appends every section to the table it measures; ``suite.py --section NAME``
re-runs one section and replaces only its block in the existing ``RESULTS.md`` (each
block is delimited by ``<!-- section: NAME -->`` and ``<!-- end section: NAME -->``),
so a section measured on an idle machine need not wait for the whole suite. Every
block states the command, machine, versions and load it was measured under.

>>> replace_section("a\\n<!-- section: x -->\\nold\\n<!-- end section: x -->\\nb\\n", "x", "new")
'a\\n<!-- section: x -->\\nnew\\n<!-- end section: x -->\\nb\\n'
>>> replace_section("a\\n", "x", "new")
'a\\n\\n<!-- section: x -->\\nnew\\n<!-- end section: x -->\\n'
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: name -> the benchmark scripts (with arguments) whose standard output makes up the section.
SECTIONS: dict[str, list[list[str]]] = {
    "numba-calls": [
        ["numba_call_overhead.py"],
        ["per_sample_gradients.py", "--n", "100000", "--d", "16"],
    ],
    "parallel": [
        ["parallel_gradients.py", "--voxels", "20000", "--pairs", "2000", "--cells", "1000000", "--grid", "1024",
         "--samples", "20000", "--repeat", "3"],
    ],
    "parallel-hvp": [
        ["parallel_hvp.py", "--voxels", "20000", "--pairs", "2000", "--cells", "1000000", "--grid", "1024",
         "--samples", "20000", "--repeat", "3"],
        ["stencil_layouts.py", "--grid", "1024", "--repeat", "3"],
    ],
    "checkpointing": [
        ["checkpointing.py", "--lorenz-steps", "10000000", "--heat-steps", "100000", "--plain-steps", "1000000"],
    ],
    "vector-mode": [
        ["vector_mode.py", "--n", "64"],
        ["vector_overhead.py", "--n", "64", "--chunk", "32"],
    ],
    "tapes": [
        ["tape_bytes.py"],
        ["stencil_adjoint.py"],
        ["temporaries.py"],
    ],
    "hvp-tapes": [
        ["hvp_tapes.py", "--n", "20000"],
    ],
    "build-time": [
        ["build_time.py", "--repeat", "2"],
    ],
    "host-target": [
        ["host_target.py", "--repeats", "7"],
    ],
}


def run_section(name: str) -> str:
    """Run the scripts of section ``name`` in fresh processes and return their output as markdown."""
    if name not in SECTIONS:
        raise SystemExit(f"unknown section {name!r}; sections: {', '.join(SECTIONS)}")
    parts = [f"_Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}._"]
    root = HERE.parent
    for script, *args in SECTIONS[name]:
        done = subprocess.run([sys.executable, str(HERE / script), *args], cwd=root, check=True,
                              capture_output=True, text=True, env=_env(root))
        parts.append(done.stdout.strip())
    return "\n\n".join(parts)


def _env(root: Path) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    return env


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with section ``name``'s block holding ``body`` (appended when it has none)."""
    start, end = f"<!-- section: {name} -->", f"<!-- end section: {name} -->"
    block = f"{start}\n{body}\n{end}"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        return head + block + rest.split(end, 1)[1]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def update_results(name: str, results: Path = HERE / "RESULTS.md") -> str:
    """Re-measure section ``name`` and write it into ``results``; return the section's markdown."""
    body = run_section(name)
    results.write_text(replace_section(results.read_text() if results.exists() else "", name, body))
    return body
