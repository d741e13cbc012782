"""Bridges to other frameworks: JAX (:mod:`pyjlad.interop.jax`) and PyTorch (:mod:`pyjlad.interop.torch`).

Both are optional: importing a bridge imports its framework, and says how to
install it when it is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def batches_with_pyjlad_vmap(engine: str | None) -> bool:
    """Whether a bridge's batched calls can run :func:`pyjlad.vmap`: it calls the embedded engine's
    machine code, so only when ``engine`` (for ``None``, the default engine) is that engine."""
    from ..engines import default_engine_name

    return (engine or default_engine_name()) == "embedded"


def written_positions(numba_f: Any, args: Sequence[Any], batched: bool = False) -> set[int]:
    """Positions of the array arguments among ``args`` that ``numba_f`` writes (all of them where pyjlad cannot
    tell; ``batched``: each array stacks samples on axis 0). A bridge gives ``f`` copies of those: a framework's
    arrays are not ``f``'s to write (a tensor's memory, a JAX array's read-only buffer).

    Examples
    --------
    >>> import numpy as np
    >>> from numba import njit
    >>> @njit
    ... def scaled(x, out, c):
    ...     out[:] = c * x
    ...     return out.sum()
    >>> x = np.ones(3)
    >>> x.flags.writeable = False  # as JAX hands its arrays to a callback
    >>> sorted(written_positions(scaled, (x, x, 1.0)))
    [1]
    """
    import numpy as np

    from ..export import numba_argtypes
    from ..memo import cached_for

    arrays = {k for k, a in enumerate(args) if isinstance(a, np.ndarray)}
    if not arrays or (batched and any(args[k].shape[0] == 0 for k in arrays)):
        return arrays
    sample = tuple(a[0] if batched and k in arrays else a for k, a in enumerate(args))
    try:
        argtypes = numba_argtypes(sample)
        writes = cached_for(numba_f, ("written arguments", argtypes), lambda: _written_arguments(numba_f, argtypes))
    except Exception:  # noqa: BLE001 - the call itself reports what is wrong with it
        return arrays
    return {k for k in arrays if k < len(writes) and writes[k]}


def _written_arguments(numba_f: Any, argtypes: tuple[Any, ...]) -> tuple[bool, ...]:
    """:func:`pyjlad.written_aliases.written_arguments` for arrays of ``argtypes`` made writable: a read-only
    one does not compile where ``numba_f`` writes it."""
    from numba import types

    from ..written_aliases import written_arguments

    return written_arguments(numba_f, tuple(t.copy(readonly=False) if isinstance(t, types.Array) and not t.mutable
                                            else t for t in argtypes))
