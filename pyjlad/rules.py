"""Custom derivative rules for ``@njit`` functions of float scalars.

Modelled on JAX's ``custom_jvp``/``custom_vjp`` and Enzyme.jl's ``EnzymeRules``:

>>> import math, pyjlad
>>> from numba import njit
>>> @pyjlad.custom_derivative
... @njit
... def cube_root(x):                     # Newton iterations: differentiate the answer, not the loop
...     t = 1.0
...     for _ in range(60):
...         t -= (t * t * t - x) / (3.0 * t * t)
...     return t
>>> @cube_root.defjvp
... @njit
... def cube_root_jvp(x, dx):             # primals, then tangents -> (value, tangent)
...     t = cube_root(x)
...     return t, dx / (3.0 * t * t)
>>> @cube_root.defvjp
... @njit
... def cube_root_vjp(x, g):              # primals, then the output adjoint -> input adjoint(s)
...     t = cube_root(x)
...     return g / (3.0 * t * t)
>>> @njit
... def loss(x):
...     return 2.0 * cube_root(x)
>>> round(pyjlad.gradient(loss, 8.0), 12)  # 2 / (3 * 2**2)
0.166666666667

How it works. Numba code that calls a :class:`CustomDerivative` does not
inline it: the call is compiled as a call to an external C function
``double pyjlad_rule_<name>(double, ...)``, which at run time is the function
itself compiled as a ``@cfunc``. When pyjlad differentiates the caller, it links
a module that defines that symbol (the function's own Numba IR behind a plain
C signature), an augmented forward pass and a reverse pass calling the
``defvjp`` rule, and a forward derivative calling the ``defjvp`` rule, and
registers them with Enzyme (``__enzyme_register_gradient_<symbol>`` and
``__enzyme_register_derivative_<symbol>``). Only float values cross that
boundary: Numba's status code stays inside the adapters, so Enzyme never sees
an integer return it could mistake for a differentiable value.

A mode without a rule differentiates the function's body as usual.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable
from typing import Any

import numba
from llvmlite import ir as llvmir
from numba import types as nbtypes
from numba.core import cgutils
from numba.core.dispatcher import Dispatcher
from numba.core.imputils import lower_builtin
from numba.core.typing.templates import make_concrete_template
from numba.extending import typeof_impl

from .errors import UnsupportedFunctionError
from .portable_pipeline import make_portable

__all__ = ["custom_derivative", "CustomDerivative", "RULE_PREFIX", "rule_modules", "is_rule_symbol"]

#: Prefix of the external symbols through which Numba code calls a rule.
RULE_PREFIX = "pyjlad_rule_"

_registry: dict[str, CustomDerivative] = {}
_lock = threading.RLock()


def _as_dispatcher(func: Any, what: str) -> Dispatcher:
    if isinstance(func, CustomDerivative):
        return func.dispatcher
    if isinstance(func, Dispatcher):
        return func
    if callable(func) and hasattr(func, "__code__"):
        return numba.njit(func)
    raise UnsupportedFunctionError(f"{what} must be an @njit function or a plain Python function, got {func!r}")


def _positional_arity(py_func: Callable[..., Any], what: str) -> int:
    params = list(inspect.signature(py_func).parameters.values())
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if any(p.kind not in plain or p.default is not inspect.Parameter.empty for p in params):
        raise UnsupportedFunctionError(
            f"{what} must take plain positional arguments (no defaults, *args or keywords)"
        )
    return len(params)


class CustomDerivative:
    """An ``@njit`` function of float scalars with hand-written derivatives.

    Create it with :func:`custom_derivative`; give rules with :meth:`defjvp`
    (forward mode) and :meth:`defvjp` (reverse mode). Call it like the
    function, from Python or from other ``@njit`` code. Its arguments and
    result are float64 scalars.

    Attributes
    ----------
    dispatcher : numba Dispatcher
        The function itself.
    nargs : int
        Its number of (float) arguments.
    symbol : str
        The external symbol Numba code calls it through.
    jvp_rule, vjp_rule : numba Dispatcher or None
        The registered rules.
    """

    def __init__(self, func: Any) -> None:
        self.dispatcher = _as_dispatcher(func, "the function given to pyjlad.custom_derivative")
        py_func = self.dispatcher.py_func
        self.nargs = _positional_arity(py_func, f"{py_func.__qualname__} (a custom_derivative)")
        if self.nargs == 0:
            raise UnsupportedFunctionError(f"{py_func.__qualname__} takes no arguments: nothing to differentiate")
        self.__name__ = py_func.__name__
        self.__qualname__ = py_func.__qualname__
        self.__doc__ = py_func.__doc__
        self.__wrapped__ = py_func
        self.signature = nbtypes.float64(*([nbtypes.float64] * self.nargs))
        self.jvp_rule: Dispatcher | None = None
        self.vjp_rule: Dispatcher | None = None
        self._cfunc: Any = None
        self._modules: list[str] | None = None
        base = RULE_PREFIX + (re.sub(r"[^a-zA-Z0-9_]", "_", py_func.__qualname__).strip("_") or "f")
        with _lock:
            symbol, k = base, 1
            while symbol in _registry:
                k += 1
                symbol = f"{base}_{k}"
            self.symbol = symbol
            _registry[symbol] = self

    # -- registration ---------------------------------------------------------
    def defjvp(self, rule: Any) -> Any:
        """Register the forward rule ``rule(*primals, *tangents) -> (value, tangent)``; returns ``rule``."""
        dispatcher = _as_dispatcher(rule, f"the forward rule of {self.__qualname__}")
        self._check_arity(dispatcher, 2 * self.nargs, "forward rule", "its primals then one tangent per primal")
        self.jvp_rule = dispatcher
        self._modules = None
        return rule

    def defvjp(self, rule: Any) -> Any:
        """Register the reverse rule ``rule(*primals, g) -> adjoint(s)``; returns ``rule``.

        It returns one adjoint per argument: a float for a one-argument
        function, a tuple of ``nargs`` floats otherwise.
        """
        dispatcher = _as_dispatcher(rule, f"the reverse rule of {self.__qualname__}")
        self._check_arity(dispatcher, self.nargs + 1, "reverse rule", "its primals then the output adjoint")
        self.vjp_rule = dispatcher
        self._modules = None
        return rule

    def _check_arity(self, dispatcher: Dispatcher, want: int, what: str, layout: str) -> None:
        have = _positional_arity(dispatcher.py_func, f"the {what} of {self.__qualname__}")
        if have != want:
            raise UnsupportedFunctionError(
                f"the {what} of {self.__qualname__} takes {have} argument(s); it must take {want}: {layout}"
            )

    # -- calling ---------------------------------------------------------------
    def __call__(self, *args: Any) -> Any:
        return self.dispatcher(*args)

    def __repr__(self) -> str:
        return f"<pyjlad.custom_derivative {self.__qualname__} as {self.symbol}>"

    def _numba_type(self) -> nbtypes.Function:
        """The Numba type of this object in ``@njit`` code (see :func:`_make_lowering`)."""
        with _lock:
            if self._cfunc is None:
                import llvmlite.binding as llvm

                entry = _generated("entry", ["p"], f"return float(f({_joined('p[{}]', self.nargs)}))", self.dispatcher)
                self._cfunc = numba.cfunc(nbtypes.float64(nbtypes.CPointer(nbtypes.float64)))(entry)
                llvm.add_symbol(self.symbol, self._cfunc.address)
                lower_builtin(self, *self.signature.args)(_make_lowering(self.symbol, self.nargs))
        return nbtypes.Function(make_concrete_template(f"custom_derivative({self.symbol})", self, [self.signature]))

    def __pyjlad_dispatcher__(self) -> Dispatcher:
        """An ``@njit`` function calling this one through its symbol (to differentiate it directly)."""
        names = [f"a{i}" for i in range(self.nargs)]
        return numba.njit(_generated(self.__name__, names, f"return f({', '.join(names)})", self))

    # -- the module Enzyme sees ------------------------------------------------
    def modules(self) -> list[str]:
        """Portable IR modules defining the symbol and its registered derivatives (to be linked).

        Built once per set of rules (registering a rule rebuilds them).

        The symbol is ``double <symbol>(ptr args)``: the arguments travel in a
        buffer of ``nargs`` doubles, so Enzyme sees one pointer argument, which
        is active (it then passes a shadow buffer) or constant (it passes the
        buffer itself as its shadow: the rules below then add nothing).

        - reverse: ``{ptr, double} <symbol>.aug(ptr args, ptr dargs)`` copies
          the arguments to a tape (the caller may overwrite the buffer before the
          reverse pass) and returns it with the value;
          ``void <symbol>.rev(ptr args, ptr dargs, double dret, ptr tape)``
          calls the ``defvjp`` rule on the taped arguments and adds the adjoints
          into ``dargs``;
        - forward: ``{double, double} <symbol>.fwd(ptr args, ptr dargs)`` calls
          the ``defjvp`` rule with the arguments and their tangents.
        """
        with _lock:
            if self._modules is None:
                self._modules = self._build_modules()
            return list(self._modules)

    def _build_modules(self) -> list[str]:
        n, sym = self.nargs, self.symbol
        args = [f"a{i}" for i in range(n)]
        modules = [self._compiled("primal", self.dispatcher, f"return float(f({', '.join(args)}))", args)]
        declares = [_declare(f"{sym}.primal", n), "declare ptr @malloc(i64)", "declare void @free(ptr)"]
        glue = [_entry_adapter(sym, n)]
        if self.vjp_rule is not None:
            result = self._rule_result(self.vjp_rule, n + 1, n, "reverse")
            modules.append(self._compiled("vjp", self.vjp_rule, f"r = f({', '.join([*args, 'g'])})\n    return {result}",
                                          [*args, "g"]))
            declares.append(_declare(f"{sym}.vjp", n + 1))
            glue += [_augmented_adapter(sym, n), _reverse_adapter(sym, n),
                     f"@__enzyme_register_gradient_{sym} = global [3 x ptr] "
                     f"[ptr @{sym}, ptr @{_quote(sym + '.aug')}, ptr @{_quote(sym + '.rev')}]"]
        if self.jvp_rule is not None:
            tangents = [f"t{i}" for i in range(n)]
            result = self._rule_result(self.jvp_rule, 2 * n, 2, "forward")
            modules.append(self._compiled("jvp", self.jvp_rule,
                                          f"r = f({', '.join([*args, *tangents])})\n    return {result}",
                                          [*args, *tangents]))
            declares.append(_declare(f"{sym}.jvp", 2 * n))
            glue += [_forward_adapter(sym, n),
                     f"@__enzyme_register_derivative_{sym} = global [2 x ptr] "
                     f"[ptr @{sym}, ptr @{_quote(sym + '.fwd')}]"]
        header = [line for line in modules[0].splitlines() if line.startswith(("target datalayout", "target triple"))]
        modules.append("\n".join([*header, *declares, *glue]) + "\n")
        return modules

    def _rule_result(self, rule: Dispatcher, nargs: int, nout: int, what: str) -> str:
        """The expression turning the rule's result ``r`` into a tuple of ``nout`` floats."""
        sig = tuple([nbtypes.float64] * nargs)
        try:
            rule.compile(sig)
        except Exception as exc:
            raise UnsupportedFunctionError(
                f"the {what} rule of {self.__qualname__} does not compile for float64 arguments: {exc}"
            ) from exc
        restype = rule.overloads[sig].signature.return_type
        floats = (nbtypes.Float, nbtypes.Integer, nbtypes.Boolean)
        if nout == 1 and isinstance(restype, floats):
            return "(float(r),)"
        if isinstance(restype, nbtypes.BaseTuple) and len(restype) == nout and all(
                isinstance(t, floats) for t in restype):
            return "(" + "".join(f"float(r[{i}]), " for i in range(nout)) + ")"
        shape = "(value, tangent)" if what == "forward" else (
            "a float" if nout == 1 else f"a tuple of {nout} floats (one adjoint per argument)")
        raise UnsupportedFunctionError(
            f"the {what} rule of {self.__qualname__} returns {restype}; it must return {shape}"
        )

    def _compiled(self, role: str, target: Dispatcher, body: str, names: list[str]) -> str:
        """Portable IR of ``def w(*names): body`` (calling ``target`` as ``f``), entry ``<symbol>.<role>``."""
        wrapper = numba.njit(error_model="numpy")(_generated("w", names, body, target))
        sig = tuple([nbtypes.float64] * len(names))
        try:
            wrapper.compile(sig)
        except Exception as exc:
            raise UnsupportedFunctionError(
                f"{self.__qualname__} ({role}) does not compile for float64 arguments: {exc}"
            ) from exc
        cres = wrapper.overloads[sig]
        return make_portable(cres.library.get_llvm_str(), cres.fndesc.mangled_name, name=f"{self.symbol}.{role}").text


