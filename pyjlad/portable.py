"""Make Numba's LLVM IR portable: one self-contained module every LLVM >= 15 reads.

Numba 0.68 prints IR with LLVM 22's syntax (``captures(none)``, ``memory(...)``,
``range(...)``, ``getelementptr inbounds nuw``, ``samesign``...), and the module
it keeps holds much more than the function to differentiate: the CPython and
``cfunc`` wrappers, ``NumbaEnv`` globals, Python C-API declarations and, once
compiled, x86-specific intrinsics that the JIT's code generator introduced.

:func:`make_portable` keeps only the entry function and what it transitively
references, renames the entry to a short stable name (and the names Numba
derives from per-process state, string constants named by ``hash()`` and the
uids in mangled names, to names that are the same in every process: the text
is part of the gradient cache's key), and rewrites every
construct newer than LLVM 15 into an equivalent (or a conservative) LLVM 15
form. The result is accepted by ``llvm-as`` 15, 16, 19 and 22 alike, which is
what the Enzyme plugin (LLVM 15) and Julia's ``Base.llvmcall`` (LLVM 16/18)
need. Dropping an attribute or a metadata attachment is always safe: it only
removes information an optimizer may use; nothing here changes semantics.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from .carried_selects import freeze_carried_selects
from .errors import IRError, PortabilityError
from .ir.lexer import substitute, texts_of

__all__ = ["PortableModule", "make_portable", "PORTABLE_RUNTIME", "RUNTIME_CALL_DTOR", "split_module", "split_top_level"]

# A global symbol: @name or @"quoted name".
_SYMBOL = r'@(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
_DEFINE_NAME_RE = re.compile(r"^(?:define|declare)\b[^@]*?(" + _SYMBOL + r")\(")
_GLOBAL_NAME_RE = re.compile(r"^(" + _SYMBOL + r")\s*=")
_ATTR_GROUP_RE = re.compile(r"^attributes (#\d+) = \{(.*)\}\s*$")

# Function attributes LLVM 15 knows and that are worth keeping.
_KEPT_FN_ATTRS = frozenset(
    """nounwind readnone readonly writeonly argmemonly inaccessiblememonly
    inaccessiblemem_or_argmemonly noinline alwaysinline norecurse willreturn
    nofree nosync mustprogress speculatable cold noreturn returns_twice
    inlinehint nocallback""".split()
)

_MEMORY_TRANSLATION = {
    "none": "readnone",
    "read": "readonly",
    "write": "writeonly",
    "argmem: readwrite": "argmemonly",
    "argmem: read": "argmemonly readonly",
    "argmem: write": "argmemonly writeonly",
    "inaccessiblemem: readwrite": "inaccessiblememonly",
    "argmem: readwrite, inaccessiblemem: readwrite": "inaccessiblemem_or_argmemonly",
}

# Math intrinsics that LLVM 15 lacks (added in 17-20): the libm call Enzyme
# already has derivative rules for, per floating-point suffix.
#: libm functions (double; the float versions add an ``f``) Enzyme differentiates
#: by name and CUDA's libdevice provides as ``__nv_<name>``.
LIBM_FUNCTIONS = frozenset(
    """sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 exp10
    expm1 log log2 log10 log1p sqrt cbrt pow hypot fabs fmod floor ceil round trunc
    erf erfc tgamma lgamma fmax fmin copysign""".split()
)
_NEW_MATH_INTRINSICS = {
    "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "atan2": "atan2",
    "exp10": "exp10",
}
_FLOAT_SUFFIX = {"f64": "", "f32": "f"}
_NEW_INTRINSIC_RE = re.compile(
    r"@llvm\.(" + "|".join(_NEW_MATH_INTRINSICS) + r")\.(f64|f32)\b"
)
# The vector forms of the same intrinsics (from Numba's loop vectorizer) are
# scalarized into one libm call per lane.
_NEW_VECTOR_CALL_RE = re.compile(
    r"^(\s*)(%[-\w.$]+) = (?:tail |notail )?call (?:[a-z]+ )*<(\d+) x (double|float)> "
    r"@llvm\.(" + "|".join(_NEW_MATH_INTRINSICS) + r")\.v\d+f(?:64|32)\((.*)\)(?:\s*#\d+)?\s*$"
)
_NEW_VECTOR_DECL_RE = re.compile(r"^declare .*@llvm\.(" + "|".join(_NEW_MATH_INTRINSICS) + r")\.v\d+f(64|32)\(")

# Instruction-level syntax newer than LLVM 15, with its LLVM 15 spelling.
_LINE_REWRITES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bcaptures\(none\)"), "nocapture"),
    (re.compile(r"\bcaptures\([^)]*\)\s?"), ""),
    (re.compile(r"\brange\([^()]*\)\s?"), ""),
    (re.compile(r"\binitializes\((?:\([^()]*\)(?:,\s*)?)+\)\s?"), ""),
    (re.compile(r"\bnofpclass\([^()]*\)\s?"), ""),
    (re.compile(r"\b(?:dead_on_unwind|dead_on_return|writable)\s"), ""),
    (re.compile(r"\bgetelementptr (inbounds )?(?:(?:nuw|nusw) )+"), r"getelementptr \1"),
    (re.compile(r"\b(zext|uitofp) nneg "), r"\1 "),
    (re.compile(r"\bicmp samesign "), "icmp "),
    (re.compile(r"\bor disjoint "), "or "),
    (re.compile(r"\btrunc (?:(?:nuw|nsw) )+"), "trunc "),
    # Metadata attachments (!tbaa, !noalias, !prof, !llvm.loop, ...).
    (re.compile(r",\s*![-a-zA-Z$._0-9]+\s+!\d+"), ""),
)
# Masked memory intrinsics: LLVM 22 passes the alignment as a parameter
# attribute (`ptr align 8 %p`), LLVM 15 as an `i32` argument after the pointer.
_MASKED_LOAD_DECL_RE = re.compile(r"^(declare .*@llvm\.masked\.(?:load|gather)\.[\w.]+\()([^,]+),")
_MASKED_STORE_DECL_RE = re.compile(r"^(declare .*@llvm\.masked\.(?:store|scatter)\.[\w.]+\()([^,]+, [^,]+),")
_HINT_INTRINSICS = ("@llvm.lifetime.", "@llvm.experimental.noalias.scope.decl", "@llvm.dbg.")
_SPLAT_RE = re.compile(r"splat \(([^()]+?) ([^()]+)\)")
_VECTOR_TYPE_RE = re.compile(r"<(\d+) x ([^>]+)>")

# Numba's memory-management runtime, written as IR that Enzyme can read.
#
# Numba's own copies of NRT_incref/NRT_decref use x86-specific intrinsics, and
# its allocator is an opaque C function whose result (a MemInfo whose `data`
# field points into the same block) Enzyme cannot shadow. These definitions have
# the same semantics and the same memory layout as Numba's nrt.cpp:
#   struct MemInfo { size_t refct; dtor; dtor_info; void *data; size_t size;
#                    external_allocator; }                        (48 bytes)
# allocated, like NRT_MemInfo_alloc_aligned, in one malloc'ed block with the
# data after the header and dtor = NULL, so a MemInfo made here is freed
# correctly by Numba's runtime and vice versa. Enzyme sees malloc and free, so it
# shadows temporaries and keeps them alive until the reverse pass needs them.
# A MemInfo with a destructor (e.g. one wrapping a NumPy array owned by Python)
# is handed to Numba's own NRT_MemInfo_call_dtor, exported under the name
# RUNTIME_CALL_DTOR (resolved by the engine that loads the module).
RUNTIME_CALL_DTOR = "pyjlad_NRT_MemInfo_call_dtor"

# The data follows the 48-byte header, so it is 16-byte aligned (malloc's
# guarantee) rather than `align`-aligned: Numba's IR never assumes more than the
# element alignment (8 bytes), and integer arithmetic on the address to round it
# up would make the pointer opaque to Enzyme's type analysis. The block is as
# large as Numba's would be, so NRT's view of `size` stays exact.
_ALLOC_ALIGNED_BODY = """(i64 %size, i32 %align) {
entry:
  %total = add i64 %size, 48
  %mi = call ptr @malloc(i64 %total)
  %failed = icmp eq ptr %mi, null
  br i1 %failed, label %fail, label %init
fail:
  ret ptr null
init:
  %data = getelementptr i8, ptr %mi, i64 48
  store i64 1, ptr %mi, align 8
  %dtor = getelementptr i8, ptr %mi, i64 8
  store ptr null, ptr %dtor, align 8
  %info = getelementptr i8, ptr %mi, i64 16
  store ptr null, ptr %info, align 8
  %datafield = getelementptr i8, ptr %mi, i64 24
  store ptr %data, ptr %datafield, align 8
  %sizefield = getelementptr i8, ptr %mi, i64 32
  store i64 %size, ptr %sizefield, align 8
  %external = getelementptr i8, ptr %mi, i64 40
  store ptr null, ptr %external, align 8
  ret ptr %mi
}"""

PORTABLE_RUNTIME = {
    # Inactive: a reference count is an integer no derivative flows through; without the
    # attribute Enzyme may take the meminfo (reached through an array struct it shadows)
    # for active memory and refuse the atomic add ("Active atomic inst not yet handled").
    # NRT_decref stays visible: it frees, and Enzyme must defer frees to the reverse sweep.
    "@NRT_incref": """define linkonce_odr void @NRT_incref(ptr %mi) nofree nounwind "enzyme_inactive" {
entry:
  %isnull = icmp eq ptr %mi, null
  br i1 %isnull, label %done, label %inc
inc:
  %old = atomicrmw add ptr %mi, i64 1 monotonic, align 8
  br label %done
done:
  ret void
}""",
    "@NRT_decref": """define linkonce_odr void @NRT_decref(ptr %mi) {
entry:
  %isnull = icmp eq ptr %mi, null
  br i1 %isnull, label %done, label %dec
dec:
  %old = atomicrmw sub ptr %mi, i64 1 release, align 8
  %last = icmp eq i64 %old, 1
  br i1 %last, label %free, label %done
free:
  fence acquire
  call void @NRT_MemInfo_call_dtor(ptr %mi)
  br label %done
done:
  ret void
}""",
    "@NRT_MemInfo_call_dtor": """define linkonce_odr void @NRT_MemInfo_call_dtor(ptr %mi) {
entry:
  %dtorfield = getelementptr i8, ptr %mi, i64 8
  %dtor = load ptr, ptr %dtorfield, align 8
  %externalfield = getelementptr i8, ptr %mi, i64 40
  %external = load ptr, ptr %externalfield, align 8
  %nodtor = icmp eq ptr %dtor, null
  %noexternal = icmp eq ptr %external, null
  %plain = and i1 %nodtor, %noexternal
  br i1 %plain, label %own, label %runtime
own:
  call void @free(ptr %mi)
  ret void
runtime:
  call void @""" + RUNTIME_CALL_DTOR + """(ptr %mi)
  ret void
}""",
    "@NRT_MemInfo_alloc_aligned": "define linkonce_odr ptr @NRT_MemInfo_alloc_aligned" + _ALLOC_ALIGNED_BODY,
    "@NRT_MemInfo_alloc_safe_aligned": "define linkonce_odr ptr @NRT_MemInfo_alloc_safe_aligned"
    + _ALLOC_ALIGNED_BODY,
    # A variable-size buffer (Numba's copies in np.linalg): the same block layout;
    # with dtor = NULL, Numba's runtime frees it like any other.
    # Raw allocation and a MemInfo of Numba's default allocator (dtor NULL), used
    # by runtime code such as the formatting of exception messages.
    "@NRT_Allocate": "define linkonce_odr ptr @NRT_Allocate(i64 %size) {\n"
    "entry:\n  %p = call ptr @malloc(i64 %size)\n  ret ptr %p\n}",
    "@NRT_Free": "define linkonce_odr void @NRT_Free(ptr %p) {\nentry:\n  call void @free(ptr %p)\n  ret void\n}",
    "@NRT_MemInfo_alloc": "define linkonce_odr ptr @NRT_MemInfo_alloc"
    + _ALLOC_ALIGNED_BODY.replace("(i64 %size, i32 %align)", "(i64 %size)"),
    "@NRT_MemInfo_new_varsize": "define linkonce_odr ptr @NRT_MemInfo_new_varsize"
    + _ALLOC_ALIGNED_BODY.replace("(i64 %size, i32 %align)", "(i64 %size)"),
    # ... and with an element destructor, which only matters for containers of
    # reference-counted items; growing such a buffer (NRT_MemInfo_varsize_realloc)
    # stays an opaque call that Enzyme refuses, so these never reach the runtime.
    "@NRT_MemInfo_new_varsize_dtor": "define linkonce_odr ptr @NRT_MemInfo_new_varsize_dtor"
    + _ALLOC_ALIGNED_BODY.replace("(i64 %size, i32 %align)", "(i64 %size, ptr %element_dtor)"),
}
# Numba's BLAS helpers (numba_xxdot/gemv/gemm in numba/_lapack.c) call Fortran
# BLAS through function pointers Enzyme cannot follow, and return a status. These
# definitions make the same calls through CBLAS (column-major, as Numba's Fortran
# calls are), which Enzyme differentiates with its BLAS rules, so the derivative
# of a matrix product is matrix products again. Float32 ('s') and float64 ('d')
# kinds are handled; complex kinds are refused before any code runs.
_TRANS = """  %{c}.n = icmp eq i8 %{c}, 110
  %{c}.N = icmp eq i8 %{c}, 78
  %{c}.no = or i1 %{c}.n, %{c}.N
  %{c}.cblas = select i1 %{c}.no, i32 111, i32 112
