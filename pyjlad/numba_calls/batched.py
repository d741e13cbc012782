"""``pyjlad.vmap`` callables inside ``@njit`` code.

A :class:`~pyjlad.batching.Batched` has the Numba type :class:`BatchedType`.
Typing a call with the argument types Numba inferred makes the batched call's
loops for those types (:meth:`~pyjlad.batching.Batched.loops`: the
``@njit(parallel=True)`` ``prange`` loop and the single-sample call) and
compiles into the caller a small function that checks the mapped arrays' sizes,
runs the loop and raises a failed sample's exception (what the Python call does
in Python). ``in_axes`` that do not fit the arguments, or a sample ``f`` cannot
take, are a Numba ``TypingError`` in the user's terms.
"""

from __future__ import annotations

from typing import Any

from numba import njit, types
from numba.core.errors import TypingError
from numba.core.typing import signature
from numba.extending import NativeValue, models, register_model, typeof_impl, unbox

from ..batching import Batched
from ..errors import ArgumentError, ArgumentTypeError, UnsupportedFunctionError
from ..memo import cached_for
from .planned import Plan, PlannedCallable, compiled_into_caller

__all__ = ["BatchedType"]


class BatchedType(PlannedCallable):
    """The Numba type of one :class:`~pyjlad.batching.Batched`."""

    def __init__(self, batched: Batched) -> None:
        self.batched = batched
        super().__init__(name=f"{batched!r}<{id(batched):x}>")

    @property
    def key(self) -> Any:
        return self.batched

    def keywords_refused(self) -> str:
        return f"{self.batched!r} takes positional arguments only inside @njit code"

    def make_plan(self, context: Any, args: tuple[types.Type, ...]) -> Plan:
        """Make the loops for ``args`` and type the function compiled into the caller."""
        try:
            pyfunc = self.batched.njit_source(args)
        except (ArgumentError, ArgumentTypeError, UnsupportedFunctionError) as exc:
            raise TypingError(f"{self.batched!r} cannot be called with ({', '.join(map(str, args))}) inside "
                              f"@njit code: {exc}") from None
        dispatcher = njit(pyfunc)
        sig = context.resolve_function_type(types.Dispatcher(dispatcher), args, {})
        return signature(sig.return_type, *args), compiled_into_caller(pyfunc), dispatcher


@typeof_impl.register(Batched)
def _typeof_batched(value: Batched, c: Any) -> BatchedType:
    return cached_for(value, ("numba-type",), lambda: BatchedType(value))


register_model(BatchedType)(models.OpaqueModel)


@unbox(BatchedType)
def _unbox_batched(typ: BatchedType, obj: Any, c: Any) -> NativeValue:
    # The type identifies the batched function: the Python object carries no data the call needs.
    return NativeValue(c.context.get_dummy_value())
