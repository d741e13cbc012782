"""Enzyme's failures explained in the user's terms.

When Enzyme cannot differentiate a function, its own report names LLVM values,
Numba's runtime helpers and mangled function names. :func:`explain` turns that
into an :class:`~pyjlad.errors.EnzymeError` whose message starts with the
Numba/NumPy construct the user wrote, the source line(s) where it is used,
whether this is a known limit of pyjlad or a defect to report, and what to
write instead. Enzyme's own text stays in ``exc.diagnostics``.

How the construct is found:

1. the runtime helpers the module calls and Enzyme cannot see into
   (:data:`HELPER_CONSTRUCTS`: ``numba_list_*`` is a typed list, ...);
2. otherwise the Numba function Enzyme names in its report, demangled
   (``numba::np::linalg::eigh_impl`` is ``np.linalg.eigh``; a user's helper is
   named as such);

and its uses are located by walking the typed Numba IR of the function (and
of the ``@njit`` functions it calls) for calls, operators and statements with
that name.

Examples
--------
>>> demangle("_ZN5numba2np6linalg9eigh_impl12_3clocals_3e9eigh_implB3v36B42c8tJTIeFIjxB2IKSgI4Crv")
'numba.np.linalg.eigh_impl.<locals>.eigh_impl'
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from numba.core import config as numba_config

from .errors import EnzymeError, UnsupportedFunctionError

__all__ = ["Construct", "HELPER_CONSTRUCTS", "RESOURCE_FAILURES", "USE_CONSTRUCTS", "refuse_objmode", "enzyme_reason",
           "explain", "demangle", "uses", "out_of_resources"]


@dataclass(frozen=True)
class Construct:
    """A Numba/NumPy construct pyjlad may have to refuse.

    Attributes
    ----------
    name : str
        What the user wrote, e.g. ``"np.linalg.eigh"``.
    labels : tuple of str
        Names of its uses in the typed IR (see :func:`uses`) that point at it.
    limit : bool
        ``True`` for a known limit of pyjlad, ``False`` for a defect to report.
    advice : str
        What to write instead.
    """

    name: str
    labels: tuple[str, ...]
    limit: bool
    advice: str


_LINALG_ADVICE = (
    "pyjlad differentiates @, np.dot, np.outer, np.trace, np.linalg.norm (not a matrix's 2-norm, ord=2, "
    "which is an SVD), inv, det, solve and cholesky; "
    "rewrite with those (least squares: np.linalg.solve(A.T @ A, A.T @ b)), or compute this part outside "
    "the differentiated function"
)
_LAPACK = {
    "numba_ez_xxxevd": ("np.linalg.eigh / eigvalsh", ("np.linalg.eigh", "np.linalg.eigvalsh")),
    "numba_ez_rgeev": ("np.linalg.eig / eigvals", ("np.linalg.eig", "np.linalg.eigvals")),
    "numba_ez_cgeev": ("np.linalg.eig / eigvals", ("np.linalg.eig", "np.linalg.eigvals")),
    # (np.linalg.norm: the matrix 2-norm, ord=2, is the largest singular value; its other orders need no SVD,
    # and where ord is a constant the retry that prunes constant branches drops the SVD.)
    "numba_ez_gesdd": ("np.linalg.svd", ("np.linalg.svd", "np.linalg.pinv", "np.linalg.matrix_rank",
                                         "np.linalg.cond", "np.linalg.norm")),
    "numba_ez_gelsd": ("np.linalg.lstsq", ("np.linalg.lstsq",)),
    "numba_ez_geqrf": ("np.linalg.qr", ("np.linalg.qr",)),
    "numba_ez_xxgqr": ("np.linalg.qr", ("np.linalg.qr",)),
}
_RANDOM_ADVICE = ("draw the random numbers outside and pass them in as an argument "
                  "(they are constants for the derivative)")

#: Runtime helpers (symbol prefix) -> the construct that calls them.
HELPER_CONSTRUCTS: dict[str, Construct] = {
    **{symbol: Construct(name, labels, True, _LINALG_ADVICE) for symbol, (name, labels) in _LAPACK.items()},
    "numba_list_": Construct("a typed list (numba.typed.List or a list built inside the function)",
                             ("typed.List", "list"), True,
                             "store the values in a preallocated NumPy array instead of a list"),
    "numba_dict_": Construct("a typed dict (numba.typed.Dict or a dict built inside the function)",
                             ("typed.Dict", "dict"), True,
                             "use NumPy arrays indexed by integers instead of a dict"),
    "numba_gil_ensure": Construct("print() (it calls the Python interpreter)", ("print",), True,
                                  "print outside the differentiated function, e.g. on its result"),
    "PySys_FormatStdout": Construct("print() (it calls the Python interpreter)", ("print",), True,
                                    "print outside the differentiated function, e.g. on its result"),
    "numba_get_np_random_state": Construct("np.random (a random number generator inside the function)",
                                           ("np.random",), True, _RANDOM_ADVICE),
    "numba_rnd_": Construct("np.random / random (a random number generator inside the function)",
                            ("np.random", "random"), True, _RANDOM_ADVICE),
    # pyjlad.list_growth types the growth of the lists whose item kind it can tell; the others stay this call.
    "NRT_MemInfo_varsize_realloc": Construct(
        "a list that grows (list.append) whose items pyjlad cannot type: tuples with an integer first and floats "
        "after it, arrays beside floats, floats of two widths, or a list whose making pyjlad cannot follow "
        "(a list passed in from outside, or lists of different items grown by one helper)",
        ("list", "list.append"), True,
        "put a tuple's float fields first ((x, i) rather than (i, x)), keep arrays and floats in separate lists, "
        "grow a list where it is made, or fill a preallocated NumPy array instead"),
    # pyjlad defines the real kinds of Numba's BLAS helpers (pyjlad.portable); a complex kind stays this call.
    **{helper: Construct("a product of complex arrays (np.dot, np.vdot, @)", ("np.dot", "np.vdot", "@"), True,
                         "write it as np.sum(a * b) (np.vdot: np.sum(np.conj(a) * b)), a sum over one axis of a "
                         "broadcast product, or a loop: complex arithmetic differentiates")
       for helper in ("numba_xxdot", "numba_xxgemv", "numba_xxgemm")},
    "numba_unicode": Construct("string operations", ("str",), True,
                               "keep string handling outside the differentiated function"),
    # Numba allocates a jitclass instance with a destructor (which drops its members' references); pyjlad's
    # runtime replaces the allocators without one only.
    "NRT_MemInfo_alloc_dtor": Construct(
        "a jitclass instance created inside the function", ("jitclass",), True,
        "keep the model's numbers in NumPy arrays and floats passed as arguments (or a namedtuple of them) "
        "and write its methods as @njit functions that take them"),
}

_MERGE_SORT = "a merge sort (kind='mergesort': Numba's merge sort)"

#: Demangled Numba implementation paths -> what the user wrote.
_IMPL_NAMES = (
    (re.compile(r"^numba\.np\.linalg\.(dot_2_mm|dot_2_mv|dot_2_vm|dot_2_vv|dot_3)"), "a matrix product (@ / np.dot)",
     ("@", "np.dot")),
    (re.compile(r"^numba\.np\.linalg\.(?:_?)(\w+?)_impl"), "np.linalg.{0}", ("np.linalg.{0}",)),
    (re.compile(r"^numba\.np\.arraymath\.(?:array_|np_)?(\w+?)(?:_impl\w*)?(?:\.|$)"), "np.{0}", ("np.{0}", "array.{0}")),
    (re.compile(r"^numba\.np\.npyfuncs\.np_(\w+?)_impl"), "np.{0}", ("np.{0}",)),
    (re.compile(r"^numba\.cpython\.mathimpl\.(\w+?)_impl"), "math.{0}", ("math.{0}",)),
    (re.compile(r"^numba\.np\.arrayobj\.(fancy_getitem|fancy_setslice|array_getitem)\w*"), "array indexing",
     ("getitem[array]", "setitem[array]")),
    (re.compile(r"^numba\.misc\.quicksort\."), "a sort (np.sort, np.argsort: Numba's quicksort)",
     ("np.sort", "np.argsort", "array.sort", "array.argsort")),
    (re.compile(r"^numba\.misc\.mergesort\."), _MERGE_SORT, ("np.argsort", "np.sort", "array.argsort", "array.sort")),
)

#: What to write instead of an implementation of :data:`_IMPL_NAMES` (by its name), where more is known than
#: the general advice.
_IMPL_ADVICE = {
    _MERGE_SORT: "the default kind, quicksort (np.argsort(x), np.sort(x)), differentiates; its order differs from a "
        "stable sort's only among equal values",
}

_MANGLED_RE = re.compile(r"_ZN(?:\d+[A-Za-z_0-9]+?)+(?=E|B\d|\b)")
_PART_RE = re.compile(r"(\d+)")
_ESCAPE_RE = re.compile(r"_([0-9a-f]{2})")


#: Said with every refusal while Numba's debug information is on for the whole process.
_DEBUG_INFORMATION_ON = (
    "Numba's debug information is on for every function (NUMBA_DEBUGINFO=1, or NUMBA_ENABLE_PROFILING=1): "
    "Numba then keeps its own array and sorting routines out of line, in shapes Enzyme's type analysis "
    "handles less well (pyjlad compiles your functions without it, not Numba's); differentiate in a process "
    "without those variables.")


def demangle(symbol: str) -> str:
    """The dotted Python path of a Numba-mangled symbol (``_ZN5numba2np...``), or ``symbol`` itself."""
    start = symbol.find("_ZN")
    if start < 0:
        return symbol
    text, k, parts = symbol[start + 3:], 0, []
    while k < len(text) and text[k].isdigit():
        digits = _PART_RE.match(text, k)
        assert digits is not None
        size = int(digits.group(1))
        k = digits.end()
        parts.append(text[k:k + size])
        k += size
    if not parts:
        return symbol
    unescape = lambda m: chr(int(m.group(1), 16)) if not chr(int(m.group(1), 16)).isalnum() else m.group(0)  # noqa: E731
    return ".".join(_ESCAPE_RE.sub(unescape, part) for part in parts)


@dataclass(frozen=True)
class Use:
    """One use of a construct in the user's source."""

    label: str
    filename: str
    line: int
    function: str

    def where(self) -> str:
        code = linecache.getline(self.filename, self.line).strip()
        return f"{self.filename}:{self.line} (in {self.function}): {code}" if code else \
            f"{self.filename}:{self.line} (in {self.function})"