"""  # Fortran 'n'/'N' -> CblasNoTrans (111), otherwise CblasTrans (112)


_BLAS_TEMPLATES = {
    "dot": """define linkonce_odr i32 @numba_xxdot.{p}(i8 %kind, i8 %conj, i64 %n, ptr %x, ptr %y, ptr %out) {{
entry:
  %n32 = trunc i64 %n to i32
  %r = call {T} @cblas_{p}dot(i32 %n32, ptr %x, i32 1, ptr %y, i32 1)
  store {T} %r, ptr %out, align 8
  ret i32 0
}}""",
    "gemv": """define linkonce_odr i32 @numba_xxgemv.{p}(i8 %kind, i8 %trans, i64 %m, i64 %n, ptr %alpha, ptr %a, i64 %lda, ptr %x, ptr %beta, ptr %y) {{
entry:
{trans}  %m32 = trunc i64 %m to i32
  %n32 = trunc i64 %n to i32
  %lda32 = trunc i64 %lda to i32
  %al = load {T}, ptr %alpha, align 8
  %be = load {T}, ptr %beta, align 8
  call void @cblas_{p}gemv(i32 102, i32 %trans.cblas, i32 %m32, i32 %n32, {T} %al, ptr %a, i32 %lda32, ptr %x, i32 1, {T} %be, ptr %y, i32 1)
  ret i32 0
}}""",
    # The 2-norm as a plain loop (Enzyme differentiates it; no BLAS rule needed).
    "nrm2": """define linkonce_odr i32 @numba_xxnrm2.{p}(i8 %kind, i64 %n, ptr %x, i64 %incx, ptr %out) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %acc = phi {T} [ 0.0, %entry ], [ %sum, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
  %offset = mul i64 %i, %incx
  %p = getelementptr {T}, ptr %x, i64 %offset
  %v = load {T}, ptr %p, align 4
  %sq = fmul {T} %v, %v
  %sum = fadd {T} %acc, %sq
  %next = add i64 %i, 1
  br label %loop
done:
  %r = call {T} @llvm.sqrt.{suffix}({T} %acc)
  store {T} %r, ptr %out, align 4
  ret i32 0
}}""",
    "gemm": """define linkonce_odr i32 @numba_xxgemm.{p}(i8 %kind, i8 %transa, i8 %transb, i64 %m, i64 %n, i64 %k, ptr %alpha, ptr %a, i64 %lda, ptr %b, i64 %ldb, ptr %beta, ptr %c, i64 %ldc) {{
entry:
{transa}{transb}  %m32 = trunc i64 %m to i32
  %n32 = trunc i64 %n to i32
  %k32 = trunc i64 %k to i32
  %lda32 = trunc i64 %lda to i32
  %ldb32 = trunc i64 %ldb to i32
  %ldc32 = trunc i64 %ldc to i32
  %al = load {T}, ptr %alpha, align 8
  %be = load {T}, ptr %beta, align 8
  call void @cblas_{p}gemm(i32 102, i32 %transa.cblas, i32 %transb.cblas, i32 %m32, i32 %n32, i32 %k32, {T} %al, ptr %a, i32 %lda32, ptr %b, i32 %ldb32, {T} %be, ptr %c, i32 %ldc32)
  ret i32 0
}}""",
}
# Numba always passes the kind as a constant ('d' = 100, 's' = 115); calls are
# renamed to the kind's own definition, so each has one element type (Enzyme's
# type analysis rejects a function storing both float and double to one pointer).
_BLAS_KINDS = {"100": ("d", "double"), "115": ("s", "float")}
_BLAS_CALL_RE = re.compile(r"@numba_xx(dot|gemv|gemm|nrm2)\(i8 (100|115),")
_LAPACK_CALL_RE = re.compile(r"@(numba_xxgetrf|numba_ez_xxgetri|numba_xgesv|numba_xxpotrf)\(i8 (100|115),")
_BLAS_RUNTIME = {
    f"@numba_xx{op}.{p}": template.format(
        p=p, T=ty, suffix="f64" if ty == "double" else "f32", trans=_TRANS.format(c="trans"),
        transa=_TRANS.format(c="transa"), transb=_TRANS.format(c="transb"),
    )
    for op, template in _BLAS_TEMPLATES.items()
    for p, ty in _BLAS_KINDS.values()
}
PORTABLE_RUNTIME.update(_BLAS_RUNTIME)

_PORTABLE_RUNTIME_DEPS = {
    "@NRT_decref": {"@NRT_MemInfo_call_dtor"},
    "@NRT_MemInfo_call_dtor": {"@free", "@" + RUNTIME_CALL_DTOR},
    "@NRT_MemInfo_alloc_aligned": {"@malloc"},
    "@NRT_MemInfo_alloc_safe_aligned": {"@malloc"},
    "@NRT_MemInfo_new_varsize": {"@malloc"},
    "@NRT_Allocate": {"@malloc"},
    "@NRT_Free": {"@free"},
    "@NRT_MemInfo_alloc": {"@malloc"},
    "@NRT_MemInfo_new_varsize_dtor": {"@malloc"},
    **{name: {"@cblas_" + name.rsplit(".", 1)[1] + name[len("@numba_xx"):].split(".")[0]}
       for name in _BLAS_RUNTIME if "nrm2" not in name},
    "@numba_xxnrm2.d": {"@llvm.sqrt.f64"},
    "@numba_xxnrm2.s": {"@llvm.sqrt.f32"},
}
# Declarations the definitions above need. The runtime destructor is marked
# inactive for Enzyme (a string attribute other LLVM consumers ignore) and
# `nofree`: it is reached only for MemInfos whose destructor belongs to Numba's
# runtime (objects owned outside the differentiated code, such as NumPy arrays
# passed in by Python, which are alive for the whole call), never for the
# temporaries whose frees Enzyme must postpone to the reverse pass.
_PORTABLE_RUNTIME_DECLS = {
    "@malloc": "declare noalias ptr @malloc(i64)",
    "@free": "declare void @free(ptr)",
    "@" + RUNTIME_CALL_DTOR: f'declare void @{RUNTIME_CALL_DTOR}(ptr) nofree "enzyme_inactive"',
    "@llvm.sqrt.f64": "declare double @llvm.sqrt.f64(double)",
    "@llvm.sqrt.f32": "declare float @llvm.sqrt.f32(float)",
    "@cblas_ddot": "declare double @cblas_ddot(i32, ptr, i32, ptr, i32)",
    "@cblas_sdot": "declare float @cblas_sdot(i32, ptr, i32, ptr, i32)",
    "@cblas_dgemv": "declare void @cblas_dgemv(i32, i32, i32, i32, double, ptr, i32, ptr, i32, double, ptr, i32)",
    "@cblas_sgemv": "declare void @cblas_sgemv(i32, i32, i32, i32, float, ptr, i32, ptr, i32, float, ptr, i32)",
    "@cblas_dgemm": "declare void @cblas_dgemm(i32, i32, i32, i32, i32, i32, double, ptr, i32, ptr, i32, double, ptr, i32)",
    "@cblas_sgemm": "declare void @cblas_sgemm(i32, i32, i32, i32, i32, i32, float, ptr, i32, ptr, i32, float, ptr, i32)",
}


# Numba runtime helpers that only compute integers (shapes, strides) from their
# arguments: their declarations are marked so that Enzyme treats calls to them as
# inactive and knows they free nothing.
INACTIVE_HELPERS = frozenset({"numba_attempt_nocopy_reshape", "numba_fatal_error"})


# Python C-API functions that Numba's generated code calls only to build the
# message of an exception raised with run-time values (e.g. a shape mismatch in
# a slice assignment). A differentiated module never reads that message: pyjlad
# re-runs the function itself to raise the exception with its text (and the
# Julia engine reports the status). So in the portable module they are stubs
# returning null/zero; the status still says an exception was raised.
ERROR_PATH_STUBS = frozenset({
    "PyUnicode_FromKindAndData", "PyUnicode_FromString", "PyTuple_Pack", "PyObject_Hash",
    "PyErr_SetString", "PyErr_SetNone", "PyErr_Clear", "Py_DecRef", "Py_IncRef",
})
_ZERO = {"ptr": "null", "void": "", "float": "0.0", "double": "0.0"}


#: Numba's builder of a dynamic exception's arguments (``raise E(f"... {value}")``, shape checks
#: of axis reductions): its address is stored in the exception info, which makes Enzyme process
#: it (its vararg PyTuple_Pack call trips Enzyme's preprocessing). Like the other error-path
#: code it is never needed in a differentiated module (the status still says an exception was
#: raised, and pyjlad re-runs the function for the message): an inactive stub returning null.
_EXCINFO_UNWRAP = "@__excinfo_unwrap_args"


#: Numba's string implementations (numba.cpython.unicode, unicode_support, charseq): reached
#: from the messages of exceptions raised with run-time values (np.sum's axis check). Text
#: carries no derivative, and Enzyme's type analysis cannot type their byte arithmetic.
_STRING_CODE = ("@_ZN5numba7cpython7unicode", "@_ZN5numba7cpython15unicode_support", "@_ZN5numba7cpython7charseq")


def _inactive_definition(text: str) -> str:
    """``text`` (a definition) with the ``"enzyme_inactive"`` function attribute."""
    header, rest = text.split("\n", 1)
    if "enzyme_inactive" in header:
        return text
    return header[:header.rindex("{")].rstrip() + ' "enzyme_inactive" {\n' + rest


def _excinfo_unwrap_stub(symbol: str) -> str:
    return f'define linkonce_odr ptr {symbol}(ptr %args) nounwind "enzyme_inactive" {{\nentry:\n  ret ptr null\n}}'


def _stub(declaration: str) -> str:
    """A definition with the declaration's signature that returns zero/null."""
    match = re.match(r"^declare\s+(?:noalias\s+|noundef\s+)*(\S+)\s+(@[-\w.$]+)\((.*)\)", declaration)
    if match is None:
        raise PortabilityError(f"cannot parse declaration: {declaration}")
    ret, name, params = match.groups()
    names = []
    for k, param in enumerate(p.strip() for p in split_top_level(params) if p.strip()):
        names.append(param if param == "..." else f"{param.split()[0]} %a{k}")
    value = _ZERO.get(ret, "0")
    body = "ret void" if ret == "void" else f"ret {ret} {value}"
    return f"define linkonce_odr {ret} {name}({', '.join(names)}) {{\nentry:\n  {body}\n}}"


