"""Static checks of the Julia engine, which has never executed (no Julia on pyjlad's build machines).

What Julia would receive is checked here for real: every ``.jl`` file parses
(tree-sitter's Julia grammar); the exact ``llvmcall`` module text parses with the
LLVM that Julia 1.12 embeds (LLVM 18, opaque pointers: checked with llvm-as 16 in
its default opaque mode and llvm-as 19), and its entry's parameters are the LLVM
types Julia 1.12 lowers PyJlad's llvmcall signature to; Julia 1.11's typed-pointer
form rejects it (why the engine requires 1.12); the GPU wrapper PyJlad.jl adds
parses too; and the Python side passes JSON text, Python scalars and shadows laid
out like their primals.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from cases import CASES
from numba import njit

from pyjlad.engines.julia import (
    JULIA_PROJECT,
    MIN_JULIA,
    MIN_OPENSSL,
    _julia_version,
    abi_json,
    array_spec,
    julia_module_text,
    julia_scalar,
    julia_status,
    openssl_conflict,
    parse_julia_version,
    shadow_like,
    shadow_twin,
    zero_shadow_constants,
)
from pyjlad.errors import UnsupportedFunctionError
from pyjlad.export import export, numba_argtypes
from pyjlad.targets.llvmcall import LIBC, LIBM, unresolvable_symbols

JL_FILES = sorted(JULIA_PROJECT.rglob("*.jl"))
PYJLAD_JL = (JULIA_PROJECT / "src" / "PyJlad.jl").read_text()
FIXTURES = JULIA_PROJECT / "test" / "fixtures"

# ----------------------------------------------------------- Julia syntax


def _syntax_errors(source: bytes) -> list[str]:
    ts = pytest.importorskip("tree_sitter", reason="pip install pyjlad[test] (tree-sitter)")
    tsj = pytest.importorskip("tree_sitter_julia", reason="pip install pyjlad[test] (tree-sitter-julia)")
    tree = ts.Parser(ts.Language(tsj.language())).parse(source)
    found: list[str] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            found.append(f"{'MISSING' if node.is_missing else 'ERROR'} {node.type} at {node.start_point}: "
                         f"{node.text[:80]!r}")
        stack.extend(node.children)
    return found


def test_the_julia_package_has_its_files() -> None:
    names = {p.relative_to(JULIA_PROJECT).as_posix() for p in JL_FILES}
    assert {"src/PyJlad.jl", "ext/PyJladCUDAExt.jl", "test/runtests.jl", "examples/ode_loss.jl"} <= names


@pytest.mark.parametrize("path", JL_FILES, ids=lambda p: p.relative_to(JULIA_PROJECT).as_posix())
def test_julia_file_parses(path: Path) -> None:
    assert _syntax_errors(path.read_bytes()) == []


@pytest.mark.parametrize("broken", ["function f(x)\n    x +\n", "f(x = [1, 2\n", "struct S{T\n end\n"])
def test_the_parser_check_catches_broken_julia(broken: str) -> None:
    assert _syntax_errors(broken.encode())


# ------------------------------------------------------------- Julia lint
#: fatou (PyPI), a Julia linter that needs no Julia; the package's config enables its opt-in rules.
FATOU_CONFIG = JULIA_PROJECT / "fatou.toml"


def _fatou() -> str:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    exe = shutil.which("fatou", path=path)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("fatou is not installed: scripts/setup.sh --tests installs pyjlad[test]")
        pytest.skip("pip install pyjlad[test] (fatou, the Julia linter)")
    return exe


def _fatou_findings(*paths: Path) -> list[str]:
    result = subprocess.run([_fatou(), "lint", "--config", str(FATOU_CONFIG), "--output", "json", "--color",
                             "never", *map(str, paths)], capture_output=True, text=True, timeout=120)
    findings = json.loads(result.stdout or "[]")
    assert (result.returncode != 0) == bool(findings), result.stderr
    return [f"{f['path']}: {f['rule']}: {f['message']['body']}" for f in findings]


def test_julia_files_pass_fatou() -> None:
    """Every finding fails, unless a `# fatou-ignore <rule>: <reason>` comment accepts it in the source."""
    assert _fatou_findings(JULIA_PROJECT) == []


def test_fatou_runs_the_opt_in_rules(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jl"
    bad.write_text("function f(x, unused)\n    y = 1\n    a, reverse = x\n    return reverse(a)\nend\n")
    rules = {line.split(": ")[1] for line in _fatou_findings(bad)}
    assert {"unused-argument", "unused-binding", "shadowed-base-name"} <= rules


def test_accepted_lint_findings_give_their_reason() -> None:
    for path in JL_FILES:
        for line in path.read_text().splitlines():
            if "fatou-ignore" in line:
                assert re.fullmatch(r"\s*# fatou-ignore [a-z-]+: \S.*", line), f"{path.name}: {line}"


# ------------------------------------------------- Julia performance hazards
# fatou has no rule for the hazards issue 19 names, so this walks tree-sitter's syntax tree for them:
# a non-const global read inside a function (type-unstable on every call), `@eval`/`eval` inside a
# function (world age: the new code is invisible to the caller), and containers of `Any`
# (`Any[]`, `Vector{Any}`, `Dict{Any,...}`...; `Vararg{Any,N}` specializes and is fine).

#: (file, function, finding) -> why it is accepted.
ACCEPTED_HAZARDS = {
    ("src/PyJlad.jl", "load_ir", "container of Any: Any[]"):
        "builds the argument specs once per load, before any call or differentiation; the specs become "
        "the type parameter Tuple{specs...}",
}
_CONTAINERS = {"Vector", "Array", "Dict", "Set", "Ref", "AbstractVector", "AbstractArray"}


def _tree(source: bytes):
    ts = pytest.importorskip("tree_sitter", reason="pip install pyjlad[test] (tree-sitter)")
    tsj = pytest.importorskip("tree_sitter_julia", reason="pip install pyjlad[test] (tree-sitter-julia)")
    return ts.Parser(ts.Language(tsj.language())).parse(source).root_node


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


def _names(node) -> set[str]:
    return {n.text.decode() for n in _walk(node) if n.type == "identifier"}


def _bound_names(node) -> set[str]:
    """Names an assignment target or a for binding introduces (``x``, ``a, b``, ``y::Int``)."""
    if node.type == "identifier":
        return {node.text.decode()}
    if node.type in ("open_tuple", "tuple_expression", "typed_expression"):
        return set().union(*(_bound_names(c) for c in node.children[:1 if node.type == "typed_expression" else None]))
    return set()


def _global_bindings(root) -> set[str]:
    """Non-const names assigned at the top level of the file or of a module in it."""
    found: set[str] = set()
    for scope in [root, *(n for n in _walk(root) if n.type == "module_definition")]:
        for child in scope.children:
            if child.type == "assignment":
                found |= _bound_names(child.children[0])
    return found


def _functions(root):
    """``(name, signature node, body nodes)`` of every long- and short-form function definition."""
    for node in _walk(root):
        if node.type == "function_definition":
            signature = next(c for c in node.children if c.type == "signature")
            yield _call_name(signature), signature, [c for c in node.children if c is not signature]
        elif node.type == "assignment" and node.children[0].type in ("call_expression", "where_expression"):
            yield _call_name(node.children[0]), node.children[0], node.children[2:]


def _call_name(signature) -> str:
    call = next((n for n in _walk(signature) if n.type == "call_expression"), signature)   # `function f end`
    return call.children[0].text.decode() if call.children else call.text.decode()


def _julia_hazards(source: bytes) -> set[tuple[str, str]]:
    """``(function, finding)`` for each hazard in ``source``."""
    root = _tree(source)
    globals_ = _global_bindings(root)
    found: set[tuple[str, str]] = set()
    for name, signature, body in _functions(root):
        nodes = [n for part in body for n in _walk(part)]
        local = _names(signature) | set().union(
            *(_bound_names(n.children[0]) for n in nodes if n.type in ("assignment", "for_binding")))
        for n in nodes:
            if n.type == "identifier" and n.text.decode() in globals_ - local:
                found.add((name, f"non-const global: {n.text.decode()}"))
            if n.type == "macro_identifier" and n.text.decode() == "@eval" or (
                    n.type == "call_expression" and n.children[0].text.decode() in ("eval", "Core.eval")):
                found.add((name, "eval in a function"))
        for n in [*_walk(signature), *nodes]:
            if n.type == "index_expression" and n.children[0].text.decode() == "Any":
                found.add((name, "container of Any: Any[]"))
            if (n.type == "parametrized_type_expression" and n.children[0].text.decode() in _CONTAINERS
                    and "Any" in [c.text.decode() for c in n.children[1].children]):
                found.add((name, f"container of Any: {n.text.decode()}"))
    return found


def test_julia_files_have_no_unaccepted_hazards() -> None:
    found = {(path.relative_to(JULIA_PROJECT).as_posix(), *hazard)
             for path in JL_FILES for hazard in _julia_hazards(path.read_bytes())}
    assert found == set(ACCEPTED_HAZARDS)


@pytest.mark.parametrize(("source", "expected"), [
    (b"k = 0.3\nf(x) = x * k\n", {("f", "non-const global: k")}),
    (b"module M\nw = [1.0]\nfunction g(x)\n    return x + w[1]\nend\nend\n", {("g", "non-const global: w")}),
    (b"const k = 0.3\nf(x) = x * k\n", set()),
    (b"data = [1.0]\nfunction loss(k, data)\n    s = 0.0\n    for (i, d) in enumerate(data)\n"
     b"        s += d * k\n    end\n    return s\nend\n", set()),
    (b"function load(ir)\n    @eval h() = $ir\nend\n", {("load", "eval in a function")}),
    (b"function load(ir)\n    Core.eval(Main, ir)\nend\n", {("load", "eval in a function")}),
    (b"function flat(xs)\n    out = Any[]\n    return out\nend\n", {("flat", "container of Any: Any[]")}),
    (b"flat(xs::Vector{Any}) = xs\n", {("flat", "container of Any: Vector{Any}")}),
    (b"function f(args::Vararg{Any,N}) where {N}\n    return args\nend\n", set()),
])
def test_the_hazard_check_finds_each_hazard(source: bytes, expected: set) -> None:
    assert _julia_hazards(source) == expected


# --------------------------------------------------------- llvmcall text

_ENTRY = re.compile(r"^define [^@\n]*?(\S+) @(\S+)\((.*)\)[^(\n]*\{$", re.MULTILINE)
#: The LLVM type Julia 1.12 gives each Julia type PyJlad.jl puts in the llvmcall signature
#: (julia src/cgutils.cpp bitstype_to_llvm: Ptr{T} -> ptr; Bool is never used, Numba passes i8).
JULIA_112_LLVM = {"double", "float", "i64", "i32", "i16", "i8", "ptr"}


def _entry_signature(text: str, entry: str) -> tuple[str, list[str]]:
    for ret, name, params in _ENTRY.findall(text):
        if name == entry:
            return ret, [p.strip().split(" ")[0] for p in params.split(",")]
    raise AssertionError(f"no definition of {entry}")


def _llvm_as(version: int, text: str, *flags: str) -> subprocess.CompletedProcess:
    tool = shutil.which(f"llvm-as-{version}")
    if tool is None:
        pytest.skip(f"llvm-as-{version} is not installed")
    return subprocess.run([tool, *flags, "-o", "/dev/null", "-"], input=text, capture_output=True, text=True)


@njit
def _flags(x, flag, n, u):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * n * u
    return s if flag else -s


@njit
def _matrix_sum(a, c):
    return np.sum(a * a) * c


@njit
def _inverse_sum(a):
    return np.sum(np.linalg.inv(a))


_CASES = [c for c in CASES if c.name in ("scalar_math", "sin_x_dot_x", "two_arrays", "numpy_reductions")]
_EXTRA = [("bool_int32_uint8", _flags, (np.ones(3), True, np.int32(3), np.uint8(2))),
          ("c_matrix", _matrix_sum, (np.ones((2, 3)), 2.0)),
          ("lapack_inv", _inverse_sum, (np.eye(3) + 0.1,))]
_EXPORTS = [(c.name, c.func, c.args) for c in _CASES] + _EXTRA


@pytest.fixture(scope="module", params=_EXPORTS, ids=[e[0] for e in _EXPORTS])
def exported_text(request):
    _, func, args = request.param
    exported = export(func, numba_argtypes(args))
    return exported, julia_module_text(exported)


@pytest.mark.parametrize("version", (16, 19))
def test_llvmcall_text_parses_with_opaque_pointers(exported_text, version: int) -> None:
    """Julia 1.12 embeds LLVM 18, opaque pointers only: llvm-as 16 (opaque by default) and 19 bracket it."""
    _, text = exported_text
    result = _llvm_as(version, text)
    assert result.returncode == 0, result.stderr


def test_julia_111_typed_pointers_reject_it(exported_text) -> None:
    """Why PyJlad requires Julia 1.12: 1.11's LLVM 16 context has typed pointers (JuliaLang/julia#54188)."""
    _, text = exported_text
    result = _llvm_as(16, text, "-opaque-pointers=0")
    assert result.returncode != 0 and "ptr type is only supported in -opaque-pointers mode" in result.stderr


