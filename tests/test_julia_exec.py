"""The Julia engine's ``llvmcall`` modules, executed with the LLVM next to Julia's and compared with Numba.

Julia cannot be installed on pyjlad's build machines, so this does by hand what
``PyJlad.jl`` makes Julia do: it takes the exact module text the engine hands to
``Base.llvmcall((ir, entry), ...)`` (:func:`pyjlad.engines.julia.julia_module_text`),
appends a ``main`` that calls the entry with the LLVM values PyJlad.jl passes
(``_flatten``: null meminfo and parent, ``prod(shape)``, ``sizeof(T)``, the data
pointer at ``offset + 1`` of the wrapped buffer, shape, strides in bytes; scalars
converted to the exported dtype and reinterpreted to the same-sized LLVM integer;
a ``Ref{R}`` result slot and a null ``Ref{Ptr{Cvoid}}`` exception slot), and runs
it with ``lli`` of LLVM 16 (opaque pointers) and 19, which bracket the LLVM 18
that Julia 1.12 embeds. The harness writes the status word, the result slot,
the exception description Numba stored through ``excinfo`` and every array's
memory; each must equal what calling the Numba function itself gives. The GPU
form (``PyJlad.device_value``: the entry wrapped in IR that returns NaN when the
Numba code raised) is executed the same way, its wrapper instantiated from
PyJlad.jl's own template.
"""

from __future__ import annotations

import ctypes
import pickle
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from cases import CASES, Case
from numba import njit
from numba.core.ccallback import CFunc
from numba.core.registry import CPUDispatcher
from test_julia_static import _device_wrapper, _entry_signature

from pyjlad.engines.julia import JULIA_PROJECT, array_spec, julia_module_text
from pyjlad.errors import UnsupportedFunctionError
from pyjlad.export import export, numba_argtypes
from pyjlad.ir import parse
from pyjlad.targets.llvmcall import internalize

PYJLAD_JL = (JULIA_PROJECT / "src" / "PyJlad.jl").read_text()
#: lli of LLVM 16 (opaque pointers by default) and 19: Julia 1.12 embeds LLVM 18.
LLI_VERSIONS = (16, 19)

#: PyJlad.jl's DTYPES, as NumPy dtypes; and its LLVM_TYPES.
_JULIA_DTYPES = {"float64", "float32", "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8",
                 "bool", "none"}
_LLVM_INT = {"i64": "<q", "i32": "<i", "i16": "<h", "i8": "<b"}
_SIZE = {"double": 8, "float": 4, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "ptr": 8}


def test_the_harness_mirrors_pyjlad_jl() -> None:
    """What the harness passes is transcribed from these lines; if they change, the harness must too."""
    for line in (
        "C_NULL, C_NULL, Int64(prod(x.shape; init=1)), Int64(sizeof(T)),",
        "Ptr{Cvoid}(pointer(x.buffer, x.offset + 1)),",
        "Int64.(x.shape)..., (Int64.(x.strides) .* sizeof(T))...,",
        "@inline _flatten(::ScalarSpec{T,L}, x) where {T,L} = (_as_llvm(L, convert(T, x)),)",
        "@inline _as_llvm(::Type{L}, v) where {L} = reinterpret(L, v)",
        "ret = Ref{R === Nothing ? Int64 : R}()",
        "exc = Ref{Ptr{Cvoid}}(C_NULL)",
        "Base.llvmcall(($ir, $entry), Int32, Tuple{Ptr{Cvoid},Ptr{Cvoid},$(types...)},",
        "status == 0 || error(",
        "DataType[Ptr{Cvoid}, Ptr{Cvoid}, Int64, Int64, Ptr{Cvoid}, fill(Int64, 2N)...]",
        'return :(Base.llvmcall(($ir, "pyjlad.device.value"), $R, Tuple{$(types...)}, $(converted...)))',
    ):
        assert line in PYJLAD_JL, line
    for dtype in _JULIA_DTYPES:
        assert f'"{dtype}" =>' in PYJLAD_JL


# ------------------------------------------------------------------ the harness


def _hex_double(value: float) -> str:
    """An LLVM floating-point literal (``float`` constants are written as the double of the same value)."""
    return "0x" + struct.pack(">d", float(value)).hex().upper()


