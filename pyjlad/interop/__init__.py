"""Bridges to other frameworks: JAX (:mod:`pyjlad.interop.jax`) and PyTorch (:mod:`pyjlad.interop.torch`).

Both are optional: importing a bridge imports its framework, and says how to
install it when it is missing.
"""