_OBJMODE = Construct("a `with numba.objmode()` block (Python code run by the interpreter)", ("objmode",), True,
                    "compute that part outside the differentiated function and pass its result in as an argument")
#: Constructs named by their use in the typed IR alone (no runtime helper of their own): each where Enzyme
#: fails on a function using it.
USE_CONSTRUCTS: dict[str, Construct] = {
    "objmode": _OBJMODE,
    "cfunc": Construct("a call of a @cfunc (through its address, which Enzyme cannot see into)", ("cfunc",),
                       True, "call an @njit version of it instead (numba.njit(the_cfunc._pyfunc)), whose body "
                       "pyjlad differentiates with the caller"),
}


def refuse_objmode(dispatcher: Any, argtypes: tuple, name: str) -> None:
    """Refuse a function whose typed IR (or a callee's) has a ``numba.objmode`` block, where it is: its
    module's pickled constants do not survive the passes that prepare Enzyme's input (an ``opt`` parse error
    before, 2026-12-04), and Enzyme cannot differentiate the interpreter anyway."""
    places = [u for u in uses(dispatcher, argtypes) if u.label == "objmode"]
    if places:
        raise UnsupportedFunctionError(
            f"pyjlad cannot differentiate {name}: it uses {_OBJMODE.name}, at {places[0].where()}. "
            f"This is a known limit of pyjlad. What to do: {_OBJMODE.advice}."
        )


