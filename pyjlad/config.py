"""Every ``PYJLAD_*`` environment setting pyjlad reads, each by one small function of this module.

No other module of pyjlad reads a ``PYJLAD_*`` variable (``tests/test_settings.py`` checks it), and
``docs/settings.md`` lists every one with its default. Each setting is read when it is first needed,
never at ``import pyjlad``: the functions below read the environment on every call, so a test or a
user that changes a variable sees the change at the next use. An unset or empty variable means the
default, and a value the setting cannot use raises :class:`~pyjlad.errors.SettingError` (a
``ValueError``) naming the variable, the value, what it must be and the default. The policy is the
same for every setting, the disk cache's included: a value the user wrote but pyjlad cannot read is
a typo to be told about, never silently replaced by the default (a cache cap of "2G" quietly read
as 2 GiB, or "PYJLAD_DISABLE_DISK_CACHE=yes please" quietly ignored, would surprise). This is
distinct from the disk cache *failing* (unwritable, full, foreign, damaged), which never stops a
gradient: that degrades to memory with one ``CacheWarning``.

Settings that name things (an engine, a path) are returned as written, and the module that uses
them checks them with its own error (:class:`~pyjlad.errors.EngineUnavailableError` for an unknown
engine, :class:`~pyjlad.errors.ToolchainSettingError` for an ``opt`` that is not executable).
The generic readers :func:`byte_count`, :func:`seconds` and :func:`flag` parse the numeric ones.

Examples
--------
>>> import os
>>> os.environ["PYJLAD_EXAMPLE_BYTES"] = "4096"
>>> byte_count("PYJLAD_EXAMPLE_BYTES", default=1024)
4096
>>> os.environ["PYJLAD_EXAMPLE_BYTES"] = "lots"
>>> byte_count("PYJLAD_EXAMPLE_BYTES", default=1024)
Traceback (most recent call last):
    ...
pyjlad.errors.SettingError: PYJLAD_EXAMPLE_BYTES='lots' is not a whole number of bytes (e.g. 1024, the default; unset it to use the default)
>>> del os.environ["PYJLAD_EXAMPLE_BYTES"]
"""

from __future__ import annotations

import math
import os

from .errors import SettingError, ToolchainSettingError

__all__ = [
    "byte_count", "seconds", "flag",
    "engine_name", "julia_allow_install",
    "cache_dir_override", "gradient_cache_dir_override", "disk_cache_disabled", "cache_max_bytes",
    "parallel_derivatives", "scope_temporaries",
    "lock_timeout_s", "pool_bytes", "stack_bytes", "opt_timeout_s", "opt_override", "enzyme_plugin_override",
    "DEFAULT_ENGINE", "DEFAULT_CACHE_MAX_BYTES", "DEFAULT_LOCK_TIMEOUT_S", "DEFAULT_POOL_BYTES",
    "DEFAULT_STACK_BYTES", "DEFAULT_OPT_TIMEOUT_S",
]

#: Engine used when none is named.
DEFAULT_ENGINE = "embedded"
#: Cap on the disk cache's entries, in bytes (2 GiB).
DEFAULT_CACHE_MAX_BYTES = 2 * 1024**3
#: Seconds to wait for another process's disk-cache lock.
DEFAULT_LOCK_TIMEOUT_S = 600.0
#: Bytes of freed large blocks the allocation pool keeps (1 GiB).
DEFAULT_POOL_BYTES = 1 << 30
#: Stack of the thread that runs sweeps of recursive functions, in bytes (1 GiB).
DEFAULT_STACK_BYTES = 1 << 30
#: Seconds one Enzyme run (``opt``), or one compile of its result to machine code, may take.
DEFAULT_OPT_TIMEOUT_S = 600.0


def _text(name: str) -> str:
    return os.environ.get(name, "").strip()


def _refuse(name: str, text: str, what: str, default: float) -> SettingError:
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    return SettingError(f"{name}={text!r} is not {what} (e.g. {shown}, the default; unset it to use the default)")


