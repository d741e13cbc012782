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

A loose-typed Hessian-vector product (:func:`pyjlad.hvp`, reverse over forward) is checked alike
(:class:`LooseHessianCheck`): its projections on three random directions against mixed second differences of
the function. The product of ``np.median`` of a sorted copy times a sum of squares lost a term so while its
gradient and jvp were right (``tests/test_loose_check.py``).

Reverse sweeps of functions returning nothing are checked alike: a function writing its output into an argument,
and the wrappers through which ``vjp`` and ``jacobian`` differentiate an array result (the cotangent seeds the
buffers the wrapper writes; :class:`LooseDerivativeCheck` says what is compared). Forward sweeps (``jvp``,
forward ``jacobian``) are checked by :class:`LooseTangentCheck`. A vector sweep (several directions at once) built
with loose types is not used: the vector products then go one direction at a time, each sweep checked. Not
checked: derivatives called from ``@njit`` code (:mod:`pyjlad.numba_calls`), which run no Python around a call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np

from ..errors import EnzymeError
from ..rules import calls_custom_rules
from ..shadow_guards import guarded_zeros

__all__ = ["DIRECTIONS", "LooseCheck", "LooseDerivativeCheck", "LooseHessianCheck", "LooseTangentCheck", "directional_mismatch",
           "loose_derivative_check", "perturbed", "rerun"]

#: Relative disagreement at which a derivative is refused (a lost adjoint is usually all of a component).
_TOLERANCE = 1e-3
#: Random directions the derivative is checked along (each costs five calls of the function, once).
DIRECTIONS = 3
#: Rounding in a difference quotient, in units of the function's values over the step.
_ROUNDING = 1e3 * np.finfo(np.float64).eps