def _label_of_callee(typ: Any) -> str | None:
    text = str(typ)
    if text.startswith("jitclass."):  # (a jitclass's constructor; its methods are ClassInstanceType.<name>)
        return "jitclass"
    for marker, label in (("ListType", "typed.List"), ("DictType", "typed.Dict"), ("UnicodeType", "str")):
        if marker in text:
            return label
    key = getattr(typ, "typing_key", None)
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[1], str):
        owner = getattr(key[0], "__name__", str(key[0]))
        owner = {"Array": "array", "ListType": "typed.List", "DictType": "typed.Dict", "UnicodeType": "str"}.get(
            owner, owner)
        return f"{owner}.{key[1]}"
    module = getattr(key, "__module__", None) or ""
    name = getattr(key, "__qualname__", None) or getattr(key, "__name__", None)
    if name is None:
        return None
    module = module.replace("numpy", "np", 1) if module.startswith("numpy") else module
    if module.startswith("np.random") or module.startswith("numpy.random"):
        return "np.random"
    if module in ("np", "np.core.multiarray", "np._core.multiarray", "np.core.fromnumeric",
                  "np._core.fromnumeric", "np.core.numeric", "np._core.numeric", "np.lib.function_base"):
        module = "np"
    return f"{module}.{name}" if module and module != "builtins" else name