_TRAILING_GROUP_RE = re.compile(r"\s+(#\d+)\s*$")


def is_libm_function(name: str) -> bool:
    """Whether ``name`` is a libm function of :data:`LIBM_FUNCTIONS` (double, or float with an ``f``)."""
    return name in LIBM_FUNCTIONS or (name.endswith("f") and name[:-1] in LIBM_FUNCTIONS)


def _libm_declaration(line: str, groups: dict[str, str]) -> str:
    """A libm declaration without Numba's ``readonly``.

    Numba declares every libm function it calls "pure" (``readonly``); LLVM
    strengthens that to ``readnone`` for most (``erf``, ``tan``) but not all
    (``erfc``, ``lgamma``). Enzyme marks the functions it knows
    ``readnone`` itself, and a declaration that is both is invalid ("Attributes
    'readnone and readonly' are incompatible", ``math.erfc``). Dropping
    ``readonly`` is always safe; its other attributes are kept inline.
    """
    match = _DEFINE_NAME_RE.match(line)
    group = _TRAILING_GROUP_RE.search(line)
    if match is None or group is None or not is_libm_function(match.group(1).lstrip("@")):
        return line
    attrs = _translate_attr_group(groups.get(group.group(1), "")).split()
    if "readonly" not in attrs:
        return line
    kept = " ".join(a for a in attrs if a != "readonly")
    return line[:group.start()] + (" " + kept if kept else "")


