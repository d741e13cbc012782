"""The differential corpus's vocabulary: a program, its JAX twin, and how one is checked.

A corpus program is a Numba function written the way scientists write them, paired with an
equivalent JAX function (``jax.numpy`` in float64) that serves as the exact oracle. Programs
are declared in the family modules next to this one (``tests/corpus/family_*.py``) with
:func:`program`, which registers them by name so a worker process can find one from its name.

The checks never consult pyjlad for the expected value: the oracle runs on copies of the
inputs taken before pyjlad sees them, and the inputs are compared with those copies afterwards.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: How a program is differentiated: reverse-mode gradient, forward/reverse products, Hessian.
TRANSFORMS = ("gradient", "jvp", "vjp", "jacobian", "hvp")

#: What a program's check is expected to give today.
EXPECTATIONS = ("agree", "refused", "wrong", "crash")


@dataclass(frozen=True)
class Program:
    """One corpus entry.

    Attributes
    ----------
    name:
        Unique ``family/variant`` name.
    family:
        The construct it exercises (``reductions``, ``control-flow``, ``special``, ...).
    numba:
        The ``@njit`` function under test.
    oracle:
        A JAX function of the same arguments computing the same value.
    make_args:
        Builds the arguments from a seeded ``numpy.random.Generator``.
    wrt:
        Indices of the differentiated arguments.
    transforms:
        Which transforms to check (``gradient`` for scalar results, ``jacobian``/``jvp``/``vjp``
        for array results, ``hvp`` for twice-differentiable scalar results).
    rtol, atol:
        Tolerances of the comparison with the oracle (float32 programs use looser ones).
    expect:
        The outcome :func:`corpus.check.check` gives today: ``"agree"``, or ``"refused"`` for a
        program pyjlad is known to refuse (``notes`` says why), or ``"wrong"`` for a known wrong
        gradient, a defect under repair (``notes`` says which; the suite reports it as a strict
        xfail and the full run counts it as wrong). The suite fails when the outcome changes
        either way, so expectations stay current.
    notes:
        Why a program is expected to be refused, or anything else worth knowing about it.
    """

    name: str
    family: str
    numba: Callable[..., Any]
    oracle: Callable[..., Any]
    make_args: Callable[[np.random.Generator], tuple[Any, ...]]
    wrt: tuple[int, ...] = (0,)
    transforms: tuple[str, ...] = ("gradient",)
    rtol: float = 1e-9
    atol: float = 1e-11
    expect: str = "agree"
    notes: str = field(default="", compare=False)


_REGISTRY: dict[str, Program] = {}


def program(family: str, name: str, numba: Callable[..., Any], oracle: Callable[..., Any],
            make_args: Callable[[np.random.Generator], tuple[Any, ...]], **options: Any) -> Program:
    """Register a corpus program (``family/name`` must be new) and return it."""
    entry = Program(name=f"{family}/{name}", family=family, numba=numba, oracle=oracle,
                    make_args=make_args, **options)
    if entry.expect not in EXPECTATIONS:
        raise ValueError(f"corpus program {entry.name}: expect must be one of {EXPECTATIONS}")
    if entry.name in _REGISTRY:
        raise ValueError(f"corpus program {entry.name} is declared twice")
    unknown = set(entry.transforms) - set(TRANSFORMS)
    if unknown:
        raise ValueError(f"corpus program {entry.name}: unknown transforms {sorted(unknown)}")
    _REGISTRY[entry.name] = entry
    return entry


def all_programs() -> list[Program]:
    """Every registered program, after importing every ``family_*`` module, in name order."""
    package = importlib.import_module("corpus")
    for module in pkgutil.iter_modules(package.__path__):
        if module.name.startswith("family_"):
            importlib.import_module(f"corpus.{module.name}")
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def find(name: str) -> Program:
    """The program called ``name``."""
    if name not in _REGISTRY:
        all_programs()
    return _REGISTRY[name]