def _overload(dispatcher: Any, argtypes: tuple) -> Any:
    overloads = getattr(dispatcher, "overloads", {})
    return overloads.get(tuple(argtypes)) or next(iter(overloads.values()), None)


def uses(dispatcher: Any, argtypes: tuple, *, depth: int = 3, seen: set | None = None) -> Iterator[Use]:
    """Every call, operator and statement of ``dispatcher``'s typed IR (and of the ``@njit``
    functions it calls, ``depth`` levels down), labelled: ``"np.sum"``, ``"math.lgamma"``,
    ``"array.max"``, ``"@"``, ``"print"``, ``"getitem[array]"``, ``"call helper"``, ...
    """
    from numba.core import ir

    seen = set() if seen is None else seen
    cres = _overload(dispatcher, argtypes)
    annotation = getattr(cres, "type_annotation", None)
    if getattr(annotation, "typemap", None) is None or id(cres) in seen:  # (loaded from Numba's disk cache: a str)
        return
    seen.add(id(cres))
    typemap, calltypes = annotation.typemap, annotation.calltypes
    function = getattr(getattr(dispatcher, "py_func", None), "__qualname__", "the function")
    for block in annotation.blocks.values():
        for stmt in block.body:
            loc = stmt.loc
            here = lambda label: Use(label, loc.filename, loc.line, function)  # noqa: B023, E731
            if isinstance(stmt, ir.Print):
                yield here("print")
            elif isinstance(stmt, ir.SetItem) and type(typemap.get(stmt.index.name)).__name__ == "Array":
                yield here("setitem[array]")
            if not (isinstance(stmt, ir.Assign) and isinstance(stmt.value, ir.Expr)):
                continue
            expr = stmt.value
            if expr.op == "call":
                callee = typemap.get(expr.func.name)
                inner = getattr(callee, "dispatcher", None)
                if type(inner).__name__ == "ObjModeLiftedWith":
                    yield here("objmode")
                    continue
                if type(callee).__name__ == "FunctionType":  # a first-class function: a @cfunc's address
                    yield here("cfunc")
                    continue
                if inner is not None:
                    name = getattr(inner.py_func, "__qualname__", "helper")
                    yield here(f"call {name}")
                    if depth > 0:
                        signature = calltypes.get(expr)
                        yield from uses(inner, tuple(signature.args) if signature else (), depth=depth - 1,
                                        seen=seen)
                    continue
                label = _label_of_callee(callee)
                if label:
                    yield here(label)
            elif expr.op in ("binop", "inplace_binop"):
                symbol = {"matmul": "@", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**"}.get(
                    getattr(expr.fn, "__name__", ""), None)
                if symbol:
                    yield here(symbol)
            elif expr.op == "getitem" and type(typemap.get(expr.index.name)).__name__ == "Array":
                yield here("getitem[array]")
            elif expr.op in ("build_map", "build_list", "list_comprehension"):
                yield here("dict" if expr.op == "build_map" else "list")