def is_inactive_helper(name: str) -> bool:
    """Whether ``name`` is a runtime helper that never carries derivatives.

    The Python C API and the GIL helpers (print(), formatted exception messages)
    are deliberately not listed: Enzyme may replay inactive calls in the reverse
    sweep, and a replayed ``numba_gil_ensure`` deadlocks.
    """
    return name in INACTIVE_HELPERS


def _mark_inactive(line: str) -> str:
    match = _DEFINE_NAME_RE.match(line)
    if match and is_inactive_helper(match.group(1).lstrip("@")) and "enzyme_inactive" not in line:
        return line.rstrip() + ' nofree nounwind "enzyme_inactive"'
    return line


@dataclass(frozen=True)
class PortableModule:
    """A self-contained LLVM module holding one Numba function.

    Attributes
    ----------
    text : str
        The module's LLVM IR (opaque pointers, LLVM 15 syntax).
    entry : str
        Name of the entry function (without ``@``), Numba's inner ABI
        function ``i32 (ptr retptr, ptr excinfo, args...)``.
    external_functions : tuple of str
        Functions the module declares but does not define (libm, Numba's
        runtime, LLVM intrinsics); resolved when the module is linked or JIT-ed.
    links : tuple of (str, str)
        ``(helper, kind)`` pairs of Numba LAPACK helpers the module calls as
        ``@<helper>.<kind>``: the modules of :func:`pyjlad.lapack.lapack_module`
        to link with it.
    """

    text: str
    entry: str
    external_functions: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()


@dataclass
class _Entity:
    kind: str  # "global", "define", "declare", "type"
    name: str
    text: str


def split_module(ir: str) -> tuple[list[str], list[_Entity], dict[str, str]]:
    """Split LLVM IR text into header lines, top-level entities and attribute groups."""
    header: list[str] = []
    entities: list[_Entity] = []
    groups: dict[str, str] = {}
    lines = ir.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("define "):
            body = [line]
            while not lines[i].startswith("}"):
                i += 1
                body.append(lines[i])
            match = _DEFINE_NAME_RE.match(line)
            if match is None:
                raise PortabilityError(f"cannot parse function header: {line[:200]}")
            entities.append(_Entity("define", match.group(1), "\n".join(body)))
        elif line.startswith("declare "):
            match = _DEFINE_NAME_RE.match(line)
            if match is None:
                raise PortabilityError(f"cannot parse declaration: {line[:200]}")
            entities.append(_Entity("declare", match.group(1), line))
        elif line.startswith("@"):
            match = _GLOBAL_NAME_RE.match(line)
            if match is None:
                raise PortabilityError(f"cannot parse global: {line[:200]}")
            entities.append(_Entity("global", match.group(1), line))
        elif line.startswith("%") and " = type " in line:
            entities.append(_Entity("type", line.split(" = ", 1)[0], line))
        elif line.startswith("attributes #"):
            match = _ATTR_GROUP_RE.match(line)
            if match:
                groups[match.group(1)] = match.group(2)
        elif line.startswith(("target datalayout", "target triple")):
            header.append(line)
        # Comments, metadata, source_filename, module flags and comdats are dropped.
        i += 1
    return header, entities, groups


def _global_symbols(text: str) -> set[str]:
    """The ``@`` symbols ``text`` mentions, read by the IR lexer.

    The lexer tells quoted names (``@"f.<locals>.func"``, ``%"arg.spéc"``), constant byte strings
    (``c"..@x.."``: data, not references) and comments apart. Stripping ``c"..."`` with a regex does
    not: ``c"[^"]*"`` also matches the end of a quoted name ending in ``c`` and swallows every symbol
    up to the next quote, so a function's callees went missing from the portable module.
    """
    return set(texts_of(text, "global"))


def _references(text: str, own_name: str) -> set[str]:
    """Global symbols ``text`` refers to, other than ``own_name`` (never those inside ``c"..."`` data)."""
    return _global_symbols(text) - {own_name}


