"""Random numeric Numba programs for differential testing against finite differences.

Each program is ``f(x, a, k)`` (a float array, a float, an int) made of loops
with accumulators, branches on data, array reads and writes, math functions and
calls to a helper ``@njit`` function. Expressions are built so that the
function is smooth away from its branch thresholds: divisions and logarithms
only see positive denominators/arguments, and sample points keep a margin from
every threshold.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

THRESHOLDS = (-0.5, 0.0, 0.5)
UNARY = [
    "math.sin({0})", "math.cos({0})", "math.tanh({0})", "math.exp(math.tanh({0}))",
    "math.log(1.0 + {0} * {0})", "math.sqrt(1.0 + {0} * {0})", "math.atan2({0}, 1.5)",
    "({0}) ** 2", "abs({0}) ** 3",
]
BINARY = ["({0} + {1})", "({0} - {1})", "({0} * {1})", "({0} / (1.0 + {1} * {1}))", "max({0}, {1})"]


@dataclass
class Program:
    source: str
    func: Any
    seed: int


def _expr(rng: random.Random, leaves: list[str], depth: int) -> str:
    if depth == 0 or rng.random() < 0.25:
        leaf = rng.choice(leaves)
        return leaf if rng.random() < 0.8 else f"{rng.uniform(-2, 2):.3f} * {leaf}"
    if rng.random() < 0.45:
        return rng.choice(UNARY).format(_expr(rng, leaves, depth - 1))
    return rng.choice(BINARY).format(_expr(rng, leaves, depth - 1), _expr(rng, leaves, depth - 1))


def generate(seed: int) -> Program:
    """Program number ``seed`` (deterministic)."""
    rng = random.Random(seed)
    leaves = ["x[i]", "a", "s", "h(x[i], a)"]
    helper = _expr(rng, ["u", "v"], 2)
    lines = [
        "@njit",
        "def h(u, v):",
        f"    return {helper}",
        "",
        "@njit",
        "def f(x, a, k):",
        "    s = 0.0",
        "    t = np.empty(x.shape[0])",
        "    for i in range(x.shape[0]):",
    ]
    if rng.random() < 0.6:
        c = rng.choice(THRESHOLDS)
        lines += [
            f"        if x[i] > {c}:",
            f"            s = s * 0.5 + {_expr(rng, leaves, 3)}",
            "        else:",
            f"            s = s * 0.5 + {_expr(rng, leaves, 2)}",
        ]
    else:
        lines.append(f"        s = s * 0.5 + {_expr(rng, leaves, 3)}")
    lines.append(f"        t[i] = {_expr(rng, ['x[i]', 'a', 's'], 2)}")
    lines += [
        "    r = 0.0",
        "    for j in range(k):",
        "        for i in range(t.shape[0]):",
        f"            r += {_expr(rng, ['t[i]', 'a', 'x[i]'], 2)} / (1.0 + j)",
        "    return r + s",
    ]
    source = "\n".join(lines)
    namespace: dict[str, Any] = {"njit": njit, "math": math, "np": np}
    exec(compile(source, f"<fuzz program {seed}>", "exec"), namespace)  # noqa: S102
    return Program(source=source, func=namespace["f"], seed=seed)


def sample_point(seed: int, n: int = 5) -> tuple[np.ndarray, float, int]:
    """Arguments keeping a margin of 0.05 from every branch threshold."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, n)
    for t in THRESHOLDS:
        near = np.abs(x - t) < 0.05
        x[near] = t + 0.05 * np.sign(x[near] - t + 1e-12) + 0.01
    return x, float(rng.uniform(-1.0, 1.0)), int(rng.integers(1, 4))


def central_fd(f, x: np.ndarray, a: float, k: int, h: float = 1e-6) -> tuple[np.ndarray, float]:
    gx = np.empty_like(x)
    for i in range(x.size):
        xp, xm = x.copy(), x.copy()
        xp[i] += h
        xm[i] -= h
        gx[i] = (f(xp, a, k) - f(xm, a, k)) / (2 * h)
    ga = (f(x, a + h, k) - f(x, a - h, k)) / (2 * h)
    return gx, ga


def check(seed: int, tol: float = 1e-5) -> tuple[str, str]:
    """Run program ``seed``: returns (outcome, detail), outcome one of ``agree``,
    ``disagree``, ``pyjlad-error:<Type>``, ``invalid-program`` (Numba rejects it,
    or it is too ill-conditioned for finite differences to be an oracle: a value
    above 1e6, or central differences with steps 1e-5 and 1e-6 disagreeing)."""
    import pyjlad

    try:
        program = generate(seed)
        x, a, k = sample_point(seed)
        value = program.func(x, a, k)
    except Exception as exc:  # noqa: BLE001 - the generator produced something Numba rejects
        return "invalid-program", f"{type(exc).__name__}: {exc}"
    if not math.isfinite(value) or abs(value) > 1e6:
        return "invalid-program", f"value {value} is not finite or too large for finite differences"
    try:
        gx, ga = pyjlad.gradient(program.func, x, a, k, wrt=(0, 1))
    except Exception as exc:  # noqa: BLE001 - classified by type
        return f"pyjlad-error:{type(exc).__name__}", str(exc).splitlines()[0][:200]
    fx, fa = central_fd(program.func, x, a, k)
    fx5, fa5 = central_fd(program.func, x, a, k, h=1e-5)
    scale = 1.0 + np.abs(np.concatenate([fx, [fa]]))
    oracle_spread = np.abs(np.concatenate([fx - fx5, [fa - fa5]])) / scale
    if float(np.max(oracle_spread)) > tol:
        return "invalid-program", "finite differences disagree with themselves"
    err = np.abs(np.concatenate([gx - fx, [ga - fa]])) / scale
    if float(np.max(err)) <= tol:
        return "agree", ""
    return "disagree", f"max relative error {float(np.max(err)):.2e}"