def test_entry_signature_is_what_julia_112_lowers_the_llvmcall_to(exported_text) -> None:
    """emit_llvmcall (julia src/ccall.cpp) rejects an entry whose parameter types differ from the signature's."""
    exported, text = exported_text
    abi = json.loads(abi_json(exported.abi))
    ret, params = _entry_signature(text, abi["entry"])
    assert ret == "i32"
    assert params[:2] == ["ptr", "ptr"]                      # retptr, excinfo: Ptr{Cvoid}
    assert params[2:] == [p["type"] for p in abi["params"]]
    assert set(params) <= JULIA_112_LLVM
    for arg in abi["args"]:                                  # PyJlad.jl knows every dtype it is handed
        assert f'"{arg["dtype"]}" =>' in PYJLAD_JL
        if arg["kind"] == "array":
            assert arg["layout"] in ("C", "F", "A")


def test_bool_and_unsigned_scalars_cross_as_signed_integers_of_their_size() -> None:
    exported = export(_flags, numba_argtypes((np.ones(3), True, np.int32(3), np.uint8(2))))
    abi = json.loads(abi_json(exported.abi))
    scalars = [(a["dtype"], a["llvm_type"]) for a in abi["args"] if a["kind"] == "scalar"]
    assert scalars == [("bool", "i8"), ("int32", "i32"), ("uint8", "i8")]
    # PyJlad.jl maps i8 to Int8 and reinterprets Bool/UInt8 values to it (same size), never to Bool.
    assert '"i8" => Int8' in PYJLAD_JL and '"i1"' not in PYJLAD_JL
    assert "reinterpret(L, v)" in PYJLAD_JL


