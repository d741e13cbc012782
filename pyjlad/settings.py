"""pyjlad's numeric settings from the environment, all read and checked the same way.

Each setting is read when it is first needed, never at ``import pyjlad``, by one
of the readers below; an unset or empty variable means the default, and a value
the setting cannot use raises :class:`~pyjlad.errors.SettingError` (a
``ValueError``) naming the variable, the value, what it must be and the
default. The disk cache's own settings (``PYJLAD_CACHE_MAX_BYTES``,
``PYJLAD_LOCK_TIMEOUT``) turn that error into one ``CacheWarning`` and use the
default instead, because the cache never stops a gradient; every other setting
(``PYJLAD_POOL_BYTES``, ``PYJLAD_STACK_BYTES``, ``PYJLAD_OPT_TIMEOUT``) changes
how the computation runs, and a typo there is an error. ``docs/settings.md``
lists them all.

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

from .errors import SettingError

__all__ = ["byte_count", "seconds"]


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
