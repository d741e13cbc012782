"""pyjlad's derivatives as Numba callables (issue 16, part 1).

- :mod:`.derivatives`: ``pyjlad.grad(f)`` and ``pyjlad.value_and_grad(f)`` called from ``@njit`` code;
- :mod:`.sweeps`: one Enzyme sweep called from ``@njit`` code (:class:`RawSweep`), linked into the caller;
- :mod:`.batched`: ``pyjlad.vmap`` callables called from ``@njit`` code;
- :mod:`.products`: ``pyjlad.jacrev``, ``jacfwd``, ``jvp_fn``, ``vjp_fn`` and ``hvp_fn`` called from
  ``@njit`` code, generated out of raw sweeps (:mod:`.product_source`, :mod:`.product_kinds`).

Importing this package registers the Numba types (``pyjlad`` imports it).
"""

from . import batched as _batched  # noqa: F401 - registers the vmap callables' Numba type
from . import products as _products  # noqa: F401 - registers the product callables' Numba type
from . import python_only
from .derivatives import (  # noqa: F401 - the helpers other modules build on, under their old names
    DerivativeType,
    _build_for_numba,
    _call_driver,
    _CallPlan,
    _declared,
    _excinfo_ptr_type,
    _make_impl,
    _plan,
    _raise_on_failure,
    resolve_symbols,
)
from .sweeps import RawSweep, RawSweepType, raw_sweep

__all__ = ["DerivativeType", "RawSweep", "RawSweepType", "python_only", "raw_sweep", "resolve_symbols"]
