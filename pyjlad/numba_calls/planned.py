"""The typing template every pyjlad callable shares inside ``@njit`` code: one plan per argument types.

A pyjlad callable (a derivative, a raw sweep, a product, a ``vmap``) has a Numba
type that is a :class:`PlannedCallable`. Typing a call with argument types Numba
inferred makes, once per (unliteral) argument types, a *plan*: the call's
signature and its lowering, which is registered with ``lower_builtin`` under the
lowering function itself (the implementation key Numba looks up). Subclasses say
only how to make the plan (:meth:`PlannedCallable.make_plan`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import types
from numba.core.errors import TypingError
from numba.core.imputils import lower_builtin

__all__ = ["Plan", "PlannedCallable"]

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