@pytest.mark.parametrize("name", ["sin_loop", "weighted", "rhs"])
def test_julia_test_fixtures_parse_and_match_their_abi(name: str) -> None:
    text = (FIXTURES / f"pyjlad_{name}.ll").read_text()
    abi = json.loads((FIXTURES / f"pyjlad_{name}.json").read_text())
    for version in (16, 19):
        result = _llvm_as(version, text)
        assert result.returncode == 0, result.stderr
    ret, params = _entry_signature(text, abi["entry"])
    assert ret == "i32" and params == ["ptr", "ptr", *[p["type"] for p in abi["params"]]]
    assert unresolvable_symbols(text) == []


def _device_wrapper(entry: str, result: str, params: list[str]) -> str:
    """The IR PyJlad.device_value appends, instantiated from PyJlad.jl's own template text."""
    template = re.search(r'wrapper = """\n(.*?)\n    """', PYJLAD_JL, re.DOTALL).group(1)
    decl = ", ".join(f"{t} %p{i + 1}" for i, t in enumerate(params))
    text = textwrap.dedent(template)
    for old, new in [("$(isempty(pass) ? \"\" : \", \")", ", " if params else ""), ("$names", result),
                     ("$decl", decl), ("$pass", decl), ("$E", entry)]:
        text = text.replace(old, new)
    assert "$" not in text
    return text