def _joined(pattern: str, n: int) -> str:
    return ", ".join(pattern.format(i) for i in range(n))


def _generated(name: str, params: list[str], body: str, f: Any) -> Callable[..., Any]:
    """A Python function ``def name(*params): body`` in which ``f`` is bound (generated from names only)."""
    namespace: dict[str, Any] = {"f": f}
    exec(f"def {name}({', '.join(params)}):\n    {body}\n", namespace)  # noqa: S102
    return namespace[name]


def _make_lowering(symbol: str, nargs: int) -> Callable[..., Any]:
    def lower(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        double = llvmir.DoubleType()
        buffer = cgutils.alloca_once(builder, llvmir.ArrayType(double, nargs), name="rule.args")
        for i, (value, ty) in enumerate(zip(args, sig.args)):
            value = context.cast(builder, value, ty, nbtypes.float64)
            builder.store(value, builder.gep(buffer, [context.get_constant(nbtypes.int32, 0),
                                                      context.get_constant(nbtypes.int32, i)]))
        fnty = llvmir.FunctionType(double, [llvmir.IntType(8).as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
        return builder.call(fn, [builder.bitcast(buffer, llvmir.IntType(8).as_pointer())])

    return lower


def _declare(name: str, nargs: int) -> str:
    return f"declare i32 @{_quote(name)}(ptr, ptr, {', '.join(['double'] * nargs)})"


def _struct(n: int) -> str:
    return "{ " + ", ".join(["double"] * n) + " }"


def _loads(buffer: str, n: int, prefix: str) -> list[str]:
    """IR loading ``n`` doubles from ``buffer`` into ``%<prefix><i>``."""
    lines = []
    for i in range(n):
        lines.append(f"  %{prefix}{i}.p = getelementptr inbounds double, ptr %{buffer}, i64 {i}")
        lines.append(f"  %{prefix}{i} = load double, ptr %{prefix}{i}.p, align 8")
    return lines


def _call_numba(callee: str, ret: str, values: list[str]) -> list[str]:
    """IR calling Numba's ABI function ``@callee`` and loading its result as ``%res`` (status dropped)."""
    return [
        f"  %res.p = alloca {ret}, align 8",
        "  %exc = alloca ptr, align 8",
        f"  %status = call i32 @{_quote(callee)}(ptr %res.p, ptr %exc, "
        + ", ".join(f"double %{v}" for v in values) + ")",
        f"  %res = load {ret}, ptr %res.p, align 8",
    ]


def _entry_adapter(sym: str, n: int) -> str:
    return "\n".join([
        f"define linkonce_odr double @{_quote(sym)}(ptr %args) {{",
        "entry:",
        *_loads("args", n, "a"),
        *_call_numba(f"{sym}.primal", "double", [f"a{i}" for i in range(n)]),
        "  ret double %res",
        "}",
    ])


def _augmented_adapter(sym: str, n: int) -> str:
    return "\n".join([
        f"define linkonce_odr {{ ptr, double }} @{_quote(sym + '.aug')}(ptr %args, ptr %dargs) {{",
        "entry:",
        f"  %tape = call ptr @malloc(i64 {8 * n})",
        *_loads("args", n, "a"),
        *(line for i in range(n) for line in (
            f"  %tape{i}.p = getelementptr inbounds double, ptr %tape, i64 {i}",
            f"  store double %a{i}, ptr %tape{i}.p, align 8")),
        f"  %value = call double @{_quote(sym)}(ptr %args)",
        "  %out0 = insertvalue { ptr, double } undef, ptr %tape, 0",
        "  %out = insertvalue { ptr, double } %out0, double %value, 1",
        "  ret { ptr, double } %out",
        "}",
    ])


def _reverse_adapter(sym: str, n: int) -> str:
    lines = [
        f"define linkonce_odr void @{_quote(sym + '.rev')}(ptr %args, ptr %dargs, double %dret, ptr %tape) {{",
        "entry:",
        "  %constant = icmp eq ptr %args, %dargs",  # Enzyme passes the buffer itself as a constant's shadow
        "  br i1 %constant, label %done, label %accumulate",
        "accumulate:",
        *_loads("tape", n, "a"),
        *_call_numba(f"{sym}.vjp", _struct(n), [*(f"a{i}" for i in range(n)), "dret"]),
    ]
    for i in range(n):
        lines += [
            f"  %g{i} = extractvalue {_struct(n)} %res, {i}",
            f"  %d{i}.p = getelementptr inbounds double, ptr %dargs, i64 {i}",
            f"  %d{i} = load double, ptr %d{i}.p, align 8",
            f"  %d{i}.new = fadd double %d{i}, %g{i}",
            f"  store double %d{i}.new, ptr %d{i}.p, align 8",
        ]
    return "\n".join([*lines, "  br label %done", "done:", "  call void @free(ptr %tape)", "  ret void", "}"])


def _forward_adapter(sym: str, n: int) -> str:
    return "\n".join([
        f"define linkonce_odr {{ double, double }} @{_quote(sym + '.fwd')}(ptr %args, ptr %dargs) {{",
        "entry:",
        *_loads("args", n, "a"),
        *_loads("dargs", n, "t"),
        *_call_numba(f"{sym}.jvp", _struct(2), [*(f"a{i}" for i in range(n)), *(f"t{i}" for i in range(n))]),
        f"  ret {_struct(2)} %res",
        "}",
    ])


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[-a-zA-Z$._0-9]+", name) else f'"{name}"'


@typeof_impl.register(CustomDerivative)
def _typeof_custom_derivative(value: CustomDerivative, context: Any) -> nbtypes.Type:
    return value._numba_type()


def custom_derivative(func: Any) -> CustomDerivative:
    """Give ``func`` (an ``@njit`` function of float scalars) hand-written derivatives.

    Parameters
    ----------
    func : callable
        An ``@njit`` function (or plain Python function) taking float
        arguments and returning a float.

    Returns
    -------
    CustomDerivative
        Callable like ``func`` (also from ``@njit`` code); register rules with
        its ``defjvp`` and ``defvjp`` decorators:

        - forward: ``jvp(*primals, *tangents) -> (value, tangent)``;
        - reverse: ``vjp(*primals, g) -> adjoint`` (a float for one argument,
          a tuple with one float per argument otherwise).

        Rules are ``@njit`` functions; they must not raise. A mode without a
        rule differentiates ``func``'s body.
    """
    return CustomDerivative(func)


def is_rule_symbol(name: str) -> bool:
    """Whether ``name`` is the external symbol of a registered :class:`CustomDerivative`."""
    return name in _registry


def rule_modules(symbol: str) -> list[str]:
    """The modules (:meth:`CustomDerivative.modules`) of the rule called through ``symbol``."""
    try:
        rule = _registry[symbol]
    except KeyError:
        raise UnsupportedFunctionError(f"no pyjlad.custom_derivative is registered as {symbol}") from None
    return rule.modules()