#: The names Numba gives the constant bytes of string literals (``BaseContext.insert_const_bytes``):
#: ``.bytes.`` and Python's ``hash()`` of the bytes, randomized per process (``@.bytes.-4446739099191175225``;
#: LLVM appends ``.1``, ``.2`` when linking two such constants of one name). The only names of a portable
#: module that change from one process to the next (measured on the fuzzer's programs: bounds-check messages).
_PROCESS_HASH_NAME_RE = re.compile(r"@\.bytes\.-?\d+(?:\.\d+)*")
#: Their names in the portable module: the SHA-256 of the global's definition (a namespace Numba never uses).
_CONTENT_NAME_PREFIX = "@.bytes.content."


def _content_names(entities: list[_Entity]) -> dict[str, str]:
    """New names, by content, for the globals Numba named by a per-process hash (old symbol to new).

    Globals of the same definition are numbered in module order (``.1``, ``.2``), which, unlike their
    names, is the same in every process.
    """
    renames: dict[str, str] = {}
    counts: dict[str, int] = {}
    for entity in entities:
        if entity.kind == "global" and _PROCESS_HASH_NAME_RE.fullmatch(entity.name):
            definition = entity.text.split("=", 1)[1]
            base = _CONTENT_NAME_PREFIX + hashlib.sha256(definition.encode()).hexdigest()[:20]
            n = counts[base] = counts.get(base, -1) + 1
            renames[entity.name] = base + (f".{n}" if n else "")
    return renames


def _rename_symbols(text: str, renames: dict[str, str]) -> str:
    """``text`` with the ``@`` symbols of ``renames`` renamed (never text inside ``c"..."`` data or comments)."""
    return substitute(text, "global", lambda symbol: renames.get(symbol, symbol))


def _name_by_content(entities: list[_Entity]) -> list[_Entity]:
    """``entities`` with the per-process names of :func:`_content_names` replaced in names and references.

    The portable module's text is part of the gradient disk cache's key, so a name that differs from
    one process to the next made the same function miss the cache in every new process. Renaming
    happens before the reachable symbols are ordered (by name), so their order is stable too.
    """
    renames = _content_names(entities)
    if not renames:
        return entities
    return [_Entity(e.kind, renames.get(e.name, e.name),
                    _rename_symbols(e.text, renames) if "@.bytes." in e.text else e.text) for e in entities]


#: Numba's unique id of a compiled function, an ABI tag of its mangled name: ``B3v29`` (the tag "v29",
#: the 29th function this process compiled), followed by the next tag or the ``E`` closing the name.
_UID_TAG_RE = re.compile(r"(?<=[A-Za-z0-9_])B(\d+)v(\d+)(?=B\d|E)")
_CSTRING_GLOBAL_RE = re.compile(r'\[(\d+) x i8\] c"([^"]*)"')


def _uid_tags(text: str) -> list[str]:
    """The uids (digits) of the mangled names in ``text``, in order, each once."""
    return list(dict.fromkeys(m.group(2) for m in _UID_TAG_RE.finditer(text)
                              if int(m.group(1)) == len(m.group(2)) + 1))


def _uid_numbers(entities: list[_Entity]) -> dict[str, int]:
    """The uids of the names ``entities`` define, numbered 1, 2... in order of first appearance.

    Uids of declared (external) symbols are left out: those names are resolved when the module is loaded.
    """
    external = {u for e in entities if e.kind == "declare" for u in _uid_tags(e.name)}
    numbers: dict[str, int] = {}
    for entity in entities:
        for uid in _uid_tags(entity.text):
            if uid not in external and uid not in numbers:
                numbers[uid] = len(numbers) + 1
    return numbers


_BYTE_ESCAPE_RE = re.compile(r"\\[0-9A-Fa-f]{2}")


def _fix_length(match: re.Match[str]) -> str:
    """``[N x i8] c"..."`` with N the byte length of the string (an escape ``\\XX`` is one byte)."""
    size = len(_BYTE_ESCAPE_RE.sub("x", match.group(2)))
    return f'[{size} x i8] c"{match.group(2)}"'


def _retag(entities: list[_Entity], entry: str, tags: dict[str, str]) -> tuple[list[_Entity], str]:
    """``entities`` and ``entry`` with each uid tag ``v<uid>`` of ``tags`` replaced by its new tag."""

    def retag(match: re.Match[str]) -> str:
        new = tags.get(match.group(2)) if int(match.group(1)) == len(match.group(2)) + 1 else None
        return match.group(0) if new is None else f"B{len(new)}{new}"

    renamed = []
    for entity in entities:
        text = _UID_TAG_RE.sub(retag, entity.text)
        if entity.kind == "global" and text != entity.text:
            text = _CSTRING_GLOBAL_RE.sub(_fix_length, text)
        renamed.append(_Entity(entity.kind, _UID_TAG_RE.sub(retag, entity.name), text))
    return renamed, _UID_TAG_RE.sub(retag, entry)


def _stable_uids(entities: list[_Entity], entry: str) -> tuple[list[_Entity], str]:
    """``entities`` and ``entry`` with Numba's per-process function uids renumbered (``v<uid>`` to ``u<k>``).

    A uid counts the functions the process compiled before, so the same function's callees (Numba's
    library code, the user's other ``@njit`` functions) had other names after another history (a
    gradient found in the disk cache compiles less), and so had the module and its cache key. The uids
    of the names the module defines are numbered in order of first appearance; :func:`_salt_uids` then
    makes the names unique to the module. Numba writes ``v<uid>``, so the new tags never meet a declared
    symbol's. The text of a ``c"..."`` message naming a symbol (``missing Environment: ...``) follows
    it, with its length.
    """
    numbers = _uid_numbers(entities)
    if not numbers:
        return entities, entry
    return _retag(entities, entry, {uid: f"u{k}" for uid, k in numbers.items()})


_NUMBERED_TAG_RE = re.compile(r"(?<=[A-Za-z0-9_])B(\d+)u(\d+)(?=B\d|E)")


def _salt_uids(text: str, salt: str) -> str:
    """``text`` (a module or a symbol) with the tags ``u<k>`` of :func:`_stable_uids` made ``u<k>h<salt>``.

    With ``salt`` a digest of the module, two modules linked together (LAPACK, custom rules) never give
    one name to two different functions, which Numba's ``linkonce_odr`` would merge.
    """

    def salted(match: re.Match[str]) -> str:
        if int(match.group(1)) != len(match.group(2)) + 1:
            return match.group(0)
        tag = f"u{match.group(2)}h{salt}"
        return f"B{len(tag)}{tag}"

    lines = text.split("\n")
    for k, line in enumerate(lines):
        new = _NUMBERED_TAG_RE.sub(salted, line)
        if new != line and new.startswith("@"):
            new = _CSTRING_GLOBAL_RE.sub(_fix_length, new)
        lines[k] = new
    return "\n".join(lines)


def _reachable(entities: dict[str, _Entity], root: str) -> list[str]:
    seen: set[str] = set()
    order: list[str] = []
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        order.append(name)
        if name in PORTABLE_RUNTIME:
            refs = _PORTABLE_RUNTIME_DEPS.get(name, set())
        elif name in entities:
            refs = _references(entities[name].text, name)
        else:
            refs = set()
        stack.extend(sorted(refs - seen))
    return order