def _constructs_from_helpers(helpers: list[str]) -> list[tuple[str, Construct]]:
    """One entry per construct family (constructs with the same advice are one family)."""
    found: dict[str, tuple[str, Construct]] = {}
    for symbol in helpers:
        for prefix, construct in HELPER_CONSTRUCTS.items():
            if symbol.startswith(prefix):
                found.setdefault(construct.advice, (symbol, construct))
    return list(found.values())


def _construct_from_report(diagnostics: str, user_functions: set[str]) -> tuple[str, Construct] | None:
    """The construct behind the first Numba function Enzyme's report names."""
    for match in _MANGLED_RE.finditer(diagnostics):
        path = demangle(match.group(0))
        for pattern, name, labels in _IMPL_NAMES:
            found = pattern.match(path)
            if found:
                args = found.groups()
                advice = _IMPL_ADVICE.get(name, "rewriting that operation as an explicit loop usually avoids it")
                return path, Construct(name.format(*args), tuple(lb.format(*args) for lb in labels), False, advice)
        qualname = path.split(".")[-1]
        for function in user_functions:
            if path.endswith(function) or qualname == function.split(".")[-1]:
                short = function.split(".")[-1]
                return path, Construct(
                    f"your function {function}", (f"call {function}",), False,
                    f"decorating {short} with @numba.njit(inline='always') often avoids it (Numba then compiles "
                    f"its body into the caller, which Enzyme differentiates as one function: a matrix exponential "
                    f"helper failed so and worked inlined), or simplify {short}")
    return None


_TOOLCHAIN_FAILURES = ("Failed to load passes", "Could not load library", "unknown pass name 'enzyme'")
#: How :meth:`pyjlad.toolchain.runner.Toolchain.run` reports an ``opt`` stopped at its time or memory limit.
RESOURCE_FAILURES = ("did not finish differentiating", "ran out of memory differentiating")


def out_of_resources(error: EnzymeError) -> str:
    """The first line of ``error`` where Enzyme was stopped at ``PYJLAD_OPT_TIMEOUT`` or ``PYJLAD_OPT_MEMORY``
    rather than failing; ``""`` otherwise.

    >>> out_of_resources(EnzymeError("Enzyme ran out of memory differentiating f: it may take 2.0 GiB\\nopt: ..."))
    'Enzyme ran out of memory differentiating f: it may take 2.0 GiB'
    >>> out_of_resources(EnzymeError("Enzyme failed"))
    ''
    """
    text = str(error)
    return text.splitlines()[0] if any(sign in text for sign in RESOURCE_FAILURES) else ""
_SUMMARY_RE = re.compile(r"Assertion `.*' failed|^Illegal \w+|^LLVM ERROR")


