"""pyjlad: gradients of Numba code with Enzyme.

>>> import numpy as np, pyjlad
>>> from numba import njit
>>> @njit
... def loss(x):
...     return np.sum(x * x)
>>> pyjlad.gradient(loss, np.array([1.0, -2.0])).tolist()
[2.0, -4.0]

Pipeline: :mod:`pyjlad.export` (Numba -> IR + ABI) -> :mod:`pyjlad.portable`
(clean, down-level to LLVM 15) -> :mod:`pyjlad.engines` (Enzyme) ->
:mod:`pyjlad.transforms` (the public API).
"""

import logging as _logging

from . import numba_calls as _numba_calls  # noqa: F401 - registers derivatives as Numba callables
from .activity import Active, Const, Duplicated, DuplicatedNoNeed, Forward, Reverse
from .annotated import autodiff
from .batching import vmap
from .checkpointing import CheckpointedLoop, checkpointed_loop
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    CacheLockTimeout,
    CacheWarning,
    DifferentiatedFunctionError,
    EngineUnavailableError,
    EnzymeError,
    ExportError,
    OutOfBoundsError,
    OutOfMemoryError,
    ParallelFallbackWarning,
    PortabilityError,
    PyjladError,
    RecompilationWarning,
    SettingError,
    ToolchainError,
    UncheckedDerivativeWarning,
    UnsupportedFunctionError,
)
from .frozen_globals import watch as _watch
from .product_fns import hvp_fn, jacfwd, jacrev, jvp_fn, vjp_fn
from .products import hessian, hvp, jacobian, jvp, vjp
from .rules import CustomDerivative, custom_derivative
from .transforms import grad, gradient, value_and_grad, value_and_gradient

__version__ = "0.1.0"

# The library logs to "pyjlad" (compile timings, Enzyme retries, cache use at DEBUG) and leaves
# handlers to the application: logging.basicConfig(level=logging.DEBUG) shows them.
_logging.getLogger("pyjlad").addHandler(_logging.NullHandler())

# Numba's compiles recorded from here on: what arrays each one froze (pyjlad.frozen_globals).
_watch()

# Written inside @njit code, each of these is a Numba typing error saying what to write instead.
_numba_calls.python_only.register({"gradient": gradient, "value_and_gradient": value_and_gradient, "grad": grad,
                                   "value_and_grad": value_and_grad, "jvp": jvp, "vjp": vjp, "jacobian": jacobian,
                                   "hvp": hvp, "hessian": hessian})

__all__ = [
    "gradient", "value_and_gradient", "grad", "value_and_grad",
    "jvp", "vjp", "jacobian", "hessian", "hvp", "jacrev", "jacfwd", "jvp_fn", "vjp_fn", "hvp_fn", "vmap",
    "checkpointed_loop", "CheckpointedLoop",
    "custom_derivative", "CustomDerivative",
    "autodiff", "Reverse", "Forward", "Const", "Active", "Duplicated", "DuplicatedNoNeed",
    "PyjladError", "UnsupportedFunctionError", "ExportError", "PortabilityError",
    "ToolchainError", "EnzymeError", "EngineUnavailableError", "CacheWarning", "ParallelFallbackWarning", "UncheckedDerivativeWarning",
    "RecompilationWarning",
    "CacheLockTimeout",
    "SettingError", "ArgumentError", "ArgumentTypeError", "OutOfMemoryError", "OutOfBoundsError",
    "DifferentiatedFunctionError",
    "__version__",
]
