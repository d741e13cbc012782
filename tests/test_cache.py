"""The on-disk cache: reuse across processes, corruption detected, safe under concurrency."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pyjlad import cache


@pytest.fixture
def cache_dir(monkeypatch, tmp_path) -> Path:
    monkeypatch.setattr(cache, "cache_dir", lambda: tmp_path)
    return tmp_path


def test_builds_once_then_reads(cache_dir: Path) -> None:
    calls = []

    def build() -> bytes:
        calls.append(1)
        return b"payload"

    key = cache.cache_key("a", "b")
    assert cache.get_or_build(key, build) == b"payload"
    assert cache.get_or_build(key, build) == b"payload"
    assert len(calls) == 1
    assert cache.cache_key("ab", "") != cache.cache_key("a", "b")


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupted_entry_is_rebuilt_never_loaded(cache_dir: Path, damage: str) -> None:
    key = cache.cache_key("corrupt", damage)
    cache.get_or_build(key, lambda: b"good bytes")
    path = next(cache_dir.rglob(f"{key}.bin"))
    blob = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(blob[:-3])
    elif damage == "flip":
        path.write_bytes(blob[:-1] + bytes([blob[-1] ^ 0xFF]))
    else:
        path.write_bytes(b"not a cache entry")
    assert cache.get_or_build(key, lambda: b"rebuilt") == b"rebuilt"
    assert cache.get_or_build(key, lambda: b"never") == b"rebuilt"


def _worker(args) -> bytes:
    directory, key, counter = args
    cache.cache_dir = lambda: Path(directory)  # in the child process only

    def build() -> bytes:
        with open(counter, "a") as fh:
            fh.write("x")
        return b"shared"

    return cache.get_or_build(key, build)


def test_concurrent_processes_build_once(tmp_path: Path) -> None:
    counter = tmp_path / "builds.txt"
    key = cache.cache_key("concurrent")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.map(_worker, [(str(tmp_path / "c"), key, str(counter))] * 8)
    assert results == [b"shared"] * 8
    assert counter.read_text() == "x"


def test_second_process_skips_enzyme(tmp_path: Path) -> None:
    """A fresh process finds the gradient on disk and never runs opt."""
    script = textwrap.dedent("""
        import sys
        import numpy as np, pyjlad
        from pyjlad import toolchain
        if sys.argv[1] == "warm":
            def refuse(*a, **k):
                raise SystemExit("opt was run although the gradient was cached")
            toolchain.Toolchain.run = refuse
        def f(x):
            return np.sum(np.cos(x) * x)
        x = np.linspace(0.0, 1.0, 7)
        g = pyjlad.gradient(f, x)
        assert np.allclose(g, np.cos(x) - np.sin(x) * x), g
        print("ok")
    """)
    env = dict(os.environ)
    env["PYJLAD_GRADIENT_CACHE_DIR"] = str(tmp_path)
    for mode in ("cold", "warm"):
        out = subprocess.run([sys.executable, "-c", script, mode], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "ok"
    assert list(tmp_path.rglob("*.bin"))
