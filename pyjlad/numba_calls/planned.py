"""The typing template every pyjlad callable shares inside ``@njit`` code: one plan per argument types.

A pyjlad callable (a derivative, a raw sweep, a product, a ``vmap``) has a Numba
type that is a :class:`PlannedCallable`. Typing a call with argument types Numba
inferred makes, once per (unliteral) argument types, a *plan*: the call's
signature and its lowering, which is registered with ``lower_builtin`` under the
lowering function itself (the implementation key Numba looks up). Subclasses say
only how to make the plan (:meth:`PlannedCallable.make_plan`); a plan whose
lowering is a generated Python function compiled into the caller takes it from
:func:`compiled_into_caller`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import FunctionType
from typing import Any

from numba import types
from numba.core.errors import TypingError
from numba.core.imputils import lower_builtin

__all__ = ["Plan", "PlannedCallable", "compiled_into_caller"]

#: ``(signature, lowering, anything the plan must keep alive)``.
Plan = tuple[Any, Callable[..., Any], Any]


class PlannedCallable(types.Callable, types.Dummy):
    """A Numba callable type whose calls are typed and lowered by a plan made once per argument types."""

    def __init__(self, name: str) -> None:
        self._plans: dict[tuple[types.Type, ...], Plan] = {}
        super().__init__(name=name)

    def make_plan(self, context: Any, args: tuple[types.Type, ...]) -> Plan:
        """The plan of a call with ``args`` (unliteral): raise ``TypingError`` for arguments it cannot take."""
        raise NotImplementedError

    def keywords_refused(self) -> str:
        """The ``TypingError`` message of a call with keyword arguments."""
        return f"{self} takes positional arguments only inside @njit code"

    def get_call_type(self, context: Any, args: tuple[types.Type, ...], kws: dict[str, types.Type]) -> Any:
        """Type a call: make (once) and register the plan for ``args``; its signature."""
        if kws:
            raise TypingError(self.keywords_refused())
        args = tuple(types.unliteral(a) for a in args)
        known = self._plans.get(args)
        if known is None:
            sig, impl, keep = self.make_plan(context, args)
            lower_builtin(impl, *args)(impl)
            known = self._plans[args] = (sig, impl, keep)
        return known[0]

    def get_call_signatures(self) -> tuple[list[Any], bool]:
        return [plan[0] for plan in self._plans.values()], True

    def get_impl_key(self, sig: Any) -> Any:
        return self._plans[tuple(sig.args)][1]


_SERIAL = itertools.count()


def _own_code(pyfunc: FunctionType) -> FunctionType:
    """``pyfunc`` with a code object equal to no other function's (a numbered name)."""
    code, serial = pyfunc.__code__, next(_SERIAL)
    code = code.replace(co_name=f"{code.co_name}_{serial}", co_qualname=f"{code.co_qualname}_{serial}")
    return FunctionType(code, pyfunc.__globals__, code.co_name, pyfunc.__defaults__, pyfunc.__closure__)


def compiled_into_caller(pyfunc: FunctionType) -> Callable[..., Any]:
    """The lowering of a call that compiles the generated function ``pyfunc`` into the caller.

    ``context.compile_internal`` links ``pyfunc``'s callees (sweeps, loops) into
    the caller, so no Python runs. Numba remembers what it compiled by the
    function's code object and the signature, and the code objects of two
    functions generated from the same source are equal even when their globals
    (the function differentiated, its sweeps) differ: a second product or
    ``vmap`` of the same shape, called with the same types, would run the first
    one's code. So ``pyfunc`` gets a code object of its own first.
    """
    own = _own_code(pyfunc)

    def impl(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        return context.compile_internal(builder, own, sig, llargs)

    return impl
