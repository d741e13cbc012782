"""Exception types raised by pyjlad.

Every error pyjlad raises derives from :class:`PyjladError`, and where a
built-in exception type describes the problem better (``TypeError`` for a
wrong argument type, ``ValueError`` for a bad value) the pyjlad error also
derives from it, so ``except TypeError`` keeps working in user code.

One kind of exception passes through unchanged: an exception the *user's own
function* raises (``raise ValueError(...)`` inside an ``@njit`` function, or
NumPy's errors it triggers). Numba reports only a status to the caller of a
compiled derivative, so pyjlad runs the function itself on copies of the
arguments and lets that exception surface with its own type and message; it is
the user's exception, not pyjlad's, and ``except`` clauses written for the
function keep catching it. Only when the function then raises nothing does
pyjlad raise its own :class:`DifferentiatedFunctionError`.

``tests/test_error_types.py`` checks that no module of pyjlad constructs a
built-in exception directly.
"""

from __future__ import annotations


class PyjladError(Exception):
    """Base class of every exception pyjlad raises."""


class UnsupportedFunctionError(PyjladError, TypeError):
    """The function or its argument/return types cannot be differentiated.

    The message always says what to change.
    """


class ArgumentError(PyjladError, ValueError):
    """An argument of a pyjlad call has the right type but an unusable value.

    For example a cotangent or tangent whose shape differs from the function's
    result or argument, a shadow that shares memory with its argument, or a
    mode other than reverse or forward. The message names the argument and
    what it must be.
    """


class ArgumentTypeError(PyjladError, TypeError):
    """An argument of a pyjlad call has the wrong type (``wrt`` not made of ints, ``Active`` around an array,
    ``primals`` that is not a tuple, an integer argument asked for its derivative); the message names the
    argument and what it must be."""


class DifferentiatedFunctionError(PyjladError, RuntimeError):
    """The function reported an error while differentiated, but raises none when called directly.

    pyjlad re-runs the function on copies of its arguments to raise the
    function's own exception; this error means that run succeeded, so the
    failure lies in the derivative code (please report it, with the function).
    """


class OutOfBoundsError(PyjladError, IndexError):
    """The function indexed an array argument outside its elements while differentiated.

    Its derivative wrote into a guard zone around the argument's shadow (:mod:`pyjlad.shadow_guards`); the
    function's own value is undefined there too (Numba checks indices only with ``boundscheck=True``). The
    message names the argument and, where a bounds-checked run of the function raises it, Numba's
    ``IndexError``.
    """


class OutOfMemoryError(PyjladError, MemoryError):
    """An allocation made while differentiating (Enzyme's tape, a shadow, a temporary) failed.

    The message says how many bytes were asked for.
    """


class MissingDependencyError(PyjladError, ImportError):
    """An optional package a part of pyjlad needs is not installed (JAX for ``pyjlad.interop.jax``,
    PyTorch for ``pyjlad.interop.torch``); the message says what to install."""


class IRError(PyjladError, ValueError):
    """LLVM IR is not in the form a stage of pyjlad expects (a defect of pyjlad's: please report it).

    For example a Numba entry without its ``%retptr``/``%excinfo`` parameters,
    or a module without the definition pyjlad is looking for.
    """


class IRParseError(IRError):
    """A line of LLVM IR pyjlad's IR layer cannot read, or whose parsed form would not render back to it."""


class IRLookupError(PyjladError, KeyError):
    """A module has no definition of the function pyjlad asked for (a ``KeyError``, like a dict lookup)."""


class InvalidObject(PyjladError, ValueError):
    """Bytes (a cached object file, bitcode, an ABI description) are not what they claim to be; the message
    says what is wrong. The disk cache treats such an entry as damaged and builds it again."""


class CacheDirectoryError(PyjladError, PermissionError):
    """A directory of the disk cache is not used: it is not a directory, or not the user's own.

    ``pyjlad cache clear`` reports it; while differentiating it only makes the
    cache fall back to memory (with one :class:`CacheWarning`).
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


class UncheckedDerivativeWarning(UserWarning):
    """A derivative Enzyme built only with loose types is called from ``@njit`` code, where pyjlad cannot check it.

    Called from Python, such a derivative is compared with finite differences of the function on its first
    call and refused where they disagree (:mod:`pyjlad.engines.loose_check`); called from ``@njit`` code
    (``vmap``, a derivative in a loop) it runs with no Python around the call. Issued once per function,
    sweep and argument types, when the calling function is compiled. Calling the same transform once from
    Python at a typical point checks the derivative Enzyme builds for it.
    """


class RecompilationWarning(UserWarning):
    """A plain Python function pyjlad has been given is one of several made from the same code.

    pyjlad compiles a plain function (a ``lambda`` written at the call, a closure) with ``numba.njit`` once per
    function object, and builds its derivatives afresh: a function made anew at each call,
    ``pyjlad.gradient(lambda w: loss(w, X), w)`` in a loop, costs a compile and an Enzyme build (tenths of a
    second, more for linear algebra) and memory Numba never releases, every time. Issued once per code, at its
    third function object. Write the data as an argument instead: ``pyjlad.gradient(loss, w, X)``.
    """


class ParallelFallbackWarning(UserWarning):
    """A derivative of a ``parallel=True`` function runs serially although parallel derivatives are on.

    Issued (unless ``PYJLAD_PARALLEL_DERIVATIVES=0``) where the parallel derivative cannot be built
    (a single Hessian-vector product, LLVM's OpenMP runtime missing, a parallel loop of a shape pyjlad
    does not recognize); the message says which. The derivative is the serial one, still exact.
    (Vector-mode sweeps, ``jacobian``, ``hessian``, batched ``jvp``/``vjp``, differentiate the serial
    copy without this warning: their chunks of directions run on Numba's threads,
    :mod:`pyjlad.chunk_threads`.)
    """
