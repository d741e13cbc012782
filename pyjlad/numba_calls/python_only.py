"""pyjlad's transforms written inside ``@njit`` code: a Numba typing error that says what to write instead.

``pyjlad.gradient(f, x)`` or ``pyjlad.grad(f)`` inside an ``@njit`` function is Python that Numba cannot compile;
until 2026-12-06 Numba said only "Unknown attribute 'gradient' of type Module(<module 'pyjlad'>)". Each such
function is registered here as a Numba overload whose typing raises a ``TypingError`` naming the function and the
form that works: the derivative built in Python (``g = pyjlad.grad(f)``), then called inside
(:mod:`pyjlad.numba_calls.derivatives`, :mod:`pyjlad.numba_calls.products`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba.core.errors import TypingError
from numba.extending import overload

__all__ = ["ADVICE", "register"]

_BUILD = "build the derivative in Python, outside the @njit function, and call it inside: "
#: What to write instead, per function name.
ADVICE = {
    "gradient": _BUILD + "g = pyjlad.grad(f, wrt=...), then g(x)",
    "value_and_gradient": _BUILD + "vg = pyjlad.value_and_grad(f, wrt=...), then vg(x)",
    "grad": _BUILD + "g = pyjlad.grad(f) at module level, then g(x) inside",
    "value_and_grad": _BUILD + "vg = pyjlad.value_and_grad(f) at module level, then vg(x) inside",
    "jvp": _BUILD + "t = pyjlad.jvp_fn(f), then t(x, v)",
    "vjp": _BUILD + "p = pyjlad.vjp_fn(f), then p(x, cotangent)",
    "jacobian": _BUILD + "j = pyjlad.jacrev(f) (or pyjlad.jacfwd(f)), then j(x)",
    "hvp": _BUILD + "h = pyjlad.hvp_fn(f), then h(x, v)",
    "hessian": _BUILD + "h = pyjlad.hvp_fn(f) and one product per column, or call pyjlad.hessian from Python",
}


def _refusal(name: str) -> Callable[..., Any]:
    def typing(*args: Any, **kwargs: Any) -> None:
        raise TypingError(f"pyjlad.{name} cannot be called inside @njit code: {ADVICE[name]}")

    typing.__name__ = f"pyjlad_{name}_in_njit"
    return typing


def register(functions: dict[str, Callable[..., Any]]) -> None:
    """Register the refusal of each of ``functions`` (name -> pyjlad's function) with Numba."""
    for name, function in functions.items():
        overload(function)(_refusal(name))
