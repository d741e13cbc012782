"""The disk cache's settings: its size cap, its lock timeout, and whether it is on at all."""

from __future__ import annotations

from .. import config

__all__ = ["max_bytes", "lock_timeout", "disabled"]


def max_bytes() -> int:
    """The cap on the entries' total size: ``PYJLAD_CACHE_MAX_BYTES`` (bytes), default 2 GiB.

    Raises
    ------
    SettingError
        If the value is not a whole number of bytes (checked whenever the cache is opened).
    """
    return config.cache_max_bytes()


def lock_timeout() -> float:
    """Seconds to wait for another process's entry lock: ``PYJLAD_LOCK_TIMEOUT``, default 600.

    Raises
    ------
    SettingError
        If the value is not a non-negative number of seconds (checked whenever the cache is opened).
    """
    return config.lock_timeout_s()


def disabled() -> bool:
    """``PYJLAD_DISABLE_DISK_CACHE`` is on; else the cache's settings are checked, so that a typo in them is
    reported before any gradient is built, not after.

    Raises
    ------
    SettingError
        If a cache setting cannot be read.
    """
    if config.disk_cache_disabled():
        return True
    max_bytes()
    lock_timeout()
    return False