def _scalar_literal(value: Any, dtype: str, llvm: str) -> str:
    """``_as_llvm(L, convert(T, x))`` as an LLVM constant: the value's bits as the same-sized LLVM type."""
    if llvm in ("double", "float"):
        return f"{llvm} {_hex_double(np.dtype(dtype).type(value))}"
    bits = np.array(value).astype(dtype).tobytes()            # convert(T, x): Bool, UInt8, Int32...
    assert len(bits) == _SIZE[llvm], f"{dtype} passed as {llvm}"
    return f"{llvm} {struct.unpack(_LLVM_INT[llvm], bits)[0]}"  # reinterpret(L, v)


def _span(x: np.ndarray) -> bytes:
    """The bytes Julia's ``unsafe_wrap`` buffer of ``x`` holds (``numba_array(array_spec(x)...)``)."""
    address, length, *_ = array_spec(x)
    return ctypes.string_at(address, length * x.itemsize)


@dataclass
class _Call:
    """The LLVM ``main`` calling one entry as PyJlad.jl would, and how to read what it writes."""

    ir: str
    spans: list[int]          # byte length of each array's buffer, in argument order


def _harness(abi: dict, args: tuple[Any, ...], device: bool = False) -> _Call:
    """The ``main`` that calls ``abi["entry"]`` with ``args`` flattened as PyJlad.jl's ``_flatten`` does.

    Writes to stdout: i32 status, the result slot's bytes, i64 length and the
    bytes of the pickled exception Numba stored through excinfo (0 when none),
    then each array's buffer. With ``device``, calls ``pyjlad.device.value``
    instead and writes its result only.
    """
    globals_, body, values, spans = [], [], [], []
    params = iter(abi["params"])
    for index, (arg, value) in enumerate(zip(abi["args"], args)):
        if arg["kind"] == "scalar":
            param = next(params)
            values.append(_scalar_literal(value, arg["dtype"], param["type"]))
            continue
        roles = [next(params) for _ in range(5 + 2 * arg["ndim"])]
        _, length, _, offset, shape, strides = array_spec(value)
        data = _span(value)
        spans.append(len(data))
        escaped = "".join(f"\\{b:02X}" for b in data)
        globals_.append(f'@pyjlad.harness.buf{index} = internal global [{len(data)} x i8] c"{escaped}", align 64')
        body.append(f"  %data{index} = getelementptr inbounds i8, ptr @pyjlad.harness.buf{index}, "
                    f"i64 {offset * value.itemsize}")
        flat = ["ptr null", "ptr null", f"i64 {int(np.prod(shape))}", f"i64 {value.itemsize}", f"ptr %data{index}",
                *(f"i64 {n}" for n in shape), *(f"i64 {s * value.itemsize}" for s in strides)]
        assert [f.split(" ")[0] for f in flat] == [r["type"] for r in roles]
        values.extend(flat)
    result = abi["result"]
    if device:
        rtype = result["llvm_type"]
        lines = [*body, f"  %v = call {rtype} @pyjlad.device.value({', '.join(values)})",
                 f"  %slot = alloca {rtype}, align 8", f"  store {rtype} %v, ptr %slot",
                 f"  call i64 @write(i32 1, ptr %slot, i64 {_SIZE[rtype]})"]
        return _Call(_main(globals_, lines), [])
    rsize = 8 if result["dtype"] == "none" else np.dtype(result["dtype"]).itemsize   # Ref{R}, Ref{Int64} for none
    lines = [
        *body,
        f"  %ret = alloca [{rsize} x i8], align 8",
        f"  store [{rsize} x i8] zeroinitializer, ptr %ret, align 8",
        "  %exc = alloca ptr, align 8",
        "  store ptr null, ptr %exc, align 8",
        f"  %status = call i32 @{abi['entry']}(ptr %ret, ptr %exc{''.join(', ' + v for v in values)})",
        "  %st = alloca i32, align 4",
        "  store i32 %status, ptr %st",
        "  call i64 @write(i32 1, ptr %st, i64 4)",
        f"  call i64 @write(i32 1, ptr %ret, i64 {rsize})",
        # Numba's excinfo: a pointer to { ptr pickled, i32 length, ... } (numba/core/callconv.py).
        "  %e = load ptr, ptr %exc, align 8",
        "  %len = alloca i64, align 8",
        "  store i64 0, ptr %len",
        "  %raised = icmp ne ptr %e, null",
        "  br i1 %raised, label %describe, label %arrays",
        "describe:",
        "  %pickled = load ptr, ptr %e, align 8",
        "  %lenp = getelementptr inbounds { ptr, i32 }, ptr %e, i32 0, i32 1",
        "  %n32 = load i32, ptr %lenp, align 8",
        "  %n = sext i32 %n32 to i64",
        "  store i64 %n, ptr %len",
        "  call i64 @write(i32 1, ptr %len, i64 8)",
        "  call i64 @write(i32 1, ptr %pickled, i64 %n)",
        "  br label %done_exc",
        "arrays:",
        "  call i64 @write(i32 1, ptr %len, i64 8)",
        "  br label %done_exc",
        "done_exc:",
        *(f"  call i64 @write(i32 1, ptr @pyjlad.harness.buf{i}, i64 {n})"
          for i, n in zip([i for i, a in enumerate(abi["args"]) if a["kind"] == "array"], spans)),
    ]
    return _Call(_main(globals_, lines), spans)