@pytest.mark.parametrize("version", (16, 19))
def test_gpu_wrapper_ir_parses(version: int) -> None:
    text = (FIXTURES / "pyjlad_rhs.ll").read_text()
    wrapper = _device_wrapper("pyjlad_rhs", "double", ["double", "double", "double"])
    result = _llvm_as(version, text + wrapper)
    assert result.returncode == 0, result.stderr


# ------------------------------------------------------------ Python side


@njit
def _uses_blas(a, b):
    return np.dot(a, b).sum()


def test_functions_calling_blas_are_refused_before_julia() -> None:
    a = np.ones((3, 3))
    exported = export(_uses_blas, numba_argtypes((a, a)))
    with pytest.raises(UnsupportedFunctionError, match="Julia's JIT cannot resolve"):
        julia_module_text(exported)


def test_numba_fatal_error_becomes_abort_and_lapack_loops_are_linked() -> None:
    text = julia_module_text(export(_inverse_sum, numba_argtypes((np.eye(3) + 0.1,))))
    assert "define internal i32 @numba_fatal_error()" in text and "declare void @abort()" in text
    assert "declare i32 @numba_fatal_error" not in text
    assert unresolvable_symbols(text) == []


def test_unresolvable_symbols() -> None:
    text = ("declare double @sin(double)\ndeclare float @sinf(float)\ndeclare ptr @malloc(i64)\n"
            "declare double @llvm.exp.f64(double)\ndeclare void @numba_xxgemm(ptr)\n"
            'declare i32 @"cblas_ddot"(i32)\n')
    assert unresolvable_symbols(text) == ["numba_xxgemm", "cblas_ddot"]


