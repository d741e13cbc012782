"""Enzyme's vocabulary: modes, activity annotations and the one :class:`Activity` enum.

The bottom of pyjlad's dependency graph (as EnzymeCore sits below Enzyme): it imports nothing of
pyjlad but :mod:`pyjlad.errors`. :func:`pyjlad.autodiff` (in :mod:`pyjlad.annotated`) mirrors
Enzyme.jl's ``autodiff``; each argument is wrapped in an annotation that maps one-to-one onto
Enzyme's activity markers:

=========================  ===================  ==============================================
pyjlad                     Enzyme (LLVM)        meaning
=========================  ===================  ==============================================
``Const(x)`` or bare ``x``  ``enzyme_const``     not differentiated
``Active(x)``              ``enzyme_out``        reverse mode, float scalar: its adjoint is returned
``Duplicated(x, dx)``      ``enzyme_dup``        array: ``dx`` is shadow memory; reverse mode
                                                 *accumulates* adjoints into it (``dx += ...``),
                                                 forward mode *writes* tangents of what ``f``
                                                 writes; forward-mode float scalar: ``dx`` is
                                                 its tangent
``DuplicatedNoNeed(x, dx)`` ``enzyme_dupnoneed``  as ``Duplicated``; ``x``'s primal output is
                                                 not needed
=========================  ===================  ==============================================

The result of ``f`` is differentiated when it is a float (reverse mode seeds it
with 1; forward mode returns its tangent); a function returning nothing is
seeded, and reports tangents, through its ``Duplicated`` arguments.

The transforms (``gradient``, ``vjp``, ...) ask for activities without knowing the argument
types: :attr:`Activity.DIFF` ("differentiate this argument") becomes ``ACTIVE`` or ``DUP`` once
the engine sees whether the argument is a scalar or an array (:meth:`Activity.concrete_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from .errors import ArgumentError

__all__ = ["Activity", "as_activities", "Reverse", "Forward", "Const", "Active", "Duplicated",
           "DuplicatedNoNeed", "Mode", "MODES"]

#: The sweep directions, by name (``Sweep.mode``).
MODES = ("reverse", "forward")


@dataclass(frozen=True)
class Mode:
    """A differentiation mode: :data:`Reverse` or :data:`Forward`."""

    name: str

    def __repr__(self) -> str:
        return self.name.capitalize()


#: Reverse mode (``__enzyme_autodiff``).
Reverse = Mode("reverse")
#: Forward mode (``__enzyme_fwddiff``).
Forward = Mode("forward")


class Activity(StrEnum):
    """One argument's activity: what a sweep does with it.

    A ``str`` enum: each member equals (and hashes as) its value, so ``Activity.DUP == "dup"``,
    and ``str(Activity.DUP)`` is ``"dup"``. ``Activity("dup")`` looks a member up by value; an
    unknown value is a :class:`~pyjlad.errors.ArgumentError`.

    Requested (resolved per argument type by :meth:`concrete_for`):

    - ``DIFF``: differentiate (an adjoint for a float scalar in reverse mode, a shadow otherwise);
    - ``DIFF_NONEED``: as ``DIFF``, the primal not needed.

    Concrete (Enzyme's own, :attr:`marker` names the marker global):

    - ``CONST`` (``enzyme_const``), ``ACTIVE`` (``enzyme_out``), ``DUP`` (``enzyme_dup``),
      ``DUPNONEED`` (``enzyme_dupnoneed``).

    Examples
    --------
    >>> Activity("dup") is Activity.DUP, Activity.DUP == "dup", Activity.ACTIVE.marker
    (True, True, 'enzyme_out')
    >>> Activity.DIFF.concrete_for(False, "reverse"), Activity.DIFF.concrete_for(True, "reverse")
    (<Activity.ACTIVE: 'active'>, <Activity.DUP: 'dup'>)
    >>> Activity("out")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pyjlad.errors.ArgumentError: unknown activity 'out'; one of const, diff, ..., dupnoneed
    """

    CONST = "const"
    DIFF = "diff"
    DIFF_NONEED = "diff_noneed"
    ACTIVE = "active"
    DUP = "dup"
    DUPNONEED = "dupnoneed"

    @classmethod
    def _missing_(cls, value: object) -> Activity:
        raise ArgumentError(f"unknown activity {value!r}; one of {', '.join(member.value for member in cls)}")

    @property
    def concrete(self) -> bool:
        """Whether this is one of Enzyme's own activities (not ``DIFF``/``DIFF_NONEED``)."""
        return self not in (Activity.DIFF, Activity.DIFF_NONEED)

    @property
    def shadowed(self) -> bool:
        """Whether the argument comes with a shadow (``DUP``, ``DUPNONEED``)."""
        return self in (Activity.DUP, Activity.DUPNONEED)

    @property
    def marker(self) -> str:
        """The name of Enzyme's marker global for this (concrete) activity, e.g. ``enzyme_dup``."""
        if not self.concrete:
            raise ArgumentError(f"activity {self.value!r} has no Enzyme marker: resolve it first (concrete_for)")
        return "enzyme_out" if self is Activity.ACTIVE else f"enzyme_{self.value}"

    def concrete_for(self, is_array: bool, mode: str) -> Activity:
        """The concrete activity of this requested one for an array or float scalar argument in ``mode``."""
        if self.concrete:
            return self
        if not is_array and mode == "reverse":
            return Activity.ACTIVE
        return Activity.DUP if self is Activity.DIFF else Activity.DUPNONEED

    @classmethod
    def of(cls, annotation: Any) -> Activity:
        """The activity of an :func:`~pyjlad.autodiff` argument: its annotation's, ``CONST`` if bare.

        Examples
        --------
        >>> Activity.of(Active(1.0)), Activity.of(DuplicatedNoNeed(1.0, 0.0)), Activity.of(2)
        (<Activity.ACTIVE: 'active'>, <Activity.DUPNONEED: 'dupnoneed'>, <Activity.CONST: 'const'>)
        """
        if isinstance(annotation, Active):
            return cls.ACTIVE
        if isinstance(annotation, DuplicatedNoNeed):
            return cls.DUPNONEED
        if isinstance(annotation, Duplicated):
            return cls.DUP
        return cls.CONST


_BY_VALUE: dict[str, Activity] = {member.value: member for member in Activity}


def as_activities(values: Any) -> tuple[Activity, ...]:
    """``values`` (activities or their string values) as a tuple of :class:`Activity`.

    Examples
    --------
    >>> as_activities(("dup", Activity.CONST))
    (<Activity.DUP: 'dup'>, <Activity.CONST: 'const'>)
    """
    try:
        # A dict lookup, not Activity(value) (~1 us each, on every jvp/vjp call); members are
        # equal to and hash as their values, so they find themselves.
        return tuple(_BY_VALUE[value] for value in values)
    except (KeyError, TypeError):
        return tuple(map(Activity, values))  # the unknown value's ArgumentError


@dataclass(frozen=True)
class Const:
    """An argument that is not differentiated (``enzyme_const``)."""

    val: Any


@dataclass(frozen=True)
class Active:
    """A float scalar whose adjoint reverse mode returns (``enzyme_out``)."""

    val: Any


@dataclass(frozen=True)
class Duplicated:
    """An argument with its shadow ``dval`` (``enzyme_dup``).

    For an array, ``dval`` is an array of the same shape and dtype, updated in
    place; for a float scalar in forward mode, ``dval`` is its tangent.
    """

    val: Any
    dval: Any


@dataclass(frozen=True)
class DuplicatedNoNeed(Duplicated):
    """As :class:`Duplicated`, telling Enzyme the primal output is not needed (``enzyme_dupnoneed``)."""