def _main(globals_: list[str], lines: list[str]) -> str:
    return "\n".join(["", *globals_, "declare i64 @write(i32, ptr, i64)",
                      "define i32 @main() {", "entry:", *lines, "  ret i32 0", "}", ""])


def _lli(version: int, text: str) -> bytes:
    tool = shutil.which(f"lli-{version}")
    if tool is None:
        pytest.fail(f"lli-{version} is not installed (scripts/setup.sh --tests installs llvm-{version})")
    result = subprocess.run([tool, "-"], input=text.encode(), capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return result.stdout


@dataclass
class _Outcome:
    status: int
    result: bytes
    raised: tuple[type, tuple] | None
    arrays: list[bytes]


def _read(out: bytes, rsize: int, spans: list[int]) -> _Outcome:
    status = struct.unpack("<i", out[:4])[0]
    result = out[4:4 + rsize]
    pos = 4 + rsize
    (n,) = struct.unpack("<q", out[pos:pos + 8])
    pos += 8
    raised = None
    if n:
        # Numba pickles (exception class, args, location); loading it names the class, as Numba's dispatcher does.
        cls, exc_args, *_ = pickle.loads(out[pos:pos + n])  # noqa: S301 - bytes Numba wrote in this test
        raised = (cls, exc_args)
        pos += n
    arrays = []
    for size in spans:
        arrays.append(out[pos:pos + size])
        pos += size
    assert pos == len(out)
    return _Outcome(status, result, raised, arrays)


# ------------------------------------------------------------------ the oracle


def _numba(func: Any) -> Any:
    """The compiled function itself (an undecorated function is what pyjlad njit-compiles)."""
    return func if isinstance(func, (CPUDispatcher, CFunc)) else njit(func)


def _numba_outcome(func: Any, args: tuple[Any, ...]) -> tuple[Any, BaseException | None, list[bytes]]:
    """Numba's result (or exception) on copies of ``args`` laid out like them, and their spans afterwards."""
    copies = tuple(_same_layout_copy(a) if isinstance(a, np.ndarray) else a for a in args)
    try:
        value, error = _numba(func)(*copies), None
    except Exception as exc:  # noqa: BLE001 - the function's own exception is the expected outcome
        value, error = None, exc
    return value, error, [_span(c) for c in copies if isinstance(c, np.ndarray)]


def _same_layout_copy(x: np.ndarray) -> np.ndarray:
    """A copy of ``x``'s whole span (the bytes between its elements too), viewed with ``x``'s strides."""
    _, length, dtype, offset, shape, strides = array_spec(x)
    buffer = np.frombuffer(bytearray(_span(x)), dtype=dtype)
    return np.lib.stride_tricks.as_strided(buffer[offset:], shape=shape, strides=[s * x.itemsize for s in strides])


def _as_value(raw: bytes, dtype: str) -> Any:
    return None if dtype == "none" else np.frombuffer(raw, dtype=dtype)[0]


def _assert_same(got: Any, expected: Any, dtype: str) -> None:
    if dtype == "none":
        assert expected is None
    elif dtype.startswith("float"):
        # The same IR, compiled by another LLVM: equal to the last bit or within 1e-15 relative.
        assert got == expected or abs(got - expected) <= 1e-15 * abs(expected), (got, expected)
    else:
        assert got == expected and np.dtype(dtype).type(expected) == expected


# ------------------------------------------------------------------ the functions


@njit
def _flags(x, flag, n, u):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * n * u
    return s if flag else -s


@njit
def _unsigned_mix(a, b, k):
    return (a * 3 + b) ^ k


@njit
def _count_above(x, t):
    n = 0
    for v in x.flat:
        if v > t:
            n += 1
    return n


@njit
def _is_sorted(x):
    for i in range(1, x.shape[0]):
        if x[i - 1] > x[i]:
            return False
    return True


@njit
def _scale_in_place(a, c):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[i, j] = a[i, j] * c + i - j


@njit
def _matrix_sum(a, c):
    return np.sum(a * a) * c


@njit
def _inverse_sum(a):
    return np.sum(np.linalg.inv(a))


@njit
def _checked_log(x, y):
    if x <= 0.0:
        raise ValueError("x must be positive")
    return np.log(x) * y


@njit
def _checked_norm(x, limit):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > limit:
            raise OverflowError("element above the limit")
        s += x[i] * x[i]
    return s


@njit
def _float32_scalar(x, y):
    return x * y + np.float32(0.5)


_m = np.arange(1.0, 13.0).reshape(3, 4) / 7.0
_EXTRA = [
    Case("bool_int32_uint8", _flags, (np.linspace(0.5, 2.0, 5), True, np.int32(-3), np.uint8(200)), 0, None),
    Case("bool_false", _flags, (np.linspace(0.5, 2.0, 5), False, np.int32(3), np.uint8(2)), 0, None),
    Case("uint64_result", _unsigned_mix, (np.uint64(2**63 + 5), np.uint64(7), np.uint64(12345)), 0, None),
    Case("int_result_2d_F", _count_above, (np.asfortranarray(_m), 0.8), 0, None),
    Case("bool_result", _is_sorted, (np.array([1.0, 2.0, 2.0, 3.5]),), 0, None),
    Case("bool_result_false", _is_sorted, (np.array([1.0, 3.0, 2.0]),), 0, None),
    Case("none_result_mutates_C", _scale_in_place, (_m.copy(), 1.5), 0, None),
    Case("none_result_mutates_strided", _scale_in_place, (np.arange(48.0).reshape(6, 8)[1::2, ::-3], -0.5), 0, None),
    Case("c_matrix", _matrix_sum, (_m.copy(), 2.0), 0, None),
    Case("lapack_inv", _inverse_sum, (np.eye(3) + 0.1,), 0, None),
    Case("float32_scalars", _float32_scalar, (np.float32(1.25), np.float32(-3.5)), 0, None),
    Case("raises_scalar", _checked_log, (-1.0, 2.0), 0, None),
    Case("raises_not", _checked_log, (3.0, 2.0), 0, None),
    Case("raises_in_loop_strided", _checked_norm, (np.linspace(0.0, 4.0, 12)[::2], 2.5), 0, None),
]
_ALL = [*CASES, *_EXTRA]


@pytest.fixture(scope="module", params=_ALL, ids=[c.name for c in _ALL])
def case_module(request):
    """A case, its ABI and the exact llvmcall module text (``None`` when the engine refuses the function)."""
    case = request.param
    exported = export(case.func, numba_argtypes(case.args))
    try:
        text = julia_module_text(exported)
    except UnsupportedFunctionError:
        text = None
    return case, exported.abi.to_dict(), text


#: Cases the Julia engine refuses by design (checked by tests/test_julia_static.py): none among these.
_REFUSED: set[str] = set()


@pytest.mark.parametrize("version", LLI_VERSIONS)
def test_llvmcall_module_executes_like_numba(case_module, version: int) -> None:
    case, abi, text = case_module
    if text is None:
        assert case.name in _REFUSED
        return
    ret, params = _entry_signature(text, abi["entry"])          # the llvmcall signature PyJlad.jl declares
    assert ret == "i32" and params == ["ptr", "ptr", *(p["type"] for p in abi["params"])]
    before = [_span(a) for a in case.args if isinstance(a, np.ndarray)]
    call = _harness(abi, case.args)
    dtype = abi["result"]["dtype"]
    rsize = 8 if dtype == "none" else np.dtype(dtype).itemsize
    got = _read(_lli(version, text + call.ir), rsize, call.spans)
    assert [_span(a) for a in case.args if isinstance(a, np.ndarray)] == before   # the harness copies
    value, error, arrays = _numba_outcome(case.func, case.args)
    if error is None:
        assert got.status == 0 and got.raised is None
        _assert_same(_as_value(got.result, dtype), value, dtype)
    else:
        # Julia reads only the status word (nonzero: PyJlad.jl throws); the description is Numba's own.
        assert got.status != 0
        assert got.raised == (type(error), error.args)
    assert got.arrays == arrays                                  # writes land exactly where Numba's do


def test_every_case_kind_is_covered() -> None:
    """Scalar-only, 1-D, C/F/strided 2-D and 3-D, bool/unsigned/float32 scalars, int/bool/none results, raises."""
    names = {c.name for c in _ALL}
    assert {"scalar_math", "sin_x_dot_x", "weighted_2d_C", "weighted_2d_F", "weighted_2d_strided",
            "cube_3d_view", "bool_int32_uint8", "uint64_result", "none_result_mutates_strided",
            "raises_scalar", "raises_in_loop_strided", "float32_scalars"} <= names


# ------------------------------------------------------------------ the GPU form

_DEVICE = [
    *(c for c in CASES if c.name in ("scalar_math", "scalar_branches_xgt", "scalar_with_int", "float32_scalar")),
    Case("raises_scalar", _checked_log, (-1.0, 2.0), 0, None),
    Case("raises_not", _checked_log, (3.0, 2.0), 0, None),
    Case("float32_scalars", _float32_scalar, (np.float32(1.25), np.float32(-3.5)), 0, None),
]


@pytest.mark.parametrize("version", LLI_VERSIONS)
@pytest.mark.parametrize("case", _DEVICE, ids=[c.name for c in _DEVICE])
def test_device_value_executes_like_numba_and_gives_nan_on_a_raise(case: Case, version: int) -> None:
    """``PyJlad.device_value``: the entry wrapped by PyJlad.jl's IR template, called with scalars only."""
    exported = export(case.func, numba_argtypes(case.args))
    abi = exported.abi.to_dict()
    text = julia_module_text(exported)
    types = [p["type"] for p in abi["params"]]
    wrapper = _device_wrapper(abi["entry"], abi["result"]["llvm_type"], types)
    call = _harness(abi, case.args, device=True)
    raw = _lli(version, text + wrapper + call.ir)
    dtype = abi["result"]["dtype"]
    got = np.frombuffer(raw, dtype=dtype)[0]
    value, error, _ = _numba_outcome(case.func, case.args)
    if error is None:
        _assert_same(got, value, dtype)
    else:
        assert np.isnan(got)


# ------------------------------------------------------------------ the harness can fail


def test_the_harness_sees_a_wrong_value() -> None:
    """A module whose entry computes something else is caught (the comparison is not vacuous)."""
    case = next(c for c in CASES if c.name == "scalar_math")
    exported = export(case.func, numba_argtypes(case.args))
    abi = exported.abi.to_dict()
    text = julia_module_text(exported)
    # The same module with the entry's first argument replaced by 1.0 at the call.
    call = _harness(abi, (1.0, case.args[1]))
    got = _read(_lli(19, text + call.ir), 8, [])
    assert got.status == 0
    assert np.frombuffer(got.result, "float64")[0] != _numba(case.func)(*case.args)


def test_scalar_literals_are_the_bits_julia_passes() -> None:
    assert _scalar_literal(True, "bool", "i8") == "i8 1"
    assert _scalar_literal(np.uint8(200), "uint8", "i8") == "i8 -56"          # reinterpret(Int8, 0xc8)
    assert _scalar_literal(np.uint64(2**63 + 5), "uint64", "i64") == f"i64 {-(2**63) + 5}"
    assert _scalar_literal(1.5, "float32", "float") == "float 0x3FF8000000000000"
    assert re.fullmatch(r"double 0x[0-9A-F]{16}", _scalar_literal(0.1, "float64", "double"))


# ------------------------------------------------------------------ two llvmcall sites


def _site(text: str, entry: str, site: str) -> str:
    """One llvmcall site's copy of the module as Julia makes it: the entry renamed, linkonce_odr
    (julia src/ccall.cpp, ``emit_llvmcall``: ``f->setName(ir_name)``, ``def->setLinkage(LinkOnceODRLinkage)``)."""
    renamed = re.sub(rf"^define ([^@\n]*)@{re.escape(entry)}\(", rf"define linkonce_odr \1@{site}(", text,
                     count=1, flags=re.MULTILINE)
    assert renamed != text
    return renamed.replace(f"@{entry}(", f"@{site}(")


@pytest.mark.parametrize("version", [LLI_VERSIONS[-1]])
def test_two_llvmcall_sites_of_a_module_link_into_one_module_and_run(case_module, version: int) -> None:
    """Julia links each site's module into the caller's (``ctx.llvmcall_modules``), and its JIT keeps one
    symbol table: calling an exported function twice, or two exported functions that share pyjlad's
    LAPACK loops, must not define a symbol twice. Both sites then run like Numba."""
    case, abi, text = case_module
    if text is None:
        return
    first, second = _site(text, abi["entry"], "julia_site_1"), _site(text, abi["entry"], "julia_site_2")
    linker = shutil.which(f"llvm-link-{version}")
    assert linker is not None, f"llvm-link-{version} is not installed"
    # The calling function's module: Julia declares each renamed entry there and calls it.
    signature = ", ".join(["ptr", "ptr", *(p["type"] for p in abi["params"])])
    caller = "".join(f"declare i32 @{site}({signature})\n" for site in ("julia_site_1", "julia_site_2"))
    caller += "@julia_calls = global [2 x ptr] [ptr @julia_site_1, ptr @julia_site_2]\n"
    with tempfile.TemporaryDirectory() as tmp:
        paths = [f"{tmp}/caller.ll", f"{tmp}/site1.ll", f"{tmp}/site2.ll"]
        for path, body in zip(paths, (caller, first, second)):
            with open(path, "w") as f:
                f.write(body)
        linked = subprocess.run([linker, "-S", *paths, "-o", "-"], capture_output=True, text=True)
    assert linked.returncode == 0, linked.stderr[-2000:]
    dtype = abi["result"]["dtype"]
    rsize = 8 if dtype == "none" else np.dtype(dtype).itemsize
    value, error, arrays = _numba_outcome(case.func, case.args)
    for site in ("julia_site_1", "julia_site_2"):
        call = _harness({**abi, "entry": site}, case.args)
        got = _read(_lli(version, linked.stdout + call.ir), rsize, call.spans)
        assert got.status == (0 if error is None else got.status) and (got.status != 0) == (error is not None)
        if error is None:
            _assert_same(_as_value(got.result, dtype), value, dtype)
        assert got.arrays == arrays


def test_internalize_keeps_the_entry_and_local_definitions() -> None:
    text = ("@g = global i64 1\n@c = internal constant i8 2\n@\"q.x\" = hidden constant i8 3\n@e = external global i8\n"
            "define i32 @entry(ptr %r) {\n  ret i32 0\n}\n"
            "define dso_local hidden double @helper(double %x) #0 {\n  ret double %x\n}\n"
            "define linkonce_odr i32 @shared() {\n  ret i32 1\n}\n"
            "declare double @sin(double)\n")
    out = internalize(parse(text), "entry").render()
    assert out.splitlines() == [
        "@g = internal global i64 1", "@c = internal constant i8 2", '@"q.x" = internal constant i8 3',
        "@e = external global i8",
        "define i32 @entry(ptr %r) {", "  ret i32 0", "}",
        "define internal dso_local double @helper(double %x) #0 {", "  ret double %x", "}",
        "define linkonce_odr i32 @shared() {", "  ret i32 1", "}",
        "declare double @sin(double)",
    ]
    result = subprocess.run([shutil.which("llvm-as-19") or "llvm-as-19", "-o", "/dev/null", "-"], input=out,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