def _tokenize_attrs(content: str) -> list[str]:
    """Split an attribute list on spaces outside parentheses and quotes."""
    tokens, depth, quoted, current = [], 0, False, []
    for ch in content:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        if ch == " " and depth == 0 and not quoted:
            if current:
                tokens.append("".join(current))
            current = []
        else:
            current.append(ch)
    if current:
        tokens.append("".join(current))
    return tokens


def _translate_attr_group(content: str) -> str:
    """Keep the LLVM 15 function attributes of a group, translating ``memory(...)``."""
    kept: list[str] = []
    for token in _tokenize_attrs(content.strip()):
        if token in _KEPT_FN_ATTRS:
            kept.append(token)
        elif token.startswith("memory(") and token.endswith(")"):
            translated = _MEMORY_TRANSLATION.get(token[len("memory("):-1])
            if translated:
                kept.extend(translated.split())
        # Everything else (string attributes, target features, uwtable kinds,
        # newer attributes) is dropped: dropping an attribute is always safe.
    return " ".join(dict.fromkeys(kept))


def _scalarize_vector_call(match: re.Match[str]) -> str:
    indent, result, lanes, elem, name, args_text = match.groups()
    args = [a.strip() for a in split_top_level(args_text)]
    vector_ty = f"<{lanes} x {elem}>"
    fn = _NEW_MATH_INTRINSICS[name] + ("" if elem == "double" else "f")
    lines = []
    previous = "poison"
    base = "pj." + result.lstrip("%").replace('"', "")
    for lane in range(int(lanes)):
        scalars = []
        for k, arg in enumerate(args):
            value = arg[len(vector_ty):].strip() if arg.startswith(vector_ty) else arg
            lines.append(f"{indent}%{base}.a{k}.l{lane} = extractelement {vector_ty} {value}, i64 {lane}")
            scalars.append(f"{elem} %{base}.a{k}.l{lane}")
        lines.append(f"{indent}%{base}.r.l{lane} = call {elem} @{fn}({', '.join(scalars)})")
        target = result if lane == int(lanes) - 1 else f"%{base}.v.l{lane}"
        lines.append(f"{indent}{target} = insertelement {vector_ty} {previous}, {elem} %{base}.r.l{lane}, i64 {lane}")
        previous = target
    return "\n".join(lines)


