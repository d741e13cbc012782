"""Exception types raised by pyjlad.

Every error pyjlad raises derives from :class:`PyjladError`, and where a
built-in exception type describes the problem better (``TypeError`` for a
wrong argument type, ``ValueError`` for a bad value) the pyjlad error also
derives from it, so ``except TypeError`` keeps working in user code.
"""

from __future__ import annotations


class PyjladError(Exception):
    """Base class of every exception pyjlad raises."""


class UnsupportedFunctionError(PyjladError, TypeError):
    """The function or its argument/return types cannot be differentiated.

    The message always says what to change.
    """


class ExportError(PyjladError, RuntimeError):
    """Numba could not compile the function, or its IR could not be exported."""


class PortabilityError(ExportError):
    """The exported IR uses an LLVM construct that cannot be down-levelled."""


class ToolchainError(PyjladError, RuntimeError):
    """The Enzyme toolchain is missing or broken; the message says how to fix it."""


class EnzymeError(PyjladError, RuntimeError):
    """Enzyme failed to differentiate the function, or LLVM to compile its derivative.

    Enzyme runs in a separate ``opt`` process, and LLVM compiles the result to
    machine code in a child process (:mod:`pyjlad.engines.native`), so a crash
    or an assertion in either never takes the Python interpreter down; the
    diagnostic output is kept in :attr:`diagnostics` and summarised in the message.
    """

    def __init__(self, message: str, diagnostics: str = "") -> None:
        super().__init__(message)
        self.diagnostics = diagnostics


class EngineUnavailableError(PyjladError, RuntimeError):
    """The requested engine cannot run here; the message says why and how to fix it."""


class SettingError(PyjladError, ValueError):
    """An environment variable of pyjlad's (``PYJLAD_POOL_BYTES``, ...) holds a value it cannot use.

    Raised when the setting is first needed, never at ``import pyjlad``; the
    message names the variable, its value, what it must be and its default.
    """


class ToolchainSettingError(SettingError, ToolchainError):
    """A setting that locates or runs Enzyme's ``opt`` (``PYJLAD_OPT``, ``PYJLAD_OPT_TIMEOUT``) is unusable.

    Both a :class:`SettingError` (every bad setting is one) and a :class:`ToolchainError`, so code
    written against either keeps working.
    """


class CacheLockTimeout(PyjladError, TimeoutError):
    """Another process held a disk-cache entry's lock for longer than ``PYJLAD_LOCK_TIMEOUT`` seconds.

    The message names the lock file (and its holder's process id where the
    system shows it).
    """


class CacheWarning(UserWarning):
    """pyjlad's disk cache cannot be used as it is; gradients still work.

    Issued once per cause and directory: the cache directory cannot be written
    (read-only, full, a file-size limit) or is not the user's own (owned by
    someone else, writable by group or others), so gradients are kept in memory
    only; or an entry was ignored (damaged, not signed by this user, invalid
    contents) and is built again.
    """
