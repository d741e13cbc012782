"""A derivative Enzyme could build only with loose types, checked against finite differences before it is trusted.

With ``-enzyme-loose-types`` (the last resort of :func:`pyjlad.engines.differentiate.run_enzyme`), Enzyme
assumes the types of the memory it could not deduce, and a copy of floats it takes for integers carries no
adjoint: the gradient is silently wrong. The classes of such copies found so far are typed before that
resort (``type_float_copies``); this check is for the ones not found yet. On the first call of such a
reverse-mode derivative of a float-valued function in a process (per argument types), its directional
derivatives along three random directions are compared with central differences of the function itself, taken
at two steps and extrapolated (Richardson). Where the function is smooth there (the two steps agree, and
so do the one-sided differences ahead and behind) and the derivative disagrees, it is refused with an
:class:`~pyjlad.errors.EnzymeError`, then and on every later call, instead of returning a wrong gradient.
Where the differences are not smooth (a kink: a tie in a sort, ``max`` at equality, ``abs`` at zero; a
jump; randomness) or the function fails on the moved point, the check says nothing.

Cost: fifteen calls of the function, once. Float64 arguments only (a float32 function's differences are too
coarse to judge by).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import EnzymeError
from ..rules import calls_custom_rules

__all__ = ["DIRECTIONS", "LooseDerivativeCheck", "directional_mismatch", "loose_derivative_check"]

#: Relative disagreement at which a derivative is refused (a lost adjoint is usually all of a component).
_TOLERANCE = 1e-3
#: Random directions the derivative is checked along (each costs five calls of the function, once).
DIRECTIONS = 3
#: Rounding in a difference quotient, in units of the function's values over the step.
_ROUNDING = 1e3 * np.finfo(np.float64).eps


def directional_mismatch(f: Callable[[tuple[Any, ...]], float], args: tuple[Any, ...],
                         direction: dict[int, Any], derivative: float) -> tuple[float, float] | None:
    """``(derivative, differences)`` where the central differences of ``f`` along ``direction`` (argument
    index -> a step of its shape) are smooth and disagree with ``derivative``; else ``None``.

    ``f(args)`` is called on fresh copies of the arrays each time.

    Examples
    --------
    >>> import numpy as np
    >>> f = lambda a: float(np.sum(a[0] ** 3))
    >>> x, v = np.array([1.0, 2.0]), {0: np.array([1.0, -1.0])}
    >>> directional_mismatch(f, (x,), v, 3.0 * 1 - 3.0 * 4) is None  # the right directional derivative
    True
    >>> directional_mismatch(f, (x,), v, 0.0)  # a lost one  # doctest: +ELLIPSIS
    (0.0, -9.0...)
    """
    scale = max([1.0, *(float(np.max(np.abs(args[i]))) for i in direction)])
    step = 1e-6 * scale

    def moved(t: float) -> float:
        return f(tuple(np.array(a, copy=True) + t * direction[i] if i in direction
                       else (np.array(a, copy=True) if isinstance(a, np.ndarray) else a)
                       for i, a in enumerate(args)))

    try:
        values = [moved(t) for t in (step, -step, step / 2, -step / 2, 0.0)]
    except Exception:  # noqa: BLE001 - the function fails near the point: nothing to judge by
        return None
    if not all(np.isfinite(values)):
        return None
    wide = (values[0] - values[1]) / (2 * step)
    narrow = (values[2] - values[3]) / step
    differences = (4 * narrow - wide) / 3
    ahead, behind = (values[0] - values[4]) / step, (values[4] - values[1]) / step
    rounding = _ROUNDING * max(abs(v) for v in values) / step
    if abs(wide - narrow) > _TOLERANCE * abs(differences) + rounding or \
            abs(ahead - behind) > _TOLERANCE * max(abs(ahead), abs(behind)) + rounding:
        return None  # not smooth at this scale: a kink (a tie in a sort, max at equality) or a jump
    if abs(derivative - differences) <= _TOLERANCE * max(abs(derivative), abs(differences)) + rounding:
        return None
    return derivative, differences


def loose_derivative_check(sweep: Any, exported: Any, driver: Any,
                           primal: Callable[..., Any]) -> LooseDerivativeCheck | None:
    """The check of a loose-typed derivative (``sweep`` of ``exported``, called through ``driver``), or
    ``None`` where it cannot judge it: other than one reverse-mode sweep, a result other than float64, or
    a function calling a custom rule (its derivative is the rule's, not the function's)."""
    if (sweep.kind, sweep.mode, sweep.width) != ("ad", "reverse", 1) or exported.abi.result.dtype != "float64" \
            or calls_custom_rules(exported.module.external_functions):
        return None
    return LooseDerivativeCheck(primal, exported.name, driver.shadow_args, driver.active_scalars)


class LooseDerivativeCheck:
    """The check of one loose-typed reverse-mode derivative: :meth:`before` the first call, :meth:`after` it."""

    def __init__(self, primal: Callable[..., Any], name: str, shadow_args: Sequence[int],
                 active_scalars: Sequence[int]) -> None:
        self.primal, self.name = primal, name
        self.shadow_args, self.active_scalars = tuple(shadow_args), tuple(active_scalars)
        self._shadows: list[Any] = []
        self._args: tuple[Any, ...] = ()

    def applies(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float) -> bool:
        """Whether the check can judge this call: float64 arguments differentiated, a non-zero seed."""
        if not seed or not (self.shadow_args or self.active_scalars):
            return False
        arrays = [args[i] for i in self.shadow_args]
        return (all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays)
                and all(isinstance(s, np.ndarray) and s.dtype == np.float64 for s in shadows)
                and all(isinstance(args[i], float) for i in self.active_scalars))

    def before(self, args: tuple[Any, ...], shadows: tuple[Any, ...]) -> None:
        """Keep the arguments and shadows as they are before the call (the function may write into its
        arguments; the sweep adds into the shadows)."""
        self._args = tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args)
        self._shadows = [np.array(s, copy=True) for s in shadows]

    def after(self, shadows: tuple[Any, ...], adjoints: Sequence[float], seed: float) -> None:
        """Raise :class:`~pyjlad.errors.EnzymeError` where the call's derivative fails the check along any of
        :data:`DIRECTIONS` random directions (one alone misses an error nearly orthogonal to it: one whose
        projection is under the tolerance, about 6% of the time for an error of 1% of the gradient)."""
        args = self._args
        rng = np.random.default_rng(20261130)
        gradients = {i: np.asarray(after) - before for i, before, after in zip(self.shadow_args, self._shadows, shadows)}
        gradients.update((i, float(adjoint)) for i, adjoint in zip(self.active_scalars, adjoints))
        found = None
        for _ in range(DIRECTIONS):
            direction = {i: rng.standard_normal(np.shape(g)) if isinstance(g, np.ndarray) else float(rng.standard_normal())
                         for i, g in gradients.items()}
            derivative = sum(float(np.sum(g * direction[i])) for i, g in gradients.items())
            found = directional_mismatch(lambda a: float(self.primal(*a)), args, direction, derivative / seed)
            if found is not None:
                break
        if found is None:
            return
        raise EnzymeError(
            f"the gradient of {self.name} cannot be trusted: Enzyme could not deduce what some of the function's "
            f"memory holds and built its derivative assuming it (loose types), and that derivative disagrees with "
            f"finite differences of the function (along a random direction, at the arguments of its first call for "
            f"these argument types: {found[0]:.6g} against {found[1]:.6g}). pyjlad does not return it, then or later. A copy of floats Enzyme took for integers does this "
            "(its adjoint is lost); please report it with the function (PYJLAD_DUMP_IR=<dir> writes the modules)",
            diagnostics=f"directional derivative {found[0]!r}, central differences (Richardson) {found[1]!r}")
