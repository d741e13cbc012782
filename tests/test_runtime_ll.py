"""The replacement runtime IR in package data (pyjlad/runtime/*.ll) and its loader.

Checks that every file is a module LLVM 15's ``llvm-as`` accepts (templates once filled with
the values pyjlad uses), that pyjlad's users (portable, pool, BLAS shims) get exactly the text
the files hold, that every symbol they name is there, and that the wheel ships every file.

Run as a script, ``python tests/test_runtime_ll.py OUT.json`` dumps every runtime value users
get (the proof that moving the IR out of Python strings changed no byte: the dump at the commit
before the move and after it are identical).
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import pytest
import tomllib

from pyjlad import address_comparisons, portable, runtime
from pyjlad.engines import blas, pool
from pyjlad.engines.driver import OOM_ENTER, OOM_LEAVE
from pyjlad.errors import IRLookupError
from pyjlad.ir import parse
from pyjlad.toolchain import find_opt

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_DIR = ROOT / "pyjlad" / "runtime"


def _pool_modules() -> dict[str, str]:
    """The pool's module for the capacities and thread keys pyjlad can use (the default first)."""
    return {f"cap={cap},key={key}": pool._pool_ir(cap, key)
            for cap in (pool.capacity(), 0, 1 << 16) for key in (0, 4095)}


@pytest.fixture(scope="module")
def llvm_as() -> Path:
    opt = find_opt()
    if opt is None:
        pytest.fail("LLVM 15 is not installed (opt-15 not found): the runtime IR cannot be checked")
    tool = opt.with_name(opt.name.replace("opt", "llvm-as"))
    assert tool.is_file(), f"{tool} (beside {opt}) is missing"
    return tool