def enzyme_reason(diagnostics: str) -> str:
    """Enzyme's one-line reason, for the end of the message (IR dumps skipped)."""
    lines = [line.strip() for line in diagnostics.splitlines() if not line.lstrip().startswith(";")]
    for line in lines:
        if "Enzyme:" in line and not line.startswith(("@", "%", "define ", "declare ")):
            reason = line.split("Enzyme:", 1)[1].strip()
            if reason and reason != "<analysis>" and not reason.startswith(("oldFunc:", ";")):  # not a dump's header
                return reason[:200]
    for k, line in enumerate(lines):
        if line.startswith("Cannot deduce"):  # type analysis, its reason on a line of its own after a dump
            return line[:200]
        if line.startswith("cannot handle"):  # a missing rule, after a dump; the next line may name what it lacks
            following = lines[k + 1] if k + 1 < len(lines) else ""
            named = following and " " not in following and not following.startswith(("%", "@", "}"))
            return f"{line} {following}"[:200] if named else line[:200]
    for line in lines:
        found = _SUMMARY_RE.search(line)
        if found:  # an assertion: the assertion itself, not the program and function before it
            return (found.group(0) if found.group(0).startswith("Assertion") else line)[:200]
    return next((line[:200] for line in lines if line.startswith("error:") and "<analysis>" not in line), "")


def explain(exported: Any, error: EnzymeError, helpers: list[str]) -> EnzymeError:
    """An :class:`EnzymeError` for ``error`` that speaks of what the user wrote.

    Parameters
    ----------
    exported : ExportedFunction
        The function Enzyme failed on.
    error : EnzymeError
        Enzyme's failure (its ``diagnostics`` are kept).
    helpers : list of str
        External functions of the module Enzyme has no derivative rules for.
    """
    diagnostics = error.diagnostics or str(error)
    if any(marker in diagnostics for marker in _TOOLCHAIN_FAILURES):
        return error  # the plugin itself did not load: a toolchain problem, already said so
    all_uses = list(uses(exported.run, exported.argtypes))
    user_functions = {u.function for u in all_uses}
    # A helper names its construct only where the function really uses it: Numba's own code
    # reaches the same helpers (numba_gil_ensure from an error path), and blaming print() or
    # a typed container the user never wrote would send them looking for the wrong thing.
    used = {u.label for u in all_uses}
    found = [(symbol, construct) for symbol, construct in _constructs_from_helpers(helpers)
             if used.intersection(construct.labels)]
    if not found:
        found = [(label, construct) for label, construct in USE_CONSTRUCTS.items() if label in used]
    if not found:
        from_report = _construct_from_report(diagnostics, user_functions)
        found = [from_report] if from_report else []
    lines = []
    stopped = out_of_resources(error)
    if stopped:  # what stopped it, not a construct Enzyme refused
        lines.append(f"pyjlad cannot differentiate {exported.name}: {stopped}")
        found = []
    elif not found:
        lines.append(f"pyjlad cannot differentiate {exported.name}: Enzyme failed on it "
                     "(no construct of the function could be identified as the cause).")
    for symbol, construct in found:
        places = [u for u in all_uses if u.label in construct.labels]
        lines.append(f"pyjlad cannot differentiate {exported.name}: it uses {construct.name}"
                     + (f" (Numba implements it with {symbol}, which Enzyme cannot see into)"
                        if construct.limit and symbol not in USE_CONSTRUCTS else "") + ".")
        lines += [f"  at {u.where()}" for u in dict.fromkeys(places)][:5]
    known = found and all(c.limit for _, c in found)
    if known:
        lines.append("This is a known limit of pyjlad.")
    else:
        lines.append("This is a defect in pyjlad or Enzyme, not in your code: please report it with "
                     "exc.diagnostics attached.")
    for advice in dict.fromkeys(c.advice for _, c in found):
        lines.append(f"What to do: {advice}.")
    if numba_config.DEBUGINFO_DEFAULT:
        lines.append(_DEBUG_INFORMATION_ON)
    summary = enzyme_reason(diagnostics)
    if summary:
        lines.append(f"Enzyme's message: {summary}")
    lines.append("Enzyme's full report is in exc.diagnostics.")
    return EnzymeError("\n".join(lines), diagnostics=diagnostics)
