"""pyjlad's logging: the ``pyjlad`` logger and a timer for the steps worth timing.

Nothing is printed unless the application configures logging; at DEBUG the
loggers under ``pyjlad`` say what each gradient's build did and how long each
step took (export, every Enzyme run and its retries, the machine-code compile)
and when a build came from the disk cache:

>>> import logging, numpy as np, pyjlad
>>> logging.basicConfig(level=logging.DEBUG)   # or logging.getLogger("pyjlad").setLevel(logging.DEBUG)
... # doctest: +SKIP
>>> pyjlad.gradient(lambda x: np.sum(x * x), np.ones(3))   # doctest: +SKIP
DEBUG:pyjlad.export:exported <lambda> for (array(float64, 1d, C),) in 0.412 s
DEBUG:pyjlad.engines.differentiate:Enzyme (reverse) on <lambda> in 0.151 s
...
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["get_logger", "timed"]


def get_logger(module: str) -> logging.Logger:
    """The logger of a pyjlad module (a child of ``pyjlad``)."""
    return logging.getLogger(module)


@contextmanager
def timed(logger: logging.Logger, message: str, *args: object) -> Iterator[None]:
    """Log ``message % args`` with the time the block took, at DEBUG (free when DEBUG is off).

    >>> import logging
    >>> with timed(logging.getLogger("pyjlad.example"), "summed %d numbers", 3):
    ...     _ = sum([1, 2, 3])
    """
    if not logger.isEnabledFor(logging.DEBUG):
        yield
        return
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        logger.debug(message + " failed after %.3f s", *args, time.perf_counter() - start)
        raise
    logger.debug(message + " in %.3f s", *args, time.perf_counter() - start)
