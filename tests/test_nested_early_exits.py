"""Second derivatives through ``pyjlad.grad(f)`` where ``f`` leaves a loop early: refused clearly, never a hang,
never a wrong value.

Until 2026-12-07 the reverse-mode ``jacobian`` of an ``@njit`` function returning ``pyjlad.grad(f)(x)`` (reverse
over reverse) never returned where ``f`` had a loop with a run-time trip count that it could leave by ``break``
before the loop's work, or by an exception raised in the loop and caught by ``try``/``except`` around it, whether
the early way out was taken or not; and it was silently wrong where the ``break`` came after the work (a sum of
squares up to a bound: ``diag(0, 0, 2)`` for ``2 I``) or ended a Newton iteration with a run-time iteration limit
(found while checking the first). Enzyme v0.0.289 builds those sweeps wrong. Such a derivative is refused now
before Enzyme runs (:func:`pyjlad.nested_raises.loops_left_early`), with :class:`pyjlad.nested.NestedDerivativeError`
naming forward over reverse, which is right: checked here against hand-derived Hessians, as is reverse over
reverse where the loop's trip count is bounded by a constant (not refused). The reverse-mode calls run in a child
process with a time limit, so that a hang fails the test instead of stopping the suite. The loops Enzyme builds
that could only repeat (:mod:`pyjlad.endless_loops`, the check after Enzyme that remains) are tested on small
modules at the end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.endless_loops import endless_loops

#: The programs, as the child process defines them too.
PROGRAMS = textwrap.dedent('''
    import numpy as np
    from numba import njit

    @njit
    def cubes_until_large(x):
        s = 0.0
        for k in range(x.shape[0]):
            if x[k] > 2.5:
                break
            s += x[k] ** 3
        return s

    @njit
    def cubes_doubled_if_large(x):
        s = 0.0
        try:
            for k in range(x.shape[0]):
                if x[k] > 2.5:
                    raise ValueError("large")
                s += x[k] ** 3
        except Exception:
            s = 2.0 * s
        return s

    @njit
    def cubes_while_small(x):
        s = 0.0
        k = 0
        while True:
            if k >= x.shape[0] or x[k] > 2.5:
                break
            s += x[k] ** 3
            k += 1
        return s

    @njit
    def squares_up_to(x):
        total = 0.0
        for v in x:
            total += v * v
            if total > 10.0:
                break
        return total

    @njit
    def cube_root_scaled(x):  # Newton's iteration for x[0] ** (1/3), stopped by its tolerance
        y = 1.0
        for _ in range(20 * x.shape[0]):
            step = (y * y * y - x[0]) / (3.0 * y * y)
            y -= step
            if abs(step) < 1e-14:
                break
        return y * x[1] + x[2]

    @njit
    def cube_root_scaled_fixed(x):  # the same with a constant iteration limit: not refused
        y = 1.0
        for _ in range(60):
            step = (y * y * y - x[0]) / (3.0 * y * y)
            y -= step
            if abs(step) < 1e-14:
                break
        return y * x[1] + x[2]
''')
exec(PROGRAMS)  # noqa: S102 (the same source as the child's, defined here for the in-process checks)

#: Refused in reverse over reverse (until 2026-12-07: the first two never returned, the last two were wrong).
REFUSED = ["cubes_until_large", "cubes_doubled_if_large", "cubes_while_small", "squares_up_to", "cube_root_scaled"]
NAMES = [*REFUSED, "cube_root_scaled_fixed"]
#: Points where the early way out is taken (at the third element: 3.0 > 2.5, the squares pass 10) and where it is
#: not.
POINTS = {"taken": [1.5, 2.0, 3.0, 0.5], "not_taken": [0.5, 2.0, 1.5, 0.5]}
#: Each program at each point, the first of each pair alternating, so that the default run's sample (one case in
#: two: ``tests/sampled_tests.py``) keeps every program, at both points in turn.
CASES = [case for k, name in enumerate(NAMES)
         for case in [(name, point) for point in (("taken", "not_taken") if k % 2 == 0 else ("not_taken", "taken"))]]


def _hessian(name: str, x: np.ndarray) -> np.ndarray:
    """The hand-derived Hessian of program ``name`` at ``x``."""
    if name.startswith("cube_root"):  # y = x0^(1/3): d2/dx0^2 = x1 (-2/9) x0^(-5/3), d2/dx0 dx1 = x0^(-2/3) / 3
        h = np.zeros((x.size, x.size))
        h[0, 0] = x[1] * (-2.0 / 9.0) * x[0] ** (-5.0 / 3.0)
        h[0, 1] = h[1, 0] = x[0] ** (-2.0 / 3.0) / 3.0
        return h
    if name == "squares_up_to":  # 2 on the diagonal up to the first partial sum above 10, that one included
        over = np.nonzero(np.cumsum(x * x) > 10.0)[0]
        stop = over[0] + 1 if over.size else x.size
        return np.diag(np.where(np.arange(x.size) < stop, 2.0, 0.0))
    # 6 x_k on the diagonal for each k before the first x_k > 2.5, twice that where the caught exception doubles
    large = np.nonzero(x > 2.5)[0]
    stop = large[0] if large.size else x.size
    scale = 2.0 if name == "cubes_doubled_if_large" and large.size else 1.0
    return np.diag(np.where(np.arange(x.size) < stop, 6.0 * scale * x, 0.0))


_CHILD = PROGRAMS + textwrap.dedent('''
    import json, sys
    import pyjlad
    from pyjlad.nested import NestedDerivativeError

    f = globals()[sys.argv[1]]
    df = pyjlad.grad(f)

    @njit
    def gradient(x):
        return df(x)

    x = np.array(json.loads(sys.argv[2]))
    try:
        print(json.dumps({"jacobian": pyjlad.jacobian(gradient, x).tolist()}))
    except NestedDerivativeError as exc:
        print(json.dumps({"refused": str(exc), "diagnostics": exc.diagnostics}))
''')


@pytest.mark.parametrize(("name", "point"), CASES)
def test_reverse_over_reverse_is_refused_or_right_and_returns(tmp_path, name: str, point: str) -> None:
    """The reverse-mode Jacobian of the gradient returns within the time limit: refused, naming the loop and
    forward over reverse, for a loop with a run-time trip count left early; the hand-derived Hessian for one
    whose trip count a constant bounds."""
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    x = POINTS[point]
    done = subprocess.run([sys.executable, str(script), name, json.dumps(x)], capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    if name in REFUSED:
        assert "refused" in outcome, outcome
        assert f"cannot differentiate pyjlad.grad({name}) a second time in reverse mode" in outcome["refused"]
        assert 'mode="forward"' in outcome["refused"] and "pyjlad.hessian" in outcome["refused"]
        assert "loops left early: the loop at block" in outcome["diagnostics"]
    else:
        assert "jacobian" in outcome, outcome
        np.testing.assert_allclose(outcome["jacobian"], _hessian(name, np.array(x)), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(("name", "point"), CASES)
def test_forward_over_reverse_the_refusal_names_is_right(name: str, point: str) -> None:
    """What the refusal offers: the forward-mode Jacobian of the gradient, ``pyjlad.hessian`` and ``pyjlad.hvp``
    of the function, each the hand-derived Hessian; the caller's array unchanged."""
    f = globals()[name]
    df = pyjlad.grad(f)

    @njit
    def gradient(x):
        return df(x)

    x = np.array(POINTS[point])
    before = x.copy()
    expected = _hessian(name, before)
    v = np.array([0.5, -1.0, 2.0, 0.25])
    np.testing.assert_allclose(pyjlad.jacobian(gradient, x, mode="forward"), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pyjlad.hessian(f, x), expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pyjlad.hvp(f, (x,), v), expected @ v, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(x, before)


_LOOP = """define void @f(i1 %again, i64 %n, ptr %p) {
entry:
  br label %spin
spin:
  %i = phi i64 [ 0, %entry ], [ %j, %spin ]
  %j = add i64 %i, 1
  store i64 %j, ptr %p
  TEST
  br i1 %again, label %spin, label %out
out:
  ret void
}"""


@pytest.mark.parametrize(("test", "endless"), [
    ("", True),  # tests only what it read before the loop: runs once or for ever
    ("%again.1 = icmp ult i64 %j, %n\n  %again = and i1 %again.1, %again.0", False),  # a test computed anew
])
def test_a_loop_is_endless_only_where_its_ways_out_test_nothing_it_computes(test: str, endless: bool) -> None:
    text = _LOOP.replace("TEST", test)
    if test:
        text = text.replace("(i1 %again,", "(i1 %again.0,")
    assert endless_loops(text) == ([("f", "spin")] if endless else [])


def test_a_loop_switching_on_its_counter_can_end_one_without_a_way_out_cannot() -> None:
    switches = _LOOP.replace("  TEST\n  br i1 %again, label %spin, label %out",
                             "  switch i64 %j, label %spin [ i64 9, label %out ]")
    no_way_out = _LOOP.replace("  TEST\n  br i1 %again, label %spin, label %out", "  br label %spin")
    assert endless_loops(switches) == []
    assert endless_loops(no_way_out) == [("f", "spin")]
