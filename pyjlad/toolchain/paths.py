"""Where pyjlad keeps its per-user files, and where the installed Enzyme plugin lives."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from .. import config
from .versions import ENZYME_VERSION, LLVM_MAJOR

__all__ = ["cache_root", "toolchain_dir", "plugin_path"]


def cache_root() -> Path:
    """pyjlad's per-user cache directory (``PYJLAD_CACHE_DIR`` overrides it)."""
    override = config.cache_dir_override()
    return Path(override) if override else Path(platformdirs.user_cache_dir("pyjlad"))


def toolchain_dir() -> Path:
    """The directory :func:`~pyjlad.toolchain.install` puts this Enzyme version's plugin in."""
    return cache_root() / "toolchain" / f"enzyme-{ENZYME_VERSION}-llvm{LLVM_MAJOR}"


def plugin_path() -> Path:
    """The Enzyme plugin to load (``PYJLAD_ENZYME_PLUGIN`` overrides the installed one)."""
    override = config.enzyme_plugin_override()
    return Path(override) if override else toolchain_dir() / "LLVMEnzyme-15.so"
