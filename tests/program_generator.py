"""Random numeric Numba programs for differential testing against finite differences.

Each program is ``f(x, a, k)`` (a float array, a float, an int) made of loops
with accumulators, branches on data, array reads and writes, math functions and
calls to a helper ``@njit`` function. Expressions are built so that the
function is smooth away from its branch thresholds: divisions and logarithms
only see positive denominators/arguments, and sample points keep a margin from
every threshold.

On top of that base, most programs gain one or two blocks of the control-flow
shapes of real code (:data:`CONSTRUCTS`): running maxima/minima (also used
inside the loop that updates them), early exits (``break``, and ``return``
inside a helper's loop), capped ``while`` loops (Newton and fixed-point
iterations), helpers writing into arrays, buffers swapped over time steps,
integer-array indexing (gather and scatter-add), axis reductions of a
reshaped array, recurrences that read back what the loop wrote (``y[i]`` from
``y[i - 1]``, first or second order, forward or backward) and sibling loops
reading the same column of an array a sweep then updates. Each block adds a
term ``e0``, ``e1`` to the result. About a third of the programs also gain a
container block: a list of floats (or of ``(float, int)`` pairs) that starts
empty, as a literal or as a repeated list and grows by ``append`` in ``f`` or
in a helper it is passed to, sometimes popped; or a set of integer keys that
decides which terms are added. About a third gain an in-place sweep of a temporary: each element updated
from itself and the element the loop overwrites next (ahead in a forward sweep, behind in a backward one, the
next row from an outer loop), as backward induction in an option tree does. About a fifth end with a sweep of
the argument ``x`` itself, in place (the same shapes, into the caller's array: each element from itself and the
one the loop overwrites next), after which its terms read ``x``; the checks take their finite differences and
the derivative on copies of the point taken before any call.

Seeds: the base program of a seed is the one the generator always gave (its
draws come first, from ``random.Random(seed)``); the blocks are drawn from an
independent stream (:func:`_extension_rng`), and a seed whose stream draws no
block (about a quarter of them) gives exactly the program it gave before the
blocks were added, unless it gains a container block (from a third stream,
``pyjlad-fuzz-containers-<seed>``, added after the others on 2026-12-06) or an in-place sweep (a fourth,
``pyjlad-fuzz-sweeps-<seed>``, added later that day) or a sweep of its argument (a fifth,
``pyjlad-fuzz-arguments-<seed>``, added later still).
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


#: The constructs of the extension blocks.
BLOCK_CONSTRUCTS = ("running-max", "running-min", "early-exit", "while-loop", "helper-writes",
                    "swapped-buffers", "index-array", "axis-sum", "recurrence", "sibling-loops")
#: Containers (since 2026-12-06), drawn from a stream of their own so that every seed keeps the blocks above.
CONTAINER_CONSTRUCTS = ("list-growth", "integer-set")
#: Temporaries swept in place, read ahead (since 2026-12-06), from a fourth stream.
SWEEP_CONSTRUCTS = ("in-place-sweep",)
#: The argument ``x`` swept in place at the end (since 2026-12-06), from a fifth stream.
ARGUMENT_CONSTRUCTS = ("argument-sweep",)
#: A search leaving two nested loops at once (since 2026-12-06), from a sixth stream.
SEARCH_CONSTRUCTS = ("nested-search",)
CONSTRUCTS = BLOCK_CONSTRUCTS + CONTAINER_CONSTRUCTS + SWEEP_CONSTRUCTS + ARGUMENT_CONSTRUCTS + SEARCH_CONSTRUCTS
#: Share of seeds whose program gains extension blocks, a container block, an in-place sweep, and a sweep of
#: its argument.
EXTENSION_RATE = 0.75
CONTAINER_RATE = 0.3
SWEEP_RATE = 0.3
ARGUMENT_RATE = 0.2
SEARCH_RATE = 0.25


@dataclass
class Program:
    source: str
    func: Any
    seed: int
    constructs: tuple[str, ...] = ()


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
    ]
    ext = _extension_rng(seed)
    kinds: list[str] = []
    if ext.random() < EXTENSION_RATE:
        kinds = [ext.choice(BLOCK_CONSTRUCTS) for _ in range(1 if ext.random() < 0.6 else 2)]
    containers = random.Random(f"pyjlad-fuzz-containers-{seed}")
    if containers.random() < CONTAINER_RATE:
        kinds.append(containers.choice(CONTAINER_CONSTRUCTS))
    sweeps = random.Random(f"pyjlad-fuzz-sweeps-{seed}")
    if sweeps.random() < SWEEP_RATE:
        kinds.append(sweeps.choice(SWEEP_CONSTRUCTS))
    arguments = random.Random(f"pyjlad-fuzz-arguments-{seed}")
    if arguments.random() < ARGUMENT_RATE and "integer-set" not in kinds:
        # Not beside a set of integers: pyjlad refuses that pair, a known limit (README, "Differential fuzzing":
        # Enzyme cannot type the set's count when the function writes its argument, and the loose-typed derivative
        # fails its check).
        kinds.append(arguments.choice(ARGUMENT_CONSTRUCTS))
    searches = random.Random(f"pyjlad-fuzz-searches-{seed}")
    if searches.random() < SEARCH_RATE:
        kinds.insert(0, searches.choice(SEARCH_CONSTRUCTS))  # first: before any block that writes x
    helpers: list[str] = []
    for j, kind in enumerate(kinds):
        stream = (containers if kind in CONTAINER_CONSTRUCTS else sweeps if kind in SWEEP_CONSTRUCTS
                  else arguments if kind in ARGUMENT_CONSTRUCTS else searches if kind in SEARCH_CONSTRUCTS
                  else ext)
        helper_lines, body_lines = _BLOCKS[kind](stream, j)
        helpers += helper_lines
        lines += body_lines
    lines.append("    return r + s" + "".join(f" + e{j}" for j in range(len(kinds))))
    source = "\n".join(helpers + lines)
    namespace: dict[str, Any] = {"njit": njit, "math": math, "np": np}
    exec(compile(source, f"<fuzz program {seed}>", "exec"), namespace)  # noqa: S102
    return Program(source=source, func=namespace["f"], seed=seed, constructs=tuple(kinds))


def _extension_rng(seed: int) -> random.Random:
    """The stream the extension blocks of program ``seed`` are drawn from (independent of the base's)."""
    return random.Random(f"pyjlad-fuzz-extension-{seed}")


# ----------------------------------------------------------------------------- extension blocks
# Each builder returns (helper function lines, body lines of f); the body lines define e{j}.
# Leaves available in f's body after the base: x, a, k, s, t (t[i] filled for every i), r.

def _coef(rng: random.Random) -> str:
    """A coefficient of magnitude 0.3 to 1.5, either sign."""
    return f"{rng.choice((-1, 1)) * rng.uniform(0.3, 1.5):.3f}"


def _running_extremum(rng: random.Random, j: int, largest: bool) -> tuple[list[str], list[str]]:
    op, fn, start = (">", "max", "-np.inf") if largest else ("<", "min", "np.inf")
    value = f"{_coef(rng)} * x[i] + {_expr(rng, ['x[i]', 'a', 't[i]'], 2)}"
    body = [f"    m{j} = {start}", f"    c{j} = 0.0", "    for i in range(x.shape[0]):",
            f"        v{j} = {value}"]
    if rng.random() < 0.5:
        body += [f"        if v{j} {op} m{j}:", f"            m{j} = v{j}"]
    else:
        body.append(f"        m{j} = {fn}(m{j}, v{j})")
    carried = rng.random() < 0.4  # the running value also used inside the loop that updates it
    if carried:
        body.append(f"        c{j} += m{j} * {rng.uniform(0.2, 1.0):.3f}")
    body.append(f"    e{j} = c{j} + m{j} + {_expr(rng, [f'm{j}', 'a'], 1)}")
    return [], body


def _early_exit(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    if rng.random() < 0.5:
        limit = rng.uniform(0.5, 3.0)
        return [], [
            f"    e{j} = 0.0",
            "    for i in range(x.shape[0]):",
            f"        e{j} += ({_coef(rng)} * x[i] + {_expr(rng, ['x[i]', 'a', 't[i]'], 2)}) ** 2 + 0.1",
            f"        if e{j} > {limit:.3f}:",
            "            break",
        ]
    # return inside a helper's loop, on a comparison of x[i] with a sample threshold
    helper = [
        "@njit",
        f"def g{j}(x, a, lim):",
        "    acc = 0.0",
        "    for i in range(x.shape[0]):",
        f"        acc += {_expr(rng, ['x[i]', 'a'], 2)} * 0.5",
        "        if x[i] > lim:",
        f"            return acc * {_expr(rng, ['x[i]', 'a'], 1)}",
        "    return acc",
        "",
    ]
    return helper, [f"    e{j} = g{j}(x, a, {rng.choice(THRESHOLDS)})"]


def _while_loop(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    rhs = _expr(rng, ["a", "s", "x[0]", "t[k % x.shape[0]]"], 2)
    if rng.random() < 0.5:
        # Newton on y**3 + y = rhs (one real root, derivative >= 1), stopped on a tolerance or a cap
        return [], [
            f"    rhs{j} = {rhs}",
            f"    y{j} = 0.0",
            f"    it{j} = 0",
            f"    while it{j} < 60:",
            f"        g{j} = y{j} ** 3 + y{j} - rhs{j}",
            f"        if abs(g{j}) < 1e-14 * (1.0 + abs(rhs{j})):",
            "            break",
            f"        y{j} -= g{j} / (3.0 * y{j} * y{j} + 1.0)",
            f"        it{j} += 1",
            f"    e{j} = y{j}",
        ]
    # fixed point of y = 0.5 cos(y) + rhs (a contraction), with a cap
    return [], [
        f"    rhs{j} = {rhs}",
        f"    y{j} = 0.0",
        f"    d{j} = 1.0",
        f"    it{j} = 0",
        f"    while abs(d{j}) > 1e-15 and it{j} < 200:",
        f"        d{j} = 0.5 * math.cos(y{j}) + rhs{j} - y{j}",
        f"        y{j} += d{j}",
        f"        it{j} += 1",
        f"    e{j} = y{j} * {rng.uniform(-2.0, 2.0):.3f}",
    ]


def _helper_writes(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    helper = [
        "@njit",
        f"def w{j}(x, a, out):",
        "    for i in range(x.shape[0]):",
        f"        out[i] = {_coef(rng)} * x[i] + {_expr(rng, ['x[i]', 'a'], 2)}",
        "",
    ]
    return helper, [
        f"    buf{j} = np.empty(x.shape[0])",
        f"    w{j}(x, a, buf{j})",
        f"    e{j} = 0.0",
        "    for i in range(x.shape[0]):",
        f"        e{j} += {_coef(rng)} * buf{j}[i] + {_expr(rng, [f'buf{j}[i]', 't[i]', 'a'], 2)}",
    ]


def _swapped_buffers(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    update = _expr(rng, [f"p{j}[(i + 1) % x.shape[0]]", "a"], 1)
    return [], [
        f"    p{j} = x.copy()",
        f"    q{j} = np.empty_like(x)",
        "    for step in range(k + 1):",
        "        for i in range(x.shape[0]):",
        f"            q{j}[i] = 0.5 * p{j}[i] + 0.25 * p{j}[i - 1] + 0.2 * math.tanh({update})",
        f"        p{j}, q{j} = q{j}, p{j}",
        f"    e{j} = 0.0",
        "    for i in range(x.shape[0]):",
        f"        e{j} += {_coef(rng)} * p{j}[i] + {_expr(rng, [f'p{j}[i]', 'x[i]', 'a'], 2)}",
    ]


def _index_array(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    body = [
        f"    idx{j} = np.empty(2 * x.shape[0], dtype=np.int64)",
        f"    for i in range(idx{j}.shape[0]):",
        f"        idx{j}[i] = (i * {rng.randint(1, 4)} + k) % x.shape[0]",
    ]
    if rng.random() < 0.5:
        body += [  # gather
            f"    e{j} = 0.0",
            f"    for i in range(idx{j}.shape[0]):",
            f"        e{j} += {_coef(rng)} * x[idx{j}[i]] + {_expr(rng, [f'x[idx{j}[i]]', 'a'], 2)}",
        ]
    else:
        body += [  # scatter-add, then a smooth reduction
            f"    acc{j} = np.zeros(x.shape[0])",
            f"    for i in range(idx{j}.shape[0]):",
            f"        acc{j}[idx{j}[i]] += {_coef(rng)} * x[i % x.shape[0]] + "
            f"{_expr(rng, ['x[i % x.shape[0]]', 'a'], 2)}",
            f"    e{j} = np.sum(acc{j} * acc{j}) * 0.1",
        ]
    return [], body


def _axis_sum(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    shape, axis = ("(2, x.shape[0])", rng.choice((0, 1))) if rng.random() < 0.5 else \
        ("(x.shape[0], 2)", rng.choice((0, 1)))
    return [], [
        f"    z{j} = np.empty(2 * x.shape[0])",
        "    for i in range(x.shape[0]):",
        f"        z{j}[2 * i] = {_coef(rng)} * x[i] + {_expr(rng, ['x[i]', 'a'], 2)}",
        f"        z{j}[2 * i + 1] = {_expr(rng, ['t[i]', 'x[i]'], 2)}",
        f"    col{j} = np.sum(z{j}.reshape({shape}), axis={axis})",
        f"    e{j} = 0.0",
        f"    for i in range(col{j}.shape[0]):",
        f"        e{j} += {_coef(rng)} * col{j}[i] + {_expr(rng, [f'col{j}[i]', 'a'], 1)}",
    ]


def _recurrence(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    drive = f"{_coef(rng)} * x[i] + {_expr(rng, ['x[i]', 't[i]'], 1)}"
    gain = f"{rng.uniform(0.3, 0.9):.3f} * math.tanh(a)"  # |gain| < 0.9: a stable filter
    shape = rng.choice(("first", "second", "backward"))
    if shape == "backward":
        body = [f"    y{j} = np.empty(x.shape[0])", f"    y{j}[x.shape[0] - 1] = x[x.shape[0] - 1]",
                "    for i in range(x.shape[0] - 2, -1, -1):", f"        y{j}[i] = {drive} + {gain} * y{j}[i + 1]"]
    elif shape == "second":
        body = [f"    y{j} = np.empty(x.shape[0])", f"    y{j}[0] = x[0]", f"    y{j}[1] = x[1]",
                "    for i in range(2, x.shape[0]):",
                f"        y{j}[i] = {drive} + {gain} * y{j}[i - 1] - 0.25 * ({gain}) ** 2 * y{j}[i - 2]"]
    else:
        body = [f"    y{j} = np.empty(x.shape[0])", f"    y{j}[0] = x[0]", "    for i in range(1, x.shape[0]):",
                f"        y{j}[i] = {drive} + {gain} * y{j}[i - 1]"]
    return [], body + [f"    e{j} = 0.0", "    for i in range(x.shape[0]):",
                       f"        e{j} += {_coef(rng)} * y{j}[i] + {_expr(rng, [f'y{j}[i]', 'a'], 1)}"]


def _sibling_loops(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    # two loops over one column, each sum nonlinear in it (both reverse sweeps need the loaded values), inside a
    # sweep with a small constant count (unrolled before Enzyme, its copies are sibling loops too) that then
    # updates the column
    return [], [
        f"    b{j} = np.empty((x.shape[0], 2))",
        "    for i in range(x.shape[0]):",
        f"        b{j}[i, 0] = x[i]",
        f"        b{j}[i, 1] = {_coef(rng)} * x[i]",
        f"    e{j} = 0.0",
        f"    for sweep in range({rng.randint(2, 3)}):",
        f"        u{j} = 0.0",
        "        for i in range(x.shape[0]):",
        f"            u{j} += {_coef(rng)} * b{j}[i, 0] * b{j}[i, 0]",
        f"        v{j} = 0.0",
        "        for i in range(x.shape[0]):",
        f"            v{j} += {_coef(rng)} * math.sin(b{j}[i, 0]) + {_expr(rng, [f'b{j}[i, 0]', 'a'], 1)}",
        f"        e{j} += u{j} * v{j}",
        "        for i in range(x.shape[0]):",
        f"            b{j}[i, 0] = 0.5 * b{j}[i, 0] + math.tanh(b{j}[i, 1])",
    ]


def _list_growth(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    start = rng.choice(("[]", f"[{_coef(rng)} * x[0]]", f"[x[0], {_coef(rng)} * x[1]]", "[0.0] * 3"))
    pairs = rng.random() < 0.3  # (float, int) items, the float first
    last = f"L{j}[len(L{j}) - 1]" + ("[0]" if pairs else "")
    value = f"0.5 * ({last} if len(L{j}) > 0 else 0.0) + {_expr(rng, ['x[i % x.shape[0]]', 'a'], 2)}"
    item = f"({value}, i)" if pairs else value
    if start != "[]" and pairs:
        start = "[" + ", ".join(f"({v}, 0)" for v in (["0.0"] * 3 if start == "[0.0] * 3" else start[1:-1].split(", ")))
        start += "]"
    helper: list[str] = []
    body = [f"    L{j} = {start}", f"    e{j} = 0.0", "    for i in range(x.shape[0] * (k + 2)):"]
    if rng.random() < 0.4 and start != "[]":  # grown in a helper it is passed to (Numba cannot type [] passed on)
        helper = ["@njit", f"def grow{j}(L, x, a, i):", f"    L{j} = L", f"    L{j}.append({item})", ""]
        body.append(f"        grow{j}(L{j}, x, a, i)")
    else:
        body.append(f"        L{j}.append({item})")
    if rng.random() < 0.4:
        body += ["        if i % 3 == 2:", f"            e{j} += {_coef(rng)} * L{j}.pop()" + ("[0]" if pairs else "")]
    read = f"L{j}[i]" + ("[0]" if pairs else "")
    body += [f"    for i in range(len(L{j})):",
             f"        e{j} += {_coef(rng)} * {read} + {_expr(rng, [read, 'a'], 1)}" + (f" * L{j}[i][1]" if pairs else "")]
    return helper, body


def _integer_set(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    stride = rng.randint(2, 7)
    return [], [
        f"    seen{j} = set()",
        f"    e{j} = 0.0",
        "    for i in range(4 * x.shape[0]):",
        f"        m{j} = (i * {stride} + k) % (3 * x.shape[0])",  # up to 15 keys: the table grows past 8 slots
        f"        if m{j} not in seen{j}:",
        f"            seen{j}.add(m{j})",
        f"            e{j} += {_coef(rng)} * x[m{j} % x.shape[0]] + {_expr(rng, [f'x[m{j} % x.shape[0]]', 'a'], 2)}",
        "        else:",
        f"            e{j} += {_coef(rng)} * x[m{j} % x.shape[0]] * a * len(seen{j})",
    ]


def _in_place_sweep(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    # A temporary swept in place, each element from itself and the one its loop overwrites next: ahead in a forward
    # sweep, behind in a backward one, the next row in an outer loop (backward induction in an option tree).
    w = f"{rng.uniform(0.2, 0.7):.3f}"
    body = [f"    v{j} = {rng.choice(('np.empty', 'np.zeros'))}(x.shape[0] + 1)"]
    body += ["    for i in range(x.shape[0] + 1):",
             f"        v{j}[i] = {_expr(rng, ['x[i % x.shape[0]]', 'a'], 1)}"]
    shape = rng.choice(("forward", "backward", "rows"))
    mix = _expr(rng, [f"v{j}[i + 1]" if shape == "forward" else f"v{j}[i - 1]", "a"], 1)
    if shape == "forward":
        body += ["    for step in range(k):", "        for i in range(x.shape[0]):",
                 f"            v{j}[i] = {w} * v{j}[i] + (1.0 - {w}) * math.tanh({mix})"]
    elif shape == "backward":
        body += ["    for step in range(k):", "        for i in range(x.shape[0], 0, -1):",
                 f"            v{j}[i] = {w} * v{j}[i] + (1.0 - {w}) * math.tanh({mix})"]
    else:
        body += [f"    m{j} = np.empty((x.shape[0] + 1, 2))",
                 "    for i in range(x.shape[0] + 1):", f"        m{j}[i, 0] = v{j}[i]", f"        m{j}[i, 1] = 0.5 * v{j}[i]",
                 "    for i in range(x.shape[0]):", "        for c in range(2):",
                 f"            m{j}[i, c] = {w} * m{j}[i, c] + (1.0 - {w}) * math.tanh(m{j}[i + 1, c] * a)",
                 "    for i in range(x.shape[0] + 1):", f"        v{j}[i] = m{j}[i, 0] + m{j}[i, 1]"]
    return [], body + [f"    e{j} = 0.0", "    for i in range(x.shape[0] + 1):",
                       f"        e{j} += {_coef(rng)} * v{j}[i] + {_expr(rng, [f'v{j}[i]', 'a'], 1)}"]


def _argument_sweep(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    # The caller's array swept in place, each element from itself and the one the loop overwrites next (ahead in a
    # forward sweep, behind in a backward one), then read: backward induction into the argument.
    w = f"{rng.uniform(0.2, 0.7):.3f}"
    forward = rng.random() < 0.5
    mix = _expr(rng, ["x[i + 1]" if forward else "x[i - 1]", "a"], 1)
    loop = "range(x.shape[0] - 1)" if forward else "range(x.shape[0] - 1, 0, -1)"
    body = ["    for step in range(k):", f"        for i in {loop}:",
            f"            x[i] = {w} * x[i] + (1.0 - {w}) * math.tanh({mix})"]
    return [], body + [f"    e{j} = 0.0", "    for i in range(x.shape[0]):",
                       f"        e{j} += {_coef(rng)} * x[i] + {_expr(rng, ['x[i]', 'a'], 1)}"]


def _nested_search(rng: random.Random, j: int) -> tuple[list[str], list[str]]:
    # The first pair (p, q) meeting a test of x[p] and one of x[q], found by two loops left at once (``return`` from
    # the inner one in a helper, or a flagged ``break`` out of both in f), then a formula of the found elements and
    # of a neighbour (the helper alone gave wrong gradients in reverse mode until 2026-12-06; the flagged form did
    # in f).
    c1, c2 = rng.choice(THRESHOLDS), rng.choice(THRESHOLDS)
    found = f"{_expr(rng, ['x[@p]', 'x[@q]', 'a'], 2)} + {_coef(rng)} * x[(@p + @q + 1) % n]"
    test = f"x[@p] > {c1} and x[@q] {rng.choice(('>', '<'))} x[@p] + {c2}"
    otherwise = f"{_coef(rng)} * a"

    def named(text: str, p: str, q: str) -> str:
        return text.replace("@p", p).replace("@q", q)

    if rng.random() < 0.5:
        helper = ["@njit", f"def find{j}(x, a):", "    n = x.shape[0]", "    for p in range(n):",
                  "        for q in range(n):", f"            if {named(test, 'p', 'q')}:",
                  f"                return {named(found, 'p', 'q')}", f"    return {otherwise}", ""]
        return helper, [f"    e{j} = find{j}(x, a)"]
    return [], ["    n = x.shape[0]", f"    hit{j} = False", f"    p{j}, q{j} = 0, 0", "    for p in range(n):",
                "        for q in range(n):", f"            if {named(test, 'p', 'q')}:",
                f"                p{j}, q{j} = p, q", f"                hit{j} = True", "                break",
                f"        if hit{j}:", "            break",
                f"    e{j} = {named(found, f'p{j}', f'q{j}')} if hit{j} else {otherwise}"]


_BLOCKS = {
    "running-max": lambda rng, j: _running_extremum(rng, j, True),
    "running-min": lambda rng, j: _running_extremum(rng, j, False),
    "early-exit": _early_exit,
    "while-loop": _while_loop,
    "helper-writes": _helper_writes,
    "swapped-buffers": _swapped_buffers,
    "index-array": _index_array,
    "axis-sum": _axis_sum,
    "recurrence": _recurrence,
    "sibling-loops": _sibling_loops,
    "list-growth": _list_growth,
    "integer-set": _integer_set,
    "in-place-sweep": _in_place_sweep,
    "argument-sweep": _argument_sweep,
    "nested-search": _nested_search,
}


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
    ga = (f(x.copy(), a + h, k) - f(x.copy(), a - h, k)) / (2 * h)  # copies: f may write its argument
    return gx, ga


def check(seed: int, tol: float = 1e-5) -> tuple[str, str]:
    """Run program ``seed``: returns (outcome, detail), outcome one of ``agree``,
    ``disagree``, ``pyjlad-error:<Type>``, ``invalid-program`` (Numba rejects it,
    or it is too ill-conditioned for finite differences to be an oracle: a value
    above 1e6, or central differences with steps 1e-5 and 1e-6 disagreeing)."""
    from corpus.heap import poison_small_free_blocks

    import pyjlad

    try:
        program = generate(seed)
        x, a, k = sample_point(seed)  # never passed itself: a program may write its argument (argument-sweep)
        value = program.func(x.copy(), a, k)
    except Exception as exc:  # noqa: BLE001 - the generator produced something Numba rejects
        return "invalid-program", f"{type(exc).__name__}: {exc}"
    if not math.isfinite(value) or abs(value) > 1e6:
        return "invalid-program", f"value {value} is not finite or too large for finite differences"
    try:
        pyjlad.gradient(program.func, x.copy(), a, k, wrt=(0, 1))  # built; the second call is the one checked,
        poison_small_free_blocks()  # on a heap of NaN: a derivative reading memory it never wrote shows
        gx, ga = pyjlad.gradient(program.func, x.copy(), a, k, wrt=(0, 1))
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
