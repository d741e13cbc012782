"""Engines: the back ends that differentiate an exported module.

``embedded`` (the default): the standalone Enzyme LLVM plugin run by ``opt``,
the result JIT-compiled in-process (:mod:`pyjlad.engines.embedded`).

``julia``: Enzyme.jl over ``Base.llvmcall`` of the same portable module,
through juliacall (:mod:`pyjlad.engines.julia`).

The engine is chosen per call with ``engine=...`` or for the process with the
``PYJLAD_ENGINE`` environment variable.
"""

from __future__ import annotations

from typing import Any

from .. import config
from ..errors import EngineUnavailableError
from ..memo import cached_for
from ..sweep import Sweep

__all__ = ["get_engine", "ENGINE_NAMES", "default_engine_name", "compiled_sweep"]

#: Engine names pyjlad knows.
ENGINE_NAMES = ("embedded", "julia")
_ALIASES = {"llvm": "embedded", "enzyme": "embedded"}
_instances: dict[str, object] = {}


def default_engine_name() -> str:
    """The engine used when none is named: ``$PYJLAD_ENGINE`` or ``embedded``."""
    return config.engine_name()


def get_engine(name: str | None = None):
    """Return the engine called ``name`` (default: :func:`default_engine_name`).

    Raises
    ------
    EngineUnavailableError
        If ``name`` is not a known engine.
    """
    name = _ALIASES.get(name or default_engine_name(), name or default_engine_name())
    if name not in ENGINE_NAMES:
        raise EngineUnavailableError(
            f"unknown engine {name!r}; choose one of {', '.join(ENGINE_NAMES)} "
            "(engine=... or the PYJLAD_ENGINE environment variable)"
        )
    engine = _instances.get(name)
    if engine is None:
        if name == "julia":
            from .julia import JuliaEngine

            engine = _instances[name] = JuliaEngine()
        else:
            from .embedded import EmbeddedEngine

            engine = _instances[name] = EmbeddedEngine()
    return engine



def compiled_sweep(f: Any, sweep: Sweep, engine: str | None) -> Any:
    """The engine's compiled ``sweep`` of ``f`` (cached per function): ``(args, shadows, seed) -> (value,
    result, adjoints)``; ``engine`` names it (default: :func:`default_engine_name`)."""
    name = engine or default_engine_name()
    return cached_for(f, ("sweep", sweep, name), lambda: get_engine(name).compile(f, sweep))