def directional_mismatch(f: Callable[[tuple[Any, ...]], float], args: tuple[Any, ...],
                         direction: dict[int, Any], derivative: float,
                         relative_step: float = 1e-6) -> tuple[float, float] | None:
    """``(derivative, differences)`` where the central differences of ``f`` along ``direction`` (argument
    index -> a step of its shape) are smooth and disagree with ``derivative``; else ``None``.

    ``f(args)`` is called on fresh copies of the arrays each time; the step is ``relative_step`` times the
    largest of 1 and the moved arguments' magnitudes.

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
    step = relative_step * scale

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


def loose_derivative_check(sweep: Any, exported: Any, driver: Any, primal: Callable[..., Any],
                           name: str | None = None) -> LooseCheck | None:
    """The check of a loose-typed derivative (``sweep`` of ``exported``, called through ``driver``; ``name``: the
    function's in messages, where ``exported`` is pyjlad's wrapper of it), or ``None`` where it cannot judge
    it: a result other than float64 or nothing (nothing: a function writing its output into an argument, or
    pyjlad's wrapper writing an array result into buffers), a sweep other than one direction of reverse or
    forward mode or a Hessian-vector product, or a function calling a custom rule (its derivative is the
    rule's, not the function's)."""
    if sweep.width != 1 or exported.abi.result.dtype not in ("float64", "none") \
            or calls_custom_rules(exported.module.external_functions):
        return None
    name = name or exported.name
    returns_value = exported.abi.result.dtype != "none"
    if sweep.kind == "hvp":
        if not returns_value:
            return None
        writes = any(getattr(arg, "writes", False) for arg in exported.abi.args)
        return LooseHessianCheck(primal, name, sweep.wrt, other_vectors=not writes)
    if sweep.kind != "ad":
        return None
    if sweep.mode == "forward":
        return LooseTangentCheck(primal, name, driver.shadow_args, returns_value=returns_value)
    if sweep.mode == "reverse":
        return LooseDerivativeCheck(primal, name, driver.shadow_args, driver.active_scalars,
                                    what="gradient" if returns_value else "vector-Jacobian product")
    return None


def _refusal(what: str, name: str, found: tuple[float, float], along: str) -> EnzymeError:
    """The error of a loose-typed derivative that failed its check."""
    return EnzymeError(
        f"the {what} of {name} cannot be trusted: Enzyme could not deduce what some of the function's "
        f"memory holds and built its derivative assuming it (loose types), and that derivative disagrees with "
        f"finite differences of the function ({along}, at the arguments of its first call for these argument "
        f"types: {found[0]:.6g} against {found[1]:.6g}). pyjlad does not return it, then or later. A copy of "
        "floats Enzyme took for integers does this (its adjoint is lost), most often a whole row or slice "
        "written into an array the function was given (`a[i] += m[j] * d`, `a[:, :] = 0.0` in a helper): "
        "writing that update as a loop over its elements, or accumulating into a fresh local array "
        "(np.zeros_like) and copying it in once, usually lets Enzyme type it. Please report the function "
        "(PYJLAD_DUMP_IR=<dir> writes the modules)",
        diagnostics=f"directional derivative {found[0]!r}, central differences (Richardson) {found[1]!r}")


def _float(value: Any) -> float:
    """A function's result as a float: ``0`` for one that returns nothing."""
    return 0.0 if value is None else float(value)


def _is_float64(x: Any) -> bool:
    return (isinstance(x, np.ndarray) and x.dtype == np.float64) or isinstance(x, float)


def _copies(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(_alike(a, a) if isinstance(a, np.ndarray) else a for a in args)


def _alike(a: np.ndarray, values: Any) -> np.ndarray:
    """An array of ``a``'s shape, dtype and strides in memory of its own, holding ``values``.

    The derivative addresses each shadow with the strides of its argument, and the shadows of a rerun
    (:func:`rerun`) are the first call's, laid out for its arguments: a point given to it as compact copies of
    strided views (``x[::2]``) would have its shadows read at the wrong places, and a right derivative refused.
    """
    out = guarded_zeros(a)
    out[...] = values
    return out


#: Any of the checks (:func:`loose_derivative_check`): ``applies``, ``before`` and ``after`` a first call.
LooseCheck = Union["LooseDerivativeCheck", "LooseHessianCheck", "LooseTangentCheck"]


class LooseDerivativeCheck:
    """The check of one loose-typed reverse-mode sweep: :meth:`before` the first call, :meth:`after` it.

    A reverse sweep takes, in the shadows of the arguments it is given, the adjoints of their contents after
    the function ran (zeros for what it only reads; a cotangent for an output it writes, as ``vjp`` seeds the
    buffers of an array result), and ``seed`` for its result; it leaves there the adjoints of their contents
    before, plus what was there for memory the function does not overwrite. So, along a direction ``d`` of the
    differentiated arguments, the shadows after the call and the scalars' adjoints give the derivative of
    ``seed * f(x) + sum_i before_i . (x_i after the call)`` (``before_i``: shadow ``i`` before the call, zero
    where it was zero): ``seed * f(x)`` for a function that only reads its arguments, ``cotangent . output(x)``
    for one writing its output. That function is what the central differences are taken of.
    """

    def __init__(self, primal: Callable[..., Any], name: str, shadow_args: Sequence[int],
                 active_scalars: Sequence[int], what: str = "gradient") -> None:
        self.primal, self.name, self.what = primal, name, what
        self.shadow_args, self.active_scalars = tuple(shadow_args), tuple(active_scalars)
        self._shadows: list[Any] = []
        self._args: tuple[Any, ...] = ()

    def applies(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float) -> bool:
        """Whether the check can judge this call: float64 arguments differentiated, a non-zero seed or shadow."""
        if not (self.shadow_args or self.active_scalars):
            return False
        arrays = [args[i] for i in self.shadow_args]
        return (bool(seed) or any(np.any(s) for s in shadows)) \
            and all(isinstance(a, np.ndarray) and a.dtype == np.float64 for a in arrays) \
            and all(isinstance(s, np.ndarray) and s.dtype == np.float64 for s in shadows) \
            and all(isinstance(args[i], float) for i in self.active_scalars)

    def before(self, args: tuple[Any, ...], shadows: tuple[Any, ...]) -> None:
        """Keep the arguments and shadows as they are before the call (the function may write into its
        arguments; the sweep adds into the shadows)."""
        self._args = _copies(args)
        self._shadows = [np.array(s, copy=True) for s in shadows]

    def after(self, shadows: tuple[Any, ...], adjoints: Sequence[float], seed: float,
              again: Callable[..., Any] | None = None, dret: Any = None) -> None:
        """Raise :class:`~pyjlad.errors.EnzymeError` where the call's derivative fails the check along any of
        :data:`DIRECTIONS` random directions (one alone misses an error nearly orthogonal to it: one whose
        projection is under the tolerance, about 6% of the time for an error of 1% of the gradient); then, with
        ``again`` (:func:`rerun`), the derivative at a point near the call's, every float argument moved at
        random (:func:`perturbed`), from the same shadows: a first call where the lost term vanishes (a state of
        zeros) passed before, and every later call was wrong."""
        rng = np.random.default_rng(20261130)
        found = self._judge(self._args, self._gradient(shadows, adjoints), seed, rng)
        if found is None and again is not None:
            point = perturbed(self._args, rng)
            rerun_result = again(point, start=self._shadows)
            if rerun_result is not None:
                found = self._judge(point, self._gradient(rerun_result[0], rerun_result[1]), seed, rng)
        if found is not None:
            raise _refusal(self.what, self.name, found, "along a random direction")

    def _gradient(self, shadows: Sequence[Any], adjoints: Sequence[float]) -> dict[int, Any]:
        """Argument index -> its shadow after the sweep, or its adjoint (a scalar)."""
        gradient: dict[int, Any] = {i: np.array(after, dtype=np.float64, copy=True)
                                    for i, after in zip(self.shadow_args, shadows)}
        gradient.update((i, float(adjoint)) for i, adjoint in zip(self.active_scalars, adjoints))
        return gradient

    def _judged(self, seed: float) -> Callable[[tuple[Any, ...]], float]:
        """The function whose derivative the sweep computes (see the class), of the arguments."""
        written = [(i, before) for i, before in zip(self.shadow_args, self._shadows) if np.any(before)]

        def value(args: tuple[Any, ...]) -> float:
            result = self.primal(*args)
            total = seed * _float(result) if seed else 0.0
            return total + sum(float(np.sum(before * args[i])) for i, before in written)
        return value

    def _judge(self, args: tuple[Any, ...], gradients: dict[int, Any], seed: float,
               rng: np.random.Generator) -> tuple[float, float] | None:
        """The first mismatch of ``gradients`` at ``args`` along :data:`DIRECTIONS` random directions."""
        judged = self._judged(seed)
        for _ in range(DIRECTIONS):
            direction = {i: rng.standard_normal(np.shape(g)) if isinstance(g, np.ndarray) else float(rng.standard_normal())
                         for i, g in gradients.items()}
            derivative = sum(float(np.sum(g * direction[i])) for i, g in gradients.items())
            found = directional_mismatch(judged, args, direction, derivative)
            if found is not None:
                return found
        return None


class LooseTangentCheck:
    """The check of one loose-typed forward-mode sweep (the same interface as :class:`LooseDerivativeCheck`).

    A forward sweep takes tangents of the arguments it is given in their shadows (a float for a scalar) and
    returns the tangent of the result (``dret``), leaving in each array's shadow the tangent of its contents
    after the call (its tangent as it was where the function only reads it). Both are checked against central
    differences along the call's tangents: of the result and of the arrays' contents after the call, projected
    on :data:`DIRECTIONS` random weights (one would miss an error orthogonal to it); then, with ``again``
    (:func:`rerun`), at a point near the call's with random tangents (a first call along tangents blind to a
    lost term would pass). Cost: up to thirty calls of the function and one of the derivative, once.
    """

    def __init__(self, primal: Callable[..., Any], name: str, shadow_args: Sequence[int],
                 returns_value: bool = True) -> None:
        self.primal, self.name, self.shadow_args = primal, name, tuple(shadow_args)
        self.returns_value = returns_value  # False: the function returns nothing (its dret means nothing)
        self._args: tuple[Any, ...] = ()
        self._tangents: list[Any] = []

    def applies(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float) -> bool:
        """Whether the check can judge this call: float64 arguments and tangents, not all zero."""
        return bool(self.shadow_args) and any(np.any(s) for s in shadows) \
            and all(_is_float64(args[i]) and _is_float64(s) and type(args[i]) is type(s)
                    for i, s in zip(self.shadow_args, shadows))

    def before(self, args: tuple[Any, ...], shadows: tuple[Any, ...]) -> None:
        """Keep the arguments and the tangents as they are before the call."""
        self._args, self._tangents = _copies(args), list(_copies(shadows))

    def after(self, shadows: tuple[Any, ...], adjoints: Sequence[float], seed: float,
              again: Callable[..., Any] | None = None, dret: Any = None) -> None:
        """Raise :class:`~pyjlad.errors.EnzymeError` where the call's tangents (``dret`` and the shadows), or
        those at a point near it along random tangents, fail the check."""
        rng = np.random.default_rng(20261205)
        cases = [(self._args, self._tangents, _copies(shadows), dret)]
        if again is not None:
            point = perturbed(self._args, rng)
            tangents = [rng.standard_normal(np.shape(t)) if isinstance(t, np.ndarray) else float(rng.standard_normal())
                        for t in self._tangents]
            rerun_result = again(point, start=tangents)
            if rerun_result is not None:
                cases.append((point, tangents, rerun_result[0], rerun_result[2]))
        for point, tangents, after, out in cases:
            found = self._mismatch(point, tangents, after, out, rng)
            if found is not None:
                raise _refusal("forward-mode derivative", self.name, found, "along the tangents, projected at random")

    def _mismatch(self, args: tuple[Any, ...], tangents: Sequence[Any], after: Sequence[Any], dret: Any,
                  rng: np.random.Generator) -> tuple[float, float] | None:
        """The first of :data:`DIRECTIONS` random projections of the tangents out that disagrees with the
        differences along ``tangents`` at ``args``."""
        arrays = [(i, np.asarray(a, dtype=np.float64)) for i, t, a in zip(self.shadow_args, tangents, after)
                  if isinstance(t, np.ndarray)]
        direction = dict(zip(self.shadow_args, tangents))
        for _ in range(DIRECTIONS):
            weight = float(rng.standard_normal()) if self.returns_value else 0.0
            weights = [rng.standard_normal(tangent.shape) for _, tangent in arrays]
            derivative = (weight * _float(dret) if weight else 0.0) + \
                sum(float(np.sum(w * tangent)) for w, (_, tangent) in zip(weights, arrays))

            def projected(a: tuple[Any, ...], weight: float = weight, weights: list[Any] = weights) -> float:
                result = self.primal(*a)
                total = weight * _float(result) if weight else 0.0
                return total + sum(float(np.sum(w * a[i])) for w, (i, _) in zip(weights, arrays))

            found = directional_mismatch(projected, args, direction, derivative)
            if found is not None:
                return found
        return None


#: The Hessian check's steps, relative: its second differences divide rounding by two steps, not one.
_HESSIAN_STEP = 1e-4


class LooseHessianCheck:
    """The check of one loose-typed Hessian-vector product ``H v`` (with respect to argument ``wrt``): the
    projection ``u . H v`` on a random ``u`` against central differences along ``u`` of the central differences
    of the function along ``v`` (a mixed second difference, taken at two outer steps and extrapolated, as
    :func:`directional_mismatch` does); then, with ``other_vectors``, the same for ``H w`` of :data:`DIRECTIONS`
    random ``w``, which :meth:`after` gets from the derivative itself (``product``): the first call's ``v`` can
    be blind to a lost term (a Hessian's first column ``e_0``, where the term is in other rows). The same
    interface as :class:`LooseDerivativeCheck`; the call's shadows are ``(v, gradient, H v)``. Not
    ``other_vectors`` for a function writing into an argument (a second call would start from what it wrote).

    Cost: up to eighty calls of the function and three of the derivative, once.
    """

    def __init__(self, primal: Callable[..., Any], name: str, wrt: int, other_vectors: bool = True) -> None:
        self.primal, self.name, self.wrt, self.other_vectors = primal, name, wrt, other_vectors
        self._args: tuple[Any, ...] = ()
        self._v: Any = None

    def applies(self, args: tuple[Any, ...], shadows: tuple[Any, ...], seed: float) -> bool:
        """Whether the check can judge this call: a float64 argument ``wrt`` and vector ``v``."""
        x, v = args[self.wrt], shadows[0]
        return (isinstance(x, np.ndarray) and x.dtype == np.float64 and isinstance(v, np.ndarray)
                and v.dtype == np.float64) or (isinstance(x, float) and isinstance(v, float))

    def before(self, args: tuple[Any, ...], shadows: tuple[Any, ...]) -> None:
        """Keep the arguments and ``v`` as they are before the call."""
        self._args = _copies(args)
        self._v = np.array(shadows[0], copy=True) if isinstance(shadows[0], np.ndarray) else shadows[0]

    def after(self, shadows: tuple[Any, ...], adjoints: Sequence[float], seed: float,
              again: Callable[..., Any] | None = None, dret: Any = None) -> None:
        """Raise :class:`~pyjlad.errors.EnzymeError` where ``H v``, or ``H w`` of a random ``w`` the derivative
        gives through ``again`` (:func:`rerun`) at the call's point and at a point near it (:func:`perturbed`),
        fails the check."""
        rng = np.random.default_rng(20261204)
        v, args = self._v, self._args
        cases = [(args, v, np.array(shadows[2], dtype=np.float64, copy=True).reshape(np.shape(v)))]
        if again is not None:
            points = [args] * (DIRECTIONS if self.other_vectors else 0) + [perturbed(args, rng)]
            for point in points:
                w = rng.standard_normal(np.shape(v)) if isinstance(v, np.ndarray) else float(rng.standard_normal())
                rerun_result = again(point, w)
                if rerun_result is not None:
                    cases.append((point, w, np.asarray(rerun_result[0][2], dtype=np.float64).reshape(np.shape(v))))
        for point, w, hw in cases:
            if not np.any(np.asarray(w) != 0):
                continue
            u = rng.standard_normal(np.shape(v)) if isinstance(v, np.ndarray) else float(rng.standard_normal())
            found = self._mismatch(point, w, hw, u)
            if found is not None:
                raise _refusal("Hessian-vector product", self.name, found,
                               "a second difference along the vector and a random direction")

    def _mismatch(self, args: tuple[Any, ...], w: Any, hw: Any, u: Any) -> tuple[float, float] | None:
        """:func:`directional_mismatch` of ``u . H w`` at ``args`` against the mixed second difference along ``u``
        and ``w``."""
        wrt = self.wrt
        inner = _HESSIAN_STEP * max(1.0, float(np.max(np.abs(args[wrt]))))
        scale = inner / float(np.max(np.abs(w)))

        def moved(a: tuple[Any, ...], t: float) -> tuple[Any, ...]:
            return tuple(x + t * w if k == wrt else (np.array(x, copy=True) if isinstance(x, np.ndarray) else x)
                         for k, x in enumerate(a))

        def along_w(a: tuple[Any, ...]) -> float:
            return (float(self.primal(*moved(a, scale))) - float(self.primal(*moved(a, -scale)))) / (2 * scale)

        return directional_mismatch(along_w, args, {wrt: u}, float(np.sum(u * hw)), _HESSIAN_STEP)


#: How far :func:`perturbed` moves each float argument, relative to its largest magnitude (at least 1).
_PERTURBATION = 0.1


def perturbed(args: tuple[Any, ...], rng: np.random.Generator) -> tuple[Any, ...]:
    """``args`` with every float64 array and float moved at random by about :data:`_PERTURBATION` of its scale
    (arrays with their own strides, :func:`_alike`); other arguments as they are (arrays copied: a call may
    write them).

    >>> import numpy as np
    >>> x, n = np.zeros(3), 4
    >>> y, m = perturbed((x, n), np.random.default_rng(0))
    >>> bool(np.all(y != 0)) and m == 4 and not np.shares_memory(x, y)
    True
    >>> perturbed((np.zeros(6)[::-2],), np.random.default_rng(0))[0].strides
    (-16,)
    """
    out: list[Any] = []
    for a in args:
        if isinstance(a, np.ndarray) and a.dtype == np.float64 and a.size:
            out.append(_alike(a, a + _PERTURBATION * max(1.0, float(np.max(np.abs(a)))) * rng.standard_normal(a.shape)))
        elif isinstance(a, float):
            out.append(a + _PERTURBATION * max(1.0, abs(a)) * float(rng.standard_normal()))
        else:
            out.append(_alike(a, a) if isinstance(a, np.ndarray) else a)
    return tuple(out)


def rerun(call: Callable[..., Any], shadows: tuple[Any, ...], seed: Any) -> Callable[..., Any]:
    """``again(point, vector=None, start=None)``: the call's derivative once more at ``point`` (arguments of the
    call's types), in the call's own shadows (their types are the compiled ones), all zeroed first, then set to
    ``start`` where given (one value per shadow: seeds, tangents), or the first one to ``vector`` (a
    Hessian-vector product's ``v``); returns copies of the shadows after it, its adjoints and the tangent of its
    result, or ``None`` where it fails there. The shadows are put back as the call left them."""
    def again(point: tuple[Any, ...], vector: Any = None,
              start: Sequence[Any] | None = None) -> tuple[list[Any], list[Any], Any] | None:
        kept = _copies(shadows)
        values = list(shadows)
        try:
            for k, s in enumerate(shadows):
                if isinstance(s, np.ndarray):
                    s[...] = 0 if start is None else start[k]
                elif start is not None:
                    values[k] = float(start[k])
            if vector is not None:
                if isinstance(shadows[0], np.ndarray):
                    shadows[0][...] = vector
                else:
                    values[0] = float(vector)
            try:
                status, _, dret, *adjoints = call(*point, *values, seed)
            except Exception:  # noqa: BLE001 - not a point this derivative can be called at (a layout): not judged
                return None
            if status != 0:
                return None
            return ([np.array(s, copy=True) if isinstance(s, np.ndarray) else s for s in values], list(adjoints),
                    dret)
        finally:
            for s, k in zip(shadows, kept):
                if isinstance(s, np.ndarray):
                    s[...] = k
    return again
