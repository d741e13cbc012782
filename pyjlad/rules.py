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
The call site and the adapters are written by :mod:`pyjlad.rules_ir`.

A mode without a rule differentiates the function's body as usual.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numba
from numba import types as nbtypes
from numba.core.dispatcher import Dispatcher
from numba.core.imputils import lower_builtin
from numba.core.typing.templates import make_concrete_template
from numba.extending import typeof_impl

from .errors import UnsupportedFunctionError
from .ir.names import c_identifier
from .portable_pipeline import make_portable
from .rules_ir import call_lowering, glue_module

__all__ = ["calls_custom_rules", "calls_reverse_rules", "custom_derivative", "CustomDerivative", "RULE_PREFIX", "rule_modules", "is_rule_symbol"]

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
        base = RULE_PREFIX + c_identifier(py_func.__qualname__)
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
        """The Numba type of this object in ``@njit`` code (see :func:`~pyjlad.rules_ir.call_lowering`)."""
        with _lock:
            if self._cfunc is None:
                import llvmlite.binding as llvm

                entry = _generated("entry", ["p"], f"return float(f({_joined('p[{}]', self.nargs)}))", self.dispatcher)
                self._cfunc = numba.cfunc(nbtypes.float64(nbtypes.CPointer(nbtypes.float64)))(entry)
                llvm.add_symbol(self.symbol, self._cfunc.address)
                lower_builtin(self, *self.signature.args)(call_lowering(self.symbol, self.nargs))
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
        """The Numba modules of the function and its rules, then the glue module (:func:`glue_module`)."""
        n = self.nargs
        args = [f"a{i}" for i in range(n)]
        modules = [self._compiled("primal", self.dispatcher, f"return float(f({', '.join(args)}))", args)]
        if self.vjp_rule is not None:
            result = self._rule_result(self.vjp_rule, n + 1, n, "reverse")
            modules.append(self._compiled("vjp", self.vjp_rule, f"r = f({', '.join([*args, 'g'])})\n    return {result}",
                                          [*args, "g"]))
        if self.jvp_rule is not None:
            tangents = [f"t{i}" for i in range(n)]
            result = self._rule_result(self.jvp_rule, 2 * n, 2, "forward")
            modules.append(self._compiled("jvp", self.jvp_rule,
                                          f"r = f({', '.join([*args, *tangents])})\n    return {result}",
                                          [*args, *tangents]))
        header = [line for line in modules[0].splitlines() if line.startswith(("target datalayout", "target triple"))]
        modules.append(glue_module(self.symbol, n, header, reverse=self.vjp_rule is not None,
                                   forward=self.jvp_rule is not None))
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

        Rules are ``@njit`` functions; they must not raise (a rule that raises
        gives NaN for what it computes). A mode without a
        rule differentiates ``func``'s body.
    """
    return CustomDerivative(func)


def is_rule_symbol(name: str) -> bool:
    """Whether ``name`` is the external symbol of a registered :class:`CustomDerivative`."""
    return name in _registry


def calls_custom_rules(external_functions: Iterable[str]) -> bool:
    """Whether a module declaring ``external_functions`` calls a registered :class:`CustomDerivative`."""
    return any(is_rule_symbol(name) for name in external_functions)


def calls_reverse_rules(external_functions: Iterable[str]) -> bool:
    """Whether a module declaring ``external_functions`` calls a registered :class:`CustomDerivative` that has a
    reverse (``defvjp``) rule: its Hessian-vector products are then those of the reverse rule (forward over
    reverse, :func:`pyjlad.engines.hvp_driver.hvp_driver`)."""
    return any(_registry[name].vjp_rule is not None for name in external_functions if name in _registry)


def rule_modules(symbol: str) -> list[str]:
    """The modules (:meth:`CustomDerivative.modules`) of the rule called through ``symbol``."""
    try:
        rule = _registry[symbol]
    except KeyError:
        raise UnsupportedFunctionError(f"no pyjlad.custom_derivative is registered as {symbol}") from None
    return rule.modules()