def split_top_level(text: str) -> list[str]:
    """Split ``text`` at the commas outside any brackets (LLVM parameter and operand lists)."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "(<{[":
            depth += 1
        elif ch in ")>}]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def _rewrite_line(line: str) -> str:
    stripped = line.lstrip()
    if "@llvm." in line and ("x double>" in line or "x float>" in line):
        if _NEW_VECTOR_DECL_RE.match(line):
            return ""
        vector_call = _NEW_VECTOR_CALL_RE.match(line)
        if vector_call:
            line = _scalarize_vector_call(vector_call)
    # Debug records (LLVM 19+), lifetime markers (whose signature changed in
    # LLVM 22) and intrinsics whose operands are the metadata dropped here are
    # optimization or debugging hints only: dropping them is always safe.
    if stripped.startswith("#dbg_") or any(name in line for name in _HINT_INTRINSICS):
        return ""
    for pattern, replacement in _LINE_REWRITES:
        line = pattern.sub(replacement, line)
    if "splat (" in line:
        line = _SPLAT_RE.sub(lambda m: _expand_splat(line, m), line)
    if "@llvm.masked." in line:
        line = _rewrite_masked(line)
    if "@llvm." in line:
        line = _NEW_INTRINSIC_RE.sub(
            lambda m: "@" + _NEW_MATH_INTRINSICS[m.group(1)] + _FLOAT_SUFFIX[m.group(2)],
            line,
        )
    return line


# Numba's calling convention: ``i32 @f(ptr %retptr, ptr %excinfo, args...)``.
_NUMBA_ABI_DEFINE_RE = re.compile(r"^define\b[^@]*?(" + _SYMBOL + r")\(ptr [^,]*%retptr, ptr [^,]*%excinfo\b")
_LOCAL = r'%(?:"(?:[^"\\]|\\.)*"|[-a-zA-Z$._0-9]+)'
_ALLOCA_RE = re.compile(r"^\s*(" + _LOCAL + r") = alloca ")
_CALL_RE = re.compile(r"\bcall [^@]*?(" + _SYMBOL + r")\((.*)\)")


def _split_shared_excinfo_slots(define: str, numba_functions: set[str]) -> str:
    """Give the exception slots of calls to Numba functions their own ``alloca``.

    When Numba's function calls another Numba function, it passes a stack slot
    (``alloca ptr``) as ``excinfo``: it stores null there, and loads a pointer to
    the exception's description from it when the call fails. LLVM may let one
    ``alloca`` serve several allocas whose lifetimes are disjoint (its
    ``llvm.lifetime.start/end`` markers, dropped here, delimit them). In
    ``np.linalg.solve`` with a vector ``b`` the excinfo slot of the call to
    ``np.asfortranarray`` shares an ``alloca [1 x i64]`` with the ``newshape``
    that ``numba_attempt_nocopy_reshape`` writes when the result is raveled: the
    same memory holds a pointer first and a shape later. Enzyme's type analysis
    gives each memory location one type for the whole function, so the shape
    loaded from the slot (stored to the result's ``shape[0]``, an integer) is
    inferred to be a pointer and the analysis fails ("Illegal updateAnalysis").

    Numba accesses an excinfo slot only as a pointer (and only from the caller
    and through the call), while the integer loads and stores belong to the other
    lifetimes. So when a slot passed as ``excinfo`` is also loaded or stored as a
    non-pointer, its pointer loads/stores and its ``excinfo`` arguments move to a
    fresh ``alloca ptr``: the same program with one more stack slot, in which
    every slot has one type.
    """
    lines = define.split("\n")
    allocas = {m.group(1): k for k, line in enumerate(lines) if (m := _ALLOCA_RE.match(line))}
    if not allocas:
        return define
    excinfo_uses: dict[str, list[int]] = {}
    for k, line in enumerate(lines):
        call = _CALL_RE.search(line)
        if call is None or call.group(1) not in numba_functions:
            continue
        args = split_top_level(call.group(2))
        if len(args) >= 2:
            slot = args[1].split()[-1] if args[1].split() else ""
            if slot in allocas:
                excinfo_uses.setdefault(slot, []).append(k)
    for slot, call_lines in excinfo_uses.items():
        name = re.escape(slot) + r"(?=,|\s*$)"  # the address operand, last before the alignment
        pointer_access = re.compile(r"^\s*(?:" + _LOCAL + r" = load ptr, ptr |store ptr .*, ptr )" + name)
        other_access = re.compile(r"^\s*(?:" + _LOCAL + r" = load (?!ptr,).*?, ptr |store (?!ptr ).*, ptr )"
                                  + name)
        if not any(other_access.match(line) for line in lines):
            continue
        fresh = slot + ".pyjlad.excinfo" if not slot.endswith('"') else slot[:-1] + '.pyjlad.excinfo"'
        for k, line in enumerate(lines):
            match = pointer_access.match(line)
            if match:
                lines[k] = line[:match.end() - len(slot)] + fresh + line[match.end():]
        for k in call_lines:
            call = _CALL_RE.search(lines[k])
            assert call is not None
            args = split_top_level(call.group(2))
            args[1] = args[1].rstrip()[: -len(slot)] + fresh
            start, end = call.span(2)
            lines[k] = lines[k][:start] + ",".join(args) + lines[k][end:]
        at = allocas[slot]
        indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
        lines[at] += f"\n{indent}{fresh} = alloca ptr, align 8"
    return "\n".join(lines)


#: The address of a pointer as an integer, for comparisons only (see :func:`_opaque_address_comparisons`).
#: Enzyme neither analyzes its body (``enzyme_ta_norecur``) nor differentiates it; the
#: optimizer after Enzyme inlines it back into a ``ptrtoint``.
ADDRESS_FUNCTION = "@pyjlad_address"
_ADDRESS_DEFINITION = (
    f"define internal i64 {ADDRESS_FUNCTION}(ptr %p) nounwind readnone willreturn "
    '"enzyme_inactive" "enzyme_ta_norecur" {\n'
    "entry:\n  %a = ptrtoint ptr %p to i64\n  ret i64 %a\n}"
)
_PTRTOINT_RE = re.compile(r"^(\s*(" + _LOCAL + r") = )ptrtoint ptr (" + _LOCAL + r") to i64\s*$")
_RESULT_RE = re.compile(r"^\s*(" + _LOCAL + r") = (\w+)")
_LOCAL_RE = re.compile(_LOCAL + r"(?![-a-zA-Z$._0-9])")
#: Integer operations through which an address may flow on its way to a comparison.
_ADDRESS_ARITHMETIC = frozenset(
    "add sub mul shl lshr ashr and or xor udiv sdiv trunc zext sext freeze select phi".split()
)


def _compared_only(name: str, lines: list[str], users: dict[str, list[int]]) -> bool:
    """Whether the integer ``name`` flows, through integer arithmetic only, into comparisons only."""
    pending, seen = [name], {name}
    while pending:
        for k in users.get(pending.pop(), ()):
            match = _RESULT_RE.match(lines[k])
            if match is None or match.group(2) not in _ADDRESS_ARITHMETIC | {"icmp"}:
                return False
            if match.group(2) != "icmp" and match.group(1) not in seen:
                seen.add(match.group(1))
                pending.append(match.group(1))
    return True


def _opaque_address_comparisons(define: str) -> tuple[str, bool]:
    """Compute addresses that are only compared through :data:`ADDRESS_FUNCTION`; return the
    function and whether it changed.

    The runtime checks of LLVM's loop vectorizer compare addresses as integers:
    ``ptrtoint`` of the source and destination, arithmetic, ``icmp`` ("do the two
    ranges overlap?"), e.g. ``(dst - src) + 8 * n < 128`` in the copy loops of
    ``np.concatenate`` and ``np.stack``. Enzyme's type analysis gives a
    ``ptrtoint`` the type of its pointer, and an ``add`` whose result is compared
    with a small constant (an integer) integers for both operands: the address is
    then both a pointer and an integer, and Enzyme aborts ("Illegal orIn:
    {[-1]:Integer} right: {[-1]:Pointer}"). Numba's own library functions are
    compiled (and vectorized) once per process, so the unvectorized copy Enzyme
    differentiates still links their vectorized loops. The same address, computed
    by a function Enzyme does not look into, is an integer of no known origin
    (and inactive: a comparison carries no derivative). Only ``ptrtoint`` whose
    value reaches nothing but comparisons is replaced; the module computes the
    same values.
    """
    lines = define.split("\n")
    users: dict[str, list[int]] = {}
    for k, line in enumerate(lines):
        defined = _RESULT_RE.match(line)
        operands = line[defined.end():] if defined else line
        for token in set(_LOCAL_RE.findall(operands)):
            users.setdefault(token, []).append(k)
    changed = False
    for k, line in enumerate(lines):
        match = _PTRTOINT_RE.match(line)
        if match and _compared_only(match.group(2), lines, users):
            lines[k] = f"{match.group(1)}call i64 {ADDRESS_FUNCTION}(ptr {match.group(3)})"
            changed = True
    return ("\n".join(lines), True) if changed else (define, False)


_MASKED_CALL_RE = re.compile(r"@llvm\.masked\.(load|gather|store|scatter)\.[\w.]+\(")
#: The position of the pointer operand(s) of each masked memory intrinsic.
_MASKED_POINTER_OPERAND = {"load": 0, "gather": 0, "store": 1, "scatter": 1}
_ALIGN_ATTR_RE = re.compile(r"\s+align (\d+)(?=\s)")


def _closing_paren(text: str, start: int) -> int:
    """Index of the ``)`` closing the bracket level open at ``start`` (just after a ``(``)."""
    depth = 0
    for k in range(start, len(text)):
        ch = text[k]
        if ch in "(<{[":
            depth += 1
        elif ch in ")>}]":
            if depth == 0:
                return k
            depth -= 1
    raise PortabilityError(f"unbalanced brackets in: {text.strip()}")


def _rewrite_masked(line: str) -> str:
    """Masked load/store/gather/scatter: LLVM 22's ``ptr align N %p`` -> LLVM 15's ``ptr %p, i32 N``.

    Operands are split at top-level commas, so constant vector operands
    (``<8 x double> <double 1.0, ...>``) keep their commas.
    """
    if line.startswith("declare "):
        if "i32 immarg" in line:
            return line
        line = _MASKED_LOAD_DECL_RE.sub(r"\1\2, i32 immarg,", line)
        return _MASKED_STORE_DECL_RE.sub(r"\1\2, i32 immarg,", line)
    out, position = [], 0
    for match in _MASKED_CALL_RE.finditer(line):
        if match.start() < position:
            continue
        close = _closing_paren(line, match.end())
        operands = split_top_level(line[match.end():close])
        at = _MASKED_POINTER_OPERAND[match.group(1)]
        if len(operands) == 4:  # already LLVM 15's form (the alignment is an operand)
            continue
        align = _ALIGN_ATTR_RE.search(operands[at] + " ")
        operands[at] = _ALIGN_ATTR_RE.sub("", operands[at] + " ").rstrip()
        operands.insert(at + 1, f" i32 {align.group(1) if align else 1}")
        out += [line[position:match.end()], ",".join(operands)]
        position = close
    return "".join(out) + line[position:]


def _expand_splat(line: str, match: re.Match[str]) -> str:
    """``splat (T v)`` -> ``<T v, T v, ...>``; the length comes from the nearest ``<N x T>`` before it."""
    element, value = match.group(1), match.group(2)
    lengths = [
        int(v.group(1)) for v in _VECTOR_TYPE_RE.finditer(line, 0, match.start())
        if v.group(2).strip() == element
    ]
    if not lengths:
        raise PortabilityError(f"cannot find the vector type of {match.group(0)!r} in: {line.strip()}")
    return "<" + ", ".join([f"{element} {value}"] * lengths[-1]) + ">"


def _rename(text: str, old: str, new: str) -> str:
    pattern = re.compile(re.escape(old) + r'(?![-a-zA-Z$._0-9"])')
    return pattern.sub(new, text)


def _clean_global(text: str) -> str:
    # Numba's environment globals are `common`; inside a standalone module they
    # are private state of this function.
    text = re.sub(r"= common (local_unnamed_addr )?global", "= internal global", text)
    text = re.sub(r",\s*comdat(\([^)]*\))?", "", text)
    text = re.sub(r"\s+comdat(\([^)]*\))?", "", text)
    return text


def make_portable(ir: str, entry: str, *, name: str) -> PortableModule:
    """Extract ``entry`` and its dependencies from ``ir`` as a portable module.

    Parameters
    ----------
    ir : str
        LLVM IR text of a Numba library (``library.get_llvm_str()``).
    entry : str
        Mangled name of Numba's inner ABI function to keep.
    name : str
        New, readable name for the entry function (a valid LLVM identifier).

    Returns
    -------
    PortableModule
        The portable module.

    Raises
    ------
    PortabilityError
        If the entry is missing, or the module uses a construct with no LLVM 15
        equivalent (for example an x86-specific intrinsic in user code).
    """
    if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_.]*", name):
        raise IRError(f"invalid LLVM identifier for the entry: {name!r}")
    ir = _BLAS_CALL_RE.sub(lambda m: f"@numba_xx{m.group(1)}.{_BLAS_KINDS[m.group(2)][0]}(i8 {m.group(2)},", ir)
    links = sorted({(m.group(1), _BLAS_KINDS[m.group(2)][0]) for m in _LAPACK_CALL_RE.finditer(ir)})
    ir = _LAPACK_CALL_RE.sub(lambda m: f"@{m.group(1)}.{_BLAS_KINDS[m.group(2)][0]}(i8 {m.group(2)},", ir)
    header, entity_list, groups = split_module(ir)
    entity_list = _name_by_content(entity_list)
    entity_list, stable_entry = _stable_uids(entity_list, entry)
    for helper, kind in links:  # declare the kind-specific name with the helper's own signature
        declaration = next((e for e in entity_list if e.name == "@" + helper), None)
        if declaration is not None:
            entity_list.append(_Entity("declare", f"@{helper}.{kind}",
                                       declaration.text.replace(f"@{helper}(", f"@{helper}.{kind}(")))
    entities = {e.name: e for e in entity_list}
    entry_symbol = "@" + stable_entry if re.fullmatch(r"[-a-zA-Z$._0-9]+", stable_entry) else f'@"{stable_entry}"'
    if entry_symbol not in entities or entities[entry_symbol].kind != "define":
        raise PortabilityError(f"entry function {entry!r} is not defined in the module")

    keep = _reachable(entities, entry_symbol)
    numba_functions = {m.group(1) for e in entity_list if e.kind == "define"
                       if (m := _NUMBA_ABI_DEFINE_RE.match(e.text))}
    types = [e.text for e in entity_list if e.kind == "type"]
    globals_, defines, declares = [], [], []
    externals: list[str] = []
    for symbol in keep:
        if symbol in PORTABLE_RUNTIME:
            defines.append(PORTABLE_RUNTIME[symbol])
            continue
        entity = entities.get(symbol)
        if entity is None or (entity.kind == "declare" and symbol in _PORTABLE_RUNTIME_DECLS):
            if symbol in _PORTABLE_RUNTIME_DECLS:
                declares.append(_PORTABLE_RUNTIME_DECLS[symbol])
                externals.append(symbol.lstrip("@"))
                continue
            raise PortabilityError(f"symbol {symbol} is referenced but not declared")
        if entity.kind == "global":
            globals_.append(_clean_global(entity.text))
        elif entity.kind == "define" and symbol.startswith(_EXCINFO_UNWRAP):
            defines.append(_excinfo_unwrap_stub(symbol))
        elif entity.kind == "define" and symbol.startswith(_STRING_CODE):
            defines.append(_inactive_definition(entity.text))
        elif entity.kind == "define":
            text, compared = _opaque_address_comparisons(_split_shared_excinfo_slots(entity.text, numba_functions))
            defines.append(freeze_carried_selects(text)[0])
            if compared and _ADDRESS_DEFINITION not in defines:
                defines.append(_ADDRESS_DEFINITION)
        elif symbol.lstrip("@") in ERROR_PATH_STUBS:
            defines.append(_stub(entity.text))
        else:
            declares.append(_libm_declaration(_mark_inactive(entity.text), groups))
            externals.append(symbol.lstrip("@").strip('"'))

    used_groups: set[str] = set()
    out_lines: list[str] = [*header, ""]
    body = "\n".join([*types, "", *globals_, "", *defines, "", *declares])
    for line in body.splitlines():
        line = _rewrite_line(line)
        used_groups.update(re.findall(r"(?<![\w])#\d+\b", line))
        out_lines.append(line)
    for group in sorted(used_groups, key=lambda g: int(g[1:])):
        attrs = _translate_attr_group(groups.get(group, ""))
        out_lines.append(f"attributes {group} = {{ {attrs} }}" if attrs else f"attributes {group} = {{ }}")
    text = "\n".join(out_lines) + "\n"
    salt = hashlib.sha256(text.encode()).hexdigest()[:12]  # the module with numbered uids: stable
    text = _rename(_salt_uids(text, salt), _salt_uids(entry_symbol, salt), "@" + name)

    # Declarations may now repeat (two intrinsics mapped onto one libm name), or
    # be missing (a scalarized vector intrinsic calls a libm function).
    text = dedupe_declarations(text)
    text, added = _declare_libm_calls(text)
    externals.extend(added)
    leftover = re.search(r"@llvm\.x86\.[a-z0-9_.]+", text)
    if leftover:
        raise PortabilityError(
            f"the function uses the target-specific intrinsic {leftover.group(0)}, "
            "which cannot be made portable; rewrite the code that produces it"
        )
    return PortableModule(text=text, entry=name, external_functions=tuple(sorted(set(externals))),
                          links=tuple(links))


_LIBM_CALL_RE = re.compile(
    r"call (double|float) @(" + "|".join(sorted({*_NEW_MATH_INTRINSICS.values()})) + r")(f?)\("
)


def _declare_libm_calls(text: str) -> tuple[str, list[str]]:
    declared = {m.group(1) for m in map(_DEFINE_NAME_RE.match, text.splitlines()) if m}
    added: dict[str, str] = {}
    for match in _LIBM_CALL_RE.finditer(text):
        ty, name = match.group(1), match.group(2) + match.group(3)
        if "@" + name not in declared and name not in added:
            arity = 2 if match.group(2) == "atan2" else 1
            added[name] = f"declare {ty} @{name}({', '.join([ty] * arity)})"
    if not added:
        return text, []
    return text + "\n".join(added.values()) + "\n", list(added)


def dedupe_declarations(text: str) -> str:
    """Drop repeated ``declare`` lines (two names mapped onto one)."""
    seen: set[str] = set()
    out = []
    for line in text.splitlines():
        if line.startswith("declare "):
            match = _DEFINE_NAME_RE.match(line)
            if match:
                if match.group(1) in seen:
                    continue
                seen.add(match.group(1))
        out.append(line)
    return "\n".join(out) + "\n"


def has_recursion(text: str) -> bool:
    """Whether a function defined in module ``text`` can call itself (directly or through others).

    Deep recursion needs a deep stack; the engine runs such sweeps on a thread with a large one.
    """
    _, entities, _ = split_module(text)
    defined = {e.name: e for e in entities if e.kind == "define"}
    calls = {name: _global_symbols(e.text.split("\n", 1)[-1]) & defined.keys() for name, e in defined.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: finished

    def cycle_from(name: str) -> bool:
        state[name] = 1
        for callee in calls[name]:
            if state.get(callee) == 1 or (callee not in state and cycle_from(callee)):
                return True
        state[name] = 2
        return False

    return any(name not in state and cycle_from(name) for name in defined)