def _assemble(tool: Path, text: str) -> None:
    proc = subprocess.run([str(tool), "-o", "/dev/null", "-"], input=text.encode(), capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()


@pytest.mark.parametrize("name", runtime.FILES)
def test_every_file_is_an_llvm15_module(llvm_as, name):
    _assemble(llvm_as, runtime.source(name))


@pytest.mark.parametrize("label", list(_pool_modules()))
def test_the_filled_pool_template_is_an_llvm15_module(llvm_as, label):
    _assemble(llvm_as, _pool_modules()[label])


@pytest.mark.parametrize("text", [runtime.source("lascl.ll"), pool._pool_ir(pool.capacity(), 0)],
                         ids=["lascl", "pool"])
def test_in_process_modules_verify_in_llvmlite(text):
    """The BLAS shims and the pool are compiled by llvmlite (Numba's LLVM), not LLVM 15."""
    llvm.parse_assembly(text).verify()


@pytest.mark.parametrize("name", runtime.FILES + runtime.TEMPLATES)
def test_every_file_says_what_it_replaces(name):
    """A header comment opens each file, naming every function the file defines."""
    lines = runtime.source(name).split("\n")
    header = "\n".join(lines[:next(k for k, line in enumerate(lines) if not line.startswith(";"))])
    assert len(header.splitlines()) >= 5
    if name in runtime.FILES:
        for symbol in runtime.definitions(name):
            assert symbol.lstrip("@").split(".")[0] in header, symbol


def test_the_directory_holds_exactly_the_listed_files():
    on_disk = {p.name for p in RUNTIME_DIR.glob("*.ll")}
    assert on_disk == set(runtime.FILES + runtime.TEMPLATES)


@pytest.mark.parametrize("name", runtime.FILES)
def test_files_parse_back_byte_for_byte(name):
    assert parse(runtime.source(name)).render() == runtime.source(name)


def test_portable_gets_the_loaded_text():
    nrt, cblas = runtime.definitions("nrt.ll"), runtime.definitions("cblas.ll")
    assert portable.PORTABLE_RUNTIME == {**nrt, **cblas}
    assert list(portable.PORTABLE_RUNTIME) == [*nrt, *cblas]
    assert portable._BLAS_RUNTIME == cblas
    assert portable._PORTABLE_RUNTIME_DECLS == {**runtime.declarations("nrt.ll"),
                                                **runtime.declarations("cblas.ll")}
    assert address_comparisons.ADDRESS_DEFINITION == runtime.definitions("address.ll")[address_comparisons.ADDRESS_FUNCTION]
    for symbol, text in portable.PORTABLE_RUNTIME.items():
        assert text in runtime.source("nrt.ll") or text in runtime.source("cblas.ll"), symbol


def test_blas_and_pool_get_the_loaded_text():
    assert blas._shim_ir() == runtime.source("lascl.ll")
    text = pool._pool_ir(123, 7)
    body = runtime.source("pool.ll").split("\n\n", 1)[1]  # after the header comment and its blank line
    assert text == "\n" + body.replace("${key}", "7").replace("${capacity}", "123").replace(
        "${min_class}", "16").replace("${max_class}", "36").replace(
        "${slots}", "16").replace("${classes}", "21").replace("${slot_count}", "336").replace(
        "${small_capacity}", "30").replace("${small_classes}", "12").replace("${small_bytes}", "32768")
    assert "$" not in text and ";" not in text.split("\n", 2)[1]


def test_runtime_dependencies_are_all_defined_or_declared():
    """make_portable copies a runtime definition with what it refers to: each must be available."""
    available = set(portable.PORTABLE_RUNTIME) | set(portable._PORTABLE_RUNTIME_DECLS)
    for symbol, text in portable.PORTABLE_RUNTIME.items():
        refs = portable._PORTABLE_RUNTIME_DEPS.get(symbol, set())
        assert refs <= available, (symbol, refs - available)
        assert refs == portable._references(text, symbol), symbol
    assert "@" + portable.RUNTIME_CALL_DTOR in portable._PORTABLE_RUNTIME_DECLS
    assert portable._PORTABLE_RUNTIME_DEPS["@NRT_MemInfo_call_dtor"] == {"@free", "@" + portable.RUNTIME_CALL_DTOR,
                                                                         "@pyjlad_varsize_dtor"}


_NATURAL_ALIGNMENT = {"double": 8, "float": 4, "i64": 8, "i32": 4}


@pytest.mark.parametrize("name", runtime.FILES)
def test_scalar_loads_and_stores_claim_their_type_s_alignment(name):
    """A load or store of a scalar claims the type's own alignment: less made the derivative's atomic adds
    into it (in a parallel loop) calls of libatomic's ``__atomic_compare_exchange``, which the JIT cannot
    link (the process died: np.linalg.norm in a prange loop); more would promise what no caller keeps."""
    for line in runtime.source(name).splitlines():
        words = line.replace(",", " ").split()
        if ("load" in words or "store" in words) and "align" in words and "atomic" not in words:
            kind = words[words.index("load") + 1] if "load" in words else words[words.index("store") + 1]
            want = _NATURAL_ALIGNMENT.get(kind)
            assert want is None or int(words[words.index("align") + 1]) == want, line


def test_every_blas_helper_has_a_definition_per_kind():
    for op in ("dot", "gemv", "gemm", "nrm2"):
        for code, (p, _) in portable._BLAS_KINDS.items():
            links: set = set()
            call = f"  %r = call i32 @numba_xx{op}(i8 {code}, i64 1)"
            assert portable.kind_specific_calls(call, links) == call.replace(f"@numba_xx{op}(", f"@numba_xx{op}.{p}(")
            assert not links  # BLAS: defined in the module, nothing to link
            assert f"@numba_xx{op}.{p}" in portable.PORTABLE_RUNTIME


def test_numba_runtime_functions_are_replaced():
    names = {"@NRT_incref", "@NRT_decref", "@NRT_MemInfo_call_dtor", "@NRT_MemInfo_alloc_aligned",
             "@NRT_MemInfo_alloc_safe_aligned", "@NRT_Allocate", "@NRT_Free", "@NRT_MemInfo_alloc",
             "@NRT_MemInfo_new_varsize", "@NRT_MemInfo_new_varsize_dtor", "@NRT_MemInfo_varsize_alloc",
             "@NRT_MemInfo_varsize_free"}
    assert names <= set(portable.PORTABLE_RUNTIME)
    # a list's growth stays undefined where pyjlad.list_growth cannot type it: Enzyme refuses it by name
    assert "@NRT_MemInfo_varsize_realloc" not in portable.PORTABLE_RUNTIME


def test_pool_defines_what_the_engine_resolves():
    functions = parse(pool._pool_ir(pool.capacity(), 0)).functions
    for name in (*pool._RENAMED.values(), OOM_ENTER, OOM_LEAVE, "pyjlad_pool_release", "pyjlad_pool_kept",
                 "pyjlad_pool_failed_bytes"):
        assert not functions["@" + name].is_declaration, name


def test_lascl_defines_what_the_engine_resolves():
    functions = runtime.module("lascl.ll").functions
    for p in "ds":
        assert not functions[f"@cblas_{p}lascl"].is_declaration
        assert functions[f"@pyjlad_lapack_{p}lascl_"].is_declaration


def test_the_alloc_functions_share_one_body():
    """nrt.ll writes the allocator's body five times (one per Numba entry point): kept in step."""
    module = runtime.module("nrt.ll")
    bodies = {name: module.functions[name].body for name in (
        "@NRT_MemInfo_alloc_aligned", "@NRT_MemInfo_alloc_safe_aligned", "@NRT_MemInfo_alloc",
        "@NRT_MemInfo_new_varsize", "@NRT_MemInfo_new_varsize_dtor")}
    first = next(iter(bodies.values()))
    assert all(body == first for body in bodies.values())


def _as_float(text: str) -> str:
    # a double's load or store claims 8-byte alignment, a float's 4 (see the alignment test above)
    text = "\n".join(line.replace("align 8", "align 4") if ("load double" in line or "store double" in line)
                     else line for line in text.split("\n"))
    return (text.replace("double", "float").replace("@cblas_d", "@cblas_s").replace(".f64", ".f32")
            .replace(".d(", ".s(").replace("dlascl", "slascl"))


def test_the_float_kinds_mirror_the_double_kinds():
    """cblas.ll and lascl.ll write each helper once per kind: the kinds differ only in the element type."""
    for name in ("cblas.ll", "lascl.ll"):
        functions = runtime.module(name).functions
        doubles = [s for s in functions if s.endswith(".d") or "dlascl" in s or "@cblas_d" in s or "f64" in s]
        assert doubles
        for symbol in doubles:
            twin = _as_float(symbol + "(").rstrip("(")
            assert _as_float(functions[symbol].render()) == functions[twin].render(), symbol


def test_fill_is_strict():
    with pytest.raises(KeyError):
        runtime.fill("pool.ll", key=0)
    with pytest.raises(ValueError):
        runtime._Template("@a$b ${x}").substitute(x=1)
    assert runtime._Template("@a$$b ${x}").substitute(x=1) == "@a$b 1"
    with pytest.raises(IRLookupError):
        runtime.source("missing.ll")


def test_the_wheel_ships_every_runtime_file():
    """pyproject's package data names every file of pyjlad/runtime (so a built wheel holds them)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = config["tool"]["setuptools"]["package-data"]["pyjlad"]
    for name in runtime.FILES + runtime.TEMPLATES:
        assert any(fnmatch.fnmatch(f"runtime/{name}", g) for g in globs), name


def dump() -> dict:
    """Every runtime value pyjlad's users get (JSON-ready)."""
    return {
        "PORTABLE_RUNTIME": list(portable.PORTABLE_RUNTIME.items()),
        "_PORTABLE_RUNTIME_DEPS": sorted((k, sorted(v)) for k, v in portable._PORTABLE_RUNTIME_DEPS.items()),
        "_PORTABLE_RUNTIME_DECLS": list(portable._PORTABLE_RUNTIME_DECLS.items()),
        "_BLAS_RUNTIME": list(portable._BLAS_RUNTIME.items()),
        "ADDRESS_DEFINITION": address_comparisons.ADDRESS_DEFINITION,
        "ADDRESS_FUNCTION": address_comparisons.ADDRESS_FUNCTION,
        "RUNTIME_CALL_DTOR": portable.RUNTIME_CALL_DTOR,
        "_BLAS_KINDS": portable._BLAS_KINDS,
        "pool_ir": {f"{cap},{key}": pool._pool_ir(cap, key)
                    for cap in (0, 1 << 16, 1 << 30, pool.capacity()) for key in (0, 1, 4095)},
        "blas_shim_canonical": str(llvm.parse_assembly(blas._shim_ir())),
        "pool_canonical": str(llvm.parse_assembly(pool._pool_ir(1 << 30, 3))),
    }


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(dump(), indent=1, sort_keys=True))