def test_julia_and_python_share_the_resolvable_symbols() -> None:
    libm = re.search(r'const LIBM = Set\(split\("""(.*?)"""\)\)', PYJLAD_JL, re.DOTALL).group(1).split()
    libc = re.findall(r'"(\w+)"', re.search(r"const LIBC = Set\(\[(.*?)\]\)", PYJLAD_JL).group(1))
    assert set(libm) == LIBM and set(libc) == LIBC


def test_the_abi_crosses_as_json_text() -> None:
    exported = export(_flags, numba_argtypes((np.ones(3), True, np.int32(3), np.uint8(2))))
    text = abi_json(exported.abi)
    assert isinstance(text, str)
    data = json.loads(text)
    assert data["format"] == "pyjlad-abi/1" and data["entry"] == exported.abi.entry
    assert "load_ir(ir::AbstractString, abi_json::AbstractString)" in PYJLAD_JL


@pytest.mark.parametrize("value, expected", [
    (np.bool_(True), True), (False, False), (np.uint8(200), 200), (np.int32(-3), -3),
    (np.uint64(2**63 + 1), 2**63 + 1), (np.float32(1.5), 1.5), (2.25, 2.25),
])
def test_scalars_cross_as_python_scalars(value, expected) -> None:
    got = julia_scalar(value)
    assert got == expected and type(got) is type(expected)


def test_non_real_scalars_are_refused() -> None:
    with pytest.raises(TypeError, match="bool, integer and real"):
        julia_scalar(1 + 2j)


_LAYOUTS = [
    lambda: np.arange(12.0),
    lambda: np.arange(12.0).reshape(3, 4),
    lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    lambda: np.arange(24.0).reshape(4, 6)[::2, 1::2],
    lambda: np.arange(12.0)[::-1],
    lambda: np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)[:, ::-1, ::2],
    lambda: np.array(3.0),
]


@pytest.mark.parametrize("make", _LAYOUTS)
def test_shadow_like_has_its_primals_layout(make) -> None:
    x = make()
    s = shadow_like(x)
    assert array_spec(s)[1:] == array_spec(x)[1:]
    assert not np.shares_memory(s, x) and not s.any()


@pytest.mark.parametrize("make", _LAYOUTS)
def test_a_shadow_of_another_layout_gets_a_twin_and_its_values_back(make) -> None:
    x = make()
    shadow = np.ascontiguousarray(np.arange(x.size, dtype=x.dtype).reshape(x.shape))
    before = shadow.copy()
    twin, write_back = shadow_twin(x, shadow)
    assert array_spec(twin)[1:] == array_spec(x)[1:]
    np.testing.assert_array_equal(twin, before)             # accumulating sweeps see the shadow's values
    twin += 1.0                                             # what the sweep adds
    write_back()
    np.testing.assert_array_equal(shadow, before + 1.0)


