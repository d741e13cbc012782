"""``jacrev``, ``jacfwd``, ``jvp_fn``, ``vjp_fn`` and ``hvp_fn`` callables inside ``@njit`` code.

A :class:`~pyjlad.product_fns.ProductFunction` has the Numba type
:class:`ProductType`. Typing a call generates, for the argument types Numba
inferred, a small Python function written with :class:`~pyjlad.numba_calls.sweeps.RawSweep`
calls (one Enzyme sweep each: the Jacobian is one reverse sweep per output
element or one forward sweep per input element, as in :func:`pyjlad.jacobian`),
and lowers the call by compiling that function into the caller
(``compile_internal``): the sweeps are linked into the caller, no Python runs.

Inside Numba, ``f`` is a Numba function returning a float or a float array
(tuple results, and functions that write their result into an argument, are
for the Python call only). Arrays the sweeps read are passed as C-contiguous
copies where they are not, so the sweeps write none of the caller's arrays (what ``f`` itself writes into
an argument it writes, as a call of ``f`` does).
"""

from __future__ import annotations

from typing import Any

from numba import njit, types
from numba.core.errors import TypingError
from numba.core.typing import signature
from numba.extending import NativeValue, models, register_model, typeof_impl, unbox

from ..export import as_numba_function
from ..memo import cached_for
from ..product_fns import ProductFunction
from . import product_source as source
from .planned import Plan, PlannedCallable, compiled_into_caller

__all__ = ["ProductType"]


class ProductType(PlannedCallable):
    """The Numba type of one :class:`~pyjlad.product_fns.ProductFunction`."""

    def __init__(self, product: ProductFunction) -> None:
        self.product = product
        super().__init__(name=f"{product!r}<{id(product):x}>")

    @property
    def key(self) -> Any:
        return self.product

    def keywords_refused(self) -> str:
        return (f"{self.product!r} takes positional arguments only inside @njit code; "
                f"{source.accepts(self.product)}")

    def make_plan(self, context: Any, args: tuple[types.Type, ...]) -> Plan:
        """Generate and type the call's implementation for ``args`` (its dispatcher kept alive with the plan)."""
        sig, pyfunc, dispatcher = _plan(self.product, context, args)
        return sig, compiled_into_caller(pyfunc), dispatcher


@typeof_impl.register(ProductFunction)
def _typeof_product(value: ProductFunction, c: Any) -> ProductType:
    # One type per function, kind, wrt and engine: a product made again (``pyjlad.jvp_fn(f)`` written in a
    # loop) is the same type, so Numba's callers and pyjlad.vmap's loops compiled for it are reused.
    return cached_for(value.f, ("numba-product-type", value.kind, value.wrt, value.engine),
                      lambda: ProductType(value))


register_model(ProductType)(models.OpaqueModel)


@unbox(ProductType)
def _unbox_product(typ: ProductType, obj: Any, c: Any) -> NativeValue:
    return NativeValue(c.context.get_dummy_value())


def _plan(product: ProductFunction, context: Any, args: tuple[types.Type, ...]) -> tuple[Any, Any, Any]:
    """Generate the call's implementation for ``args`` and type it: ``(signature, Python function, its
    dispatcher)`` (the dispatcher kept alive: Numba's type holds it weakly)."""
    if product.engine not in (None, "embedded"):
        raise TypingError(f"{product!r} was made with engine={product.engine!r}, whose derivatives cannot be "
                          "called from @njit code: use the default engine (engine='embedded')")
    func = as_numba_function(product.f)
    if not hasattr(func, "py_func"):
        raise TypingError(f"{product!r}: only an @njit function (or a plain Python function Numba compiles) can "
                          "be differentiated inside @njit code")
    pyfunc = source.generate(product, func, context, args)
    dispatcher = njit(pyfunc)
    try:
        sig = context.resolve_function_type(types.Dispatcher(dispatcher), args, {})
    except TypingError as exc:
        raise TypingError(f"{product!r} cannot be called with ({', '.join(map(str, args))}) inside @njit code: "
                          f"{exc}; {source.accepts(product)}") from None
    return signature(sig.return_type, *args), pyfunc, dispatcher