def byte_count(name: str, default: int) -> int:
    """``$name`` as a whole, non-negative number of bytes; ``default`` when unset or empty.

    Raises
    ------
    SettingError
        If the value is not a whole number >= 0.
    """
    text = _text(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise _refuse(name, text, "a whole number of bytes", default)
    return value


def seconds(name: str, default: float, *, allow_zero: bool = True) -> float:
    """``$name`` as a finite number of seconds (``> 0`` unless ``allow_zero``); ``default`` when unset.

    Raises
    ------
    SettingError
        If the value is not such a number.
    """
    text = _text(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
        raise _refuse(name, text, "a number of seconds" if allow_zero else "a positive number of seconds",
                      default)
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(name: str, default: bool = False) -> bool:
    """``$name`` as a switch: ``1``/``true``/``yes``/``on`` (any case) is on, ``0``/``false``/``no``/``off`` is
    off; unset or empty, ``default``.

    Raises
    ------
    SettingError
        If the value is none of these.
    """
    text = _text(name).lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if not text:
        return default
    raise SettingError(f"{name}={os.environ[name]!r} is not a switch (1, true, yes or on; 0, false, no or off; "
                       f"unset it for the default, {'on' if default else 'off'})")


# --- the settings, one function each ------------------------------------------------------------------------------


def _named(name: str) -> str | None:
    """``$name`` as written, or None when unset or empty (a path or a name; checked where it is used)."""
    return os.environ.get(name) or None


def engine_name() -> str:
    """``PYJLAD_ENGINE``: the engine used when a call names none; default ``embedded``.

    Returned as written (an empty value included); :func:`pyjlad.engines.get_engine` resolves
    aliases and raises :class:`~pyjlad.errors.EngineUnavailableError` for an unknown name.
    """
    return os.environ.get("PYJLAD_ENGINE", DEFAULT_ENGINE)


def julia_allow_install() -> bool:
    """``PYJLAD_JULIA_ALLOW_INSTALL``: exactly ``1`` lets juliacall download Julia when none is on
    ``PATH``; default (unset, or any other value) off, and the Julia engine says how to install Julia."""
    return os.environ.get("PYJLAD_JULIA_ALLOW_INSTALL") == "1"


def cache_dir_override() -> str | None:
    """``PYJLAD_CACHE_DIR``: root of pyjlad's per-user cache (the toolchain and the gradient cache).

    None when unset or empty: then platformdirs' user cache directory (``~/.cache/pyjlad``).
    """
    return _named("PYJLAD_CACHE_DIR")


def gradient_cache_dir_override() -> str | None:
    """``PYJLAD_GRADIENT_CACHE_DIR``: where compiled gradients are kept.

    None when unset or empty: then ``gradients`` under the cache root (:func:`cache_dir_override`).
    """
    return _named("PYJLAD_GRADIENT_CACHE_DIR")


def disk_cache_disabled() -> bool:
    """``PYJLAD_DISABLE_DISK_CACHE``: a switch (:func:`flag`) that turns the disk cache off; default off.

    Raises
    ------
    SettingError
        If the value is not a switch word.
    """
    return flag("PYJLAD_DISABLE_DISK_CACHE")


def parallel_derivatives() -> bool:
    """``PYJLAD_PARALLEL_DERIVATIVES``: a switch (:func:`flag`), default on, that makes reverse- and
    forward-mode derivatives of ``parallel=True`` functions run their ``prange`` loops in parallel (OpenMP;
    :mod:`pyjlad.parallel_derivatives`); off, they run through a serial copy.

    Raises
    ------
    SettingError
        If the value is not a switch word.
    """
    return flag("PYJLAD_PARALLEL_DERIVATIVES", default=True)


def scope_temporaries() -> bool:
    """``PYJLAD_SCOPE_TEMPORARIES``: a switch (:func:`flag`), default on, that tells Enzyme which memory the
    differentiated function allocates itself and which its caller passed in (:mod:`pyjlad.memory_scopes`), so
    that it reads the caller's arrays again in the reverse sweep instead of caching them; off, the module
    Enzyme gets carries no such metadata (as before the setting existed).

    Raises
    ------
    SettingError
        If the value is not a switch word.
    """
    return flag("PYJLAD_SCOPE_TEMPORARIES", default=True)


def cache_max_bytes() -> int:
    """``PYJLAD_CACHE_MAX_BYTES``: cap on the disk cache's total size in bytes, least recently used entries
    going first; default 2 GiB.

    Raises
    ------
    SettingError
        If the value is not a whole number of bytes.
    """
    return byte_count("PYJLAD_CACHE_MAX_BYTES", DEFAULT_CACHE_MAX_BYTES)


def lock_timeout_s() -> float:
    """``PYJLAD_LOCK_TIMEOUT``: seconds (>= 0) to wait for another process building the same disk-cache
    entry; default 600.

    Raises
    ------
    SettingError
        If the value is not a non-negative number of seconds.
    """
    return seconds("PYJLAD_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT_S)


def pool_bytes() -> int:
    """``PYJLAD_POOL_BYTES``: most bytes of freed large blocks the allocation pool keeps for reuse (``0``
    keeps none); default 1 GiB.

    Raises
    ------
    SettingError
        If the value is not a whole number of bytes.
    """
    return byte_count("PYJLAD_POOL_BYTES", DEFAULT_POOL_BYTES)


def stack_bytes() -> int:
    """``PYJLAD_STACK_BYTES``: stack of the thread that runs sweeps of recursive functions (address space,
    committed only as used); default 1 GiB.

    Raises
    ------
    SettingError
        If the value is not a whole number of bytes.
    """
    return byte_count("PYJLAD_STACK_BYTES", DEFAULT_STACK_BYTES)


def opt_timeout_s() -> float:
    """``PYJLAD_OPT_TIMEOUT``: seconds (> 0) one Enzyme run (``opt``), or one compile of its result to
    machine code in a child process, may take; default 600.

    Raises
    ------
    ToolchainSettingError
        If the value is not a positive number of seconds (a :class:`SettingError` and a
        :class:`~pyjlad.errors.ToolchainError`).
    """
    try:
        return seconds("PYJLAD_OPT_TIMEOUT", DEFAULT_OPT_TIMEOUT_S, allow_zero=False)
    except SettingError as exc:
        raise ToolchainSettingError(str(exc)) from None


def opt_memory_bytes() -> int:
    """``PYJLAD_OPT_MEMORY``: the address space (bytes) one Enzyme run (``opt``) may take; default three quarters
    of this machine's memory (at least 2 GiB); ``0``: no limit. Enzyme's derivative of a small function can grow
    without bound (a 10-line Kalman recursion filled the machine until the kernel killed processes): with the
    limit, ``opt`` stops with "out of memory" and pyjlad raises an :class:`~pyjlad.errors.EnzymeError`.

    Raises
    ------
    ToolchainSettingError
        If the value is not a whole number of bytes.
    """
    try:
        return byte_count("PYJLAD_OPT_MEMORY", _default_opt_memory())
    except SettingError as exc:
        raise ToolchainSettingError(str(exc)) from None


def _default_opt_memory() -> int:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system that says: no limit
        return 0
    return max(2 << 30, total * 3 // 4)


def opt_override() -> str | None:
    """``PYJLAD_OPT``: LLVM 15's ``opt`` to run Enzyme with.

    None when unset or empty: then ``opt-15`` on ``PATH`` (or ``/usr/lib/llvm-15/bin/opt``).
    :func:`pyjlad.toolchain.find_opt` refuses a path that is not an executable file.
    """
    return _named("PYJLAD_OPT")


def enzyme_plugin_override() -> str | None:
    """``PYJLAD_ENZYME_PLUGIN``: the Enzyme plugin for ``opt`` to load (the user's choice, so its ownership
    is not checked).

    None when unset or empty: then the installed toolchain's ``LLVMEnzyme-15.so``.
    """
    return _named("PYJLAD_ENZYME_PLUGIN")


#: The variable :func:`dump_ir_directory` reads (its dumps name it in their errors).
DUMP_IR_VARIABLE = "PYJLAD_DUMP_IR"


def dump_ir_directory() -> str | None:
    """``PYJLAD_DUMP_IR``: the directory :func:`pyjlad.ir.pipeline.dump` writes the module into after every
    pass, and Enzyme's input and output.

    None when unset or empty: no dumps.
    """
    return _named(DUMP_IR_VARIABLE)