def test_a_shadow_laid_out_like_its_primal_is_passed_as_is() -> None:
    x = np.arange(12.0).reshape(3, 4)
    shadow = np.zeros_like(x)
    twin, _ = shadow_twin(x, shadow)
    assert twin is shadow


def test_c_ordered_arrays_reach_julia_with_row_major_strides() -> None:
    """PyJlad.jl's C-layout check accepts exactly these strides (contiguous in the last axis first)."""
    x = np.arange(24.0).reshape(2, 3, 4)
    assert array_spec(x)[4:] == ((2, 3, 4), (12, 4, 1))
    assert array_spec(np.asfortranarray(x))[5] == (1, 2, 6)
    assert 'order === :C ? (N:-1:1) : (1:N)' in PYJLAD_JL


def test_aliased_constants_get_shadows_laid_out_like_them() -> None:
    from test_aliasing import pick

    x = np.arange(8.0)[::2]
    c = np.arange(12.0)[::3]
    abi = export(pick, numba_argtypes((x, c, True))).abi
    _, shadows = zero_shadow_constants(abi, ("dup", "const", "const"), (x, c, True), (np.zeros(4),))
    assert array_spec(shadows[1])[1:] == array_spec(c)[1:]


# ------------------------------------------------------------ packaging


def test_juliapkg_points_at_the_shipped_package_and_requires_julia_112() -> None:
    """juliapkg resolves "path" relative to the json file (pyjuliapkg src/juliapkg/deps.py, find_requirements)."""
    pkg_json = JULIA_PROJECT.parent / "juliapkg.json"
    spec = json.loads(pkg_json.read_text())
    pyjlad = spec["packages"]["PyJlad"]
    project = (pkg_json.parent / pyjlad["path"]).resolve()
    assert project == JULIA_PROJECT and project.is_relative_to(pkg_json.parent)
    toml = (project / "Project.toml").read_text()
    assert f'uuid = "{pyjlad["uuid"]}"' in toml and pyjlad["dev"] is True
    need = ".".join(map(str, MIN_JULIA))
    assert spec["julia"] == need and f'julia = "{need}"' in toml
    # That both files are in a built wheel, and that the installed juliapkg.json resolves to the
    # installed package: tests/test_packaging.py (builds and installs the wheel).


def test_julia_version_probe(tmp_path: Path) -> None:
    assert parse_julia_version("julia version 1.12.1\n") == (1, 12)
    assert parse_julia_version("julia version 1.11.7") == (1, 11) < MIN_JULIA
    assert parse_julia_version("nonsense") is None
    fake = tmp_path / "julia"
    fake.write_text(f"#!{sys.executable}\nprint('julia version 1.11.7')\n")
    fake.chmod(0o755)
    assert _julia_version(str(fake)) == (1, 11)


@pytest.mark.parametrize(("version", "conflicts", "shown"), [((3, 0, 0, 19, 0), True, "3.0.19"),
                                                             ((1, 1, 1, 23, 15), True, "1.1.1"),
                                                             ((3, 4, 0, 1, 0), True, "3.4.1"),
                                                             ((3, 5, 0, 0, 0), False, ""),
                                                             ((4, 0, 0, 1, 0), False, "")])
def test_python_openssl_older_than_3_5_is_reported_before_juliacall(version, conflicts, shown) -> None:
    # juliapkg (JuliaPy/pyjuliapkg, deps.openssl_compat) restricts Julia to 1.11 or older when Python's OpenSSL
    # is older than 3.5, which contradicts the engine's Julia 1.12+: say so, with the fix, instead of
    # letting juliacall fail to resolve.
    why = openssl_conflict(version)
    assert (why is not None) == conflicts
    if conflicts:
        assert "OpenSSL 3.5" in why and "fix:" in why and f"OpenSSL {shown};" in why


def test_julia_status_names_this_pythons_openssl_when_it_is_too_old() -> None:
    import ssl

    ok, detail = julia_status()
    if ssl.OPENSSL_VERSION_INFO[:2] < MIN_OPENSSL:  # the build machines: OpenSSL 3.0
        assert not ok and detail == openssl_conflict(ssl.OPENSSL_VERSION_INFO)
    else:
        assert "OpenSSL" not in detail
