"""pyjlad's numeric settings from the environment, all read and checked the same way.

Each setting is read when it is first needed, never at ``import pyjlad``, by one
of the readers below; an unset or empty variable means the default, and a value
the setting cannot use raises :class:`~pyjlad.errors.SettingError` (a
``ValueError``) naming the variable, the value, what it must be and the
default. The policy is the same for every setting, the disk cache's included:
a value the user wrote but pyjlad cannot read is a typo to be told about, never
silently replaced by the default (a cache cap of "2G" quietly read as 2 GiB, or
"PYJLAD_DISABLE_DISK_CACHE=yes" quietly ignored, would surprise). This is
distinct from the disk cache *failing* (unwritable, full, foreign, damaged),
which never stops a gradient: that degrades to memory with one ``CacheWarning``.
``docs/settings.md`` lists them all.

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

__all__ = ["byte_count", "flag", "seconds"]


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


def flag(name: str) -> bool:
    """``$name`` as a switch: ``1``/``true``/``yes``/``on`` (any case) is on; unset, empty, ``0``/``false``/
    ``no``/``off`` is off.

    Raises
    ------
    SettingError
        If the value is none of these.
    """
    text = _text(name).lower()
    if text in _TRUE:
        return True
    if not text or text in _FALSE:
        return False
    raise SettingError(f"{name}={os.environ[name]!r} is not a switch (1, true, yes or on; 0, false, no or off, "
                       "the default, unset it to use the default)")
