"""Bridges to other frameworks: JAX (:mod:`pyjlad.interop.jax`) and PyTorch (:mod:`pyjlad.interop.torch`).

Both are optional: importing a bridge imports its framework, and says how to
install it when it is missing.
"""

from __future__ import annotations


def batches_with_pyjlad_vmap(engine: str | None) -> bool:
    """Whether a bridge's batched calls can run :func:`pyjlad.vmap`: it calls the embedded engine's
    machine code, so only when ``engine`` (for ``None``, the default engine) is that engine."""
    from ..engines import default_engine_name

    return (engine or default_engine_name()) == "embedded"
