"""Writes the notebooks from the cells below and executes them in place (outputs included).

Usage: ``.venv/bin/python notebooks/build.py``. The test suite executes every
notebook again from a clean state (tests/test_notebooks.py).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent

QUICKSTART = [
    ("md", "# pyjlad quick start\n\nGradients of a loop-heavy Numba function, checked against "
           "central finite differences, and plotted."),
    ("code", "%matplotlib inline\nimport math\n\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
             "from numba import njit\n\nimport pyjlad"),
    ("md", "A damped oscillator integrated by 20,000 explicit Euler steps: the final position as "
           "a function of the stiffness `k`."),
    ("code", "@njit\ndef final_position(k, c):\n    x, v, dt = 1.0, 0.0, 1e-3\n"
             "    for _ in range(20_000):\n        x, v = x + dt * v, v + dt * (-k * x - c * v)\n"
             "    return x\n\ndk = pyjlad.grad(final_position, wrt=0)\n"
             "ks = np.linspace(0.5, 6.0, 200)\nvalues = np.array([final_position(k, 0.4) for k in ks])\n"
             "grads = np.array([dk(k, 0.4) for k in ks])"),
    ("code", "h = 1e-6\nfd = np.array([(final_position(k + h, 0.4) - final_position(k - h, 0.4)) / (2 * h) for k in ks])\n"
             "print(f'max |pyjlad - finite differences| = {np.max(np.abs(grads - fd)):.2e}')"),
    ("code", "fig, ax = plt.subplots(1, 2, figsize=(10, 3.5))\nax[0].plot(ks, values)\n"
             "ax[0].set(xlabel='k', ylabel='x(T)', title='final position')\n"
             "ax[1].plot(ks, grads, label='pyjlad')\nax[1].plot(ks[::10], fd[::10], 'o', ms=4, label='finite differences')\n"
             "ax[1].set(xlabel='k', ylabel='dx(T)/dk', title='its derivative')\nax[1].legend()\nplt.tight_layout()"),
    ("md", "Arrays work the same way: the gradient has the argument's shape."),
    ("code", "@njit\ndef loss(x):\n    s = 0.0\n    for i in range(x.shape[0]):\n        s += math.sin(x[i]) * x[i]\n    return s\n\n"
             "x = np.linspace(0.0, 1.0, 1000)\ng = pyjlad.gradient(loss, x)\n"
             "print(g.shape, np.max(np.abs(g - (np.cos(x) * x + np.sin(x)))))"),
]

ODE_FIT = [
    ("md", "# Fitting an ODE model with pyjlad gradients\n\nA Lotka-Volterra model integrated by a "
           "Numba RK4 loop, fitted to noisy data with `scipy.optimize.minimize(..., jac=...)`; "
           "compared with finite-difference Jacobians."),
    ("code", "%matplotlib inline\nimport time\n\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
             "from numba import njit\nfrom scipy.optimize import minimize\n\nimport pyjlad"),
    ("code", "@njit\ndef simulate(theta, steps, dt):\n    a, b, c, d = theta[0], theta[1], theta[2], theta[3]\n"
             "    out = np.empty((steps, 2))\n    x, y = 1.0, 0.5\n    for n in range(steps):\n"
             "        k1x, k1y = a * x - b * x * y, d * x * y - c * y\n"
             "        x2, y2 = x + 0.5 * dt * k1x, y + 0.5 * dt * k1y\n"
             "        k2x, k2y = a * x2 - b * x2 * y2, d * x2 * y2 - c * y2\n"
             "        x3, y3 = x + 0.5 * dt * k2x, y + 0.5 * dt * k2y\n"
             "        k3x, k3y = a * x3 - b * x3 * y3, d * x3 * y3 - c * y3\n"
             "        x4, y4 = x + dt * k3x, y + dt * k3y\n"
             "        k4x, k4y = a * x4 - b * x4 * y4, d * x4 * y4 - c * y4\n"
             "        x += dt / 6 * (k1x + 2 * k2x + 2 * k3x + k4x)\n"
             "        y += dt / 6 * (k1y + 2 * k2y + 2 * k3y + k4y)\n"
             "        out[n, 0], out[n, 1] = x, y\n    return out\n\n"
             "@njit\ndef loss(theta, data, dt):\n    sim = simulate(theta, data.shape[0], dt)\n"
             "    return np.sum((sim - data) ** 2) / data.shape[0]\n\n"
             "steps, dt = 2000, 0.01\ntrue = np.array([1.1, 0.4, 0.4, 0.1])\n"
             "rng = np.random.default_rng(0)\ndata = simulate(true, steps, dt) + rng.normal(scale=0.05, size=(steps, 2))"),
    ("code", "start = np.array([1.0, 0.45, 0.45, 0.12])\nbounds = [(0.05, 3.0)] * 4\nhistory = []\n"
             "vg = pyjlad.value_and_grad(loss)\n"
             "def fun(theta):\n    value, g = vg(theta, data, dt)\n    history.append(value)\n    return value, g\n\n"
             "vg(start, data, dt)  # compile once\nt0 = time.perf_counter()\n"
             "res_ad = minimize(fun, start, jac=True, method='L-BFGS-B', bounds=bounds)\nt_ad = time.perf_counter() - t0\n"
             "t0 = time.perf_counter()\nres_fd = minimize(loss, start, args=(data, dt), method='L-BFGS-B', bounds=bounds)\n"
             "t_fd = time.perf_counter() - t0\n"
             "print(f'pyjlad gradients : {res_ad.nit} iterations, {res_ad.nfev} evaluations, {t_ad:.2f} s, theta = {np.round(res_ad.x, 4)}')\n"
             "print(f'finite difference: {res_fd.nit} iterations, {res_fd.nfev} evaluations, {t_fd:.2f} s, theta = {np.round(res_fd.x, 4)}')\n"
             "print('true theta       :', true)"),
    ("code", "fit = simulate(res_ad.x, steps, dt)\nt = dt * np.arange(1, steps + 1)\n"
             "fig, ax = plt.subplots(1, 2, figsize=(11, 3.5))\n"
             "ax[0].plot(t, data[:, 0], '.', ms=1, alpha=0.4, label='prey data')\n"
             "ax[0].plot(t, data[:, 1], '.', ms=1, alpha=0.4, label='predator data')\n"
             "ax[0].plot(t, fit[:, 0], 'C0', label='prey fit')\nax[0].plot(t, fit[:, 1], 'C1', label='predator fit')\n"
             "ax[0].set(xlabel='t', title='data and fit')\nax[0].legend(fontsize=8)\n"
             "ax[1].semilogy(history)\nax[1].set(xlabel='evaluation', ylabel='loss', title='loss curve (pyjlad gradients)')\n"
             "plt.tight_layout()"),
]

PERFORMANCE = [
    ("md", "# Performance tour\n\nThe cost of a gradient next to the cost of the function, measured "
           "here, in this kernel (ratios taken in one run)."),
    ("code", "%matplotlib inline\nimport math\nimport timeit\n\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
             "from numba import njit\n\nimport pyjlad"),
    ("code", "@njit\ndef two_scalars(x, y):\n    return math.sin(x) * y + x * x\n\n"
             "@njit\ndef array_loop(x):\n    s = 0.0\n    for i in range(x.shape[0]):\n        s += math.sin(x[i]) * x[i]\n    return s\n\n"
             "@njit\ndef matmul_loss(a, b):\n    c = a @ b\n    return np.sum(c * c)\n\n"
             "def ratio(f, df, args, number):\n    f(*args)\n    df(*args)\n"
             "    tf = min(timeit.repeat(lambda: f(*args), number=number, repeat=5)) / number\n"
             "    tg = min(timeit.repeat(lambda: df(*args), number=number, repeat=5)) / number\n    return tf, tg\n\n"
             "x = np.linspace(0, 1, 1000)\na = np.random.default_rng(0).normal(size=(200, 200))\n"
             "rows = {\n    'two scalars': ratio(two_scalars, pyjlad.grad(two_scalars, wrt=(0, 1)), (0.3, 1.7), 20000),\n"
             "    '1,000-element loop': ratio(array_loop, pyjlad.grad(array_loop), (x,), 2000),\n"
             "    '200x200 matmul loss': ratio(matmul_loss, pyjlad.grad(matmul_loss, wrt=(0, 1)), (a, a), 20),\n}\n"
             "for name, (tf, tg) in rows.items():\n    print(f'{name:22s} f {tf * 1e6:10.2f} us   gradient {tg * 1e6:10.2f} us   ratio {tg / tf:5.2f}')"),
    ("code", "names = list(rows)\nfig, ax = plt.subplots(figsize=(6, 3))\n"
             "ax.bar(names, [tg / tf for tf, tg in rows.values()])\nax.axhline(1, color='k', lw=0.5)\n"
             "ax.set(ylabel='gradient time / function time', title='cost of a gradient')\nplt.tight_layout()"),
]

NOTEBOOKS = {"01_quickstart.ipynb": QUICKSTART, "02_ode_fit.ipynb": ODE_FIT, "03_performance_tour.ipynb": PERFORMANCE}


def notebook(cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "md" else nbformat.v4.new_code_cell(src)
                for kind, src in cells]
    return nb


def execute(nb: nbformat.NotebookNode, timeout: int = 900) -> nbformat.NotebookNode:
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}).execute()
    return nb


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        nb = execute(notebook(cells))
        nbformat.write(nb, HERE / name)
        print("wrote", HERE / name)


if __name__ == "__main__":
    main()
