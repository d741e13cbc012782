"""Machine learning: MLP forward passes with loops, cross-entropy, convolutions, pooling,
normalisation layers, recurrent cells, margin losses, embeddings, unrolled optimisers.

Each program is a Numba function and a ``jax.numpy`` twin computing the same value.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.margins import distinct
from corpus.program import program

FAMILY = "ml"
SMOOTH = ("gradient", "hvp")
ARRAY = ("jacobian", "jvp", "vjp")


def _mlp_args(rng, n=6, d=3, h=4, margin=0.0):
    """Inputs, weights and targets; with ``margin``, every pre-activation is that far from 0."""
    while True:
        x = rng.standard_normal((n, d))
        w1 = rng.standard_normal((d, h)) * 0.7
        b1 = rng.standard_normal(h) * 0.3
        if margin == 0.0 or np.min(np.abs(x @ w1 + b1)) > margin:
            return w1, b1, rng.standard_normal(h) * 0.5, x, rng.standard_normal(n)


# ------------------------------------------------------------------ MLPs
@njit
def mlp_tanh_loss(w1, b1, w2, x, y):
    n, d = x.shape
    h = w1.shape[1]
    loss = 0.0
    for i in range(n):
        out = 0.0
        for k in range(h):
            z = b1[k]
            for j in range(d):
                z += x[i, j] * w1[j, k]
            out += math.tanh(z) * w2[k]
        loss += (out - y[i]) ** 2
    return loss / n


def mlp_tanh_loss_jax(w1, b1, w2, x, y):
    return jnp.mean((jnp.tanh(x @ w1 + b1) @ w2 - y) ** 2)


program(FAMILY, "mlp-tanh-loss", mlp_tanh_loss, mlp_tanh_loss_jax, _mlp_args, wrt=(0, 1, 2))
program(FAMILY, "mlp-tanh-loss-hvp", mlp_tanh_loss, mlp_tanh_loss_jax, _mlp_args, transforms=SMOOTH)


@njit
def mlp_relu_max(w1, b1, w2, x, y):
    n, d = x.shape
    loss = 0.0
    for i in range(n):
        out = 0.0
        for k in range(w1.shape[1]):
            z = b1[k]
            for j in range(d):
                z += x[i, j] * w1[j, k]
            out += max(z, 0.0) * w2[k]
        loss += (out - y[i]) ** 2
    return loss / n


def mlp_relu_jax(w1, b1, w2, x, y):
    return jnp.mean((jax.nn.relu(x @ w1 + b1) @ w2 - y) ** 2)


program(FAMILY, "mlp-relu-max", mlp_relu_max, mlp_relu_jax,
        lambda rng: _mlp_args(rng, margin=0.05), wrt=(0, 1, 2))


@njit
def mlp_relu_if(w1, b1, w2, x, y):
    n, d = x.shape
    hidden = np.empty(w1.shape[1])
    loss = 0.0
    for i in range(n):
        for k in range(w1.shape[1]):
            z = b1[k]
            for j in range(d):
                z += x[i, j] * w1[j, k]
            if z > 0.0:
                hidden[k] = z
            else:
                hidden[k] = 0.0
        out = 0.0
        for k in range(w1.shape[1]):
            out += hidden[k] * w2[k]
        loss += (out - y[i]) ** 2
    return loss / n


program(FAMILY, "mlp-relu-if", mlp_relu_if, mlp_relu_jax,
        lambda rng: _mlp_args(rng, margin=0.05), wrt=(0, 1, 2), transforms=SMOOTH)


@njit
def mlp_predict(w1, b1, w2, x):
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(w1.shape[1]):
            z = b1[k]
            for j in range(x.shape[1]):
                z += x[i, j] * w1[j, k]
            s += w2[k] * z / (1.0 + math.exp(-z))
        out[i] = s
    return out


def mlp_predict_jax(w1, b1, w2, x):
    return jax.nn.silu(x @ w1 + b1) @ w2


program(FAMILY, "mlp-predict-silu", mlp_predict, mlp_predict_jax,
        lambda rng: _mlp_args(rng, n=4)[:4], wrt=(0, 2), transforms=ARRAY)


@njit
def mlp_two_hidden(params, x, y):
    # Weights packed in one flat vector, unpacked by offsets (as optimisers see them).
    d = x.shape[1]
    h = 3
    w1 = params[:d * h].reshape(d, h)
    w2 = params[d * h:d * h + h * h].reshape(h, h)
    w3 = params[d * h + h * h:]
    loss = 0.0
    a1 = np.empty(h)
    for i in range(x.shape[0]):
        for k in range(h):
            z = 0.0
            for j in range(d):
                z += x[i, j] * w1[j, k]
            a1[k] = math.tanh(z)
        out = 0.0
        for k in range(h):
            z = 0.0
            for j in range(h):
                z += a1[j] * w2[j, k]
            out += math.tanh(z) * w3[k]
        loss += (out - y[i]) ** 2
    return loss


def mlp_two_hidden_jax(params, x, y):
    d, h = x.shape[1], 3
    w1 = params[:d * h].reshape(d, h)
    w2 = params[d * h:d * h + h * h].reshape(h, h)
    w3 = params[d * h + h * h:]
    return jnp.sum((jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3 - y) ** 2)


program(FAMILY, "mlp-two-hidden-flat", mlp_two_hidden, mlp_two_hidden_jax,
        lambda rng: (rng.standard_normal(2 * 3 + 9 + 3) * 0.6, rng.standard_normal((5, 2)),
                     rng.standard_normal(5)),
        transforms=SMOOTH)


@njit
def mlp_tanh_loss_f32(w1, x, y):
    loss = np.float32(0.0)
    for i in range(x.shape[0]):
        out = np.float32(0.0)
        for k in range(w1.shape[1]):
            z = np.float32(0.0)
            for j in range(x.shape[1]):
                z += x[i, j] * w1[j, k]
            out += math.tanh(z)
        loss += (out - y[i]) ** 2
    return loss


def mlp_tanh_loss_f32_jax(w1, x, y):
    return jnp.sum((jnp.sum(jnp.tanh(x @ w1), axis=1) - y) ** 2)


program(FAMILY, "mlp-tanh-loss-f32", mlp_tanh_loss_f32, mlp_tanh_loss_f32_jax,
        lambda rng: tuple(a.astype(np.float32) for a in (
            rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((5, 3)), rng.standard_normal(5))),
        rtol=2e-4, atol=1e-4)


# ------------------------------------------------------------------ cross-entropy
def _logits_args(rng, n=5, c=4):
    logits = np.stack([distinct(rng, c, -3.0, 3.0, 0.1) for _ in range(n)])
    return logits, rng.integers(0, c, n)


@njit
def softmax_xent_stable(logits, labels):
    loss = 0.0
    for i in range(logits.shape[0]):
        m = logits[i, 0]
        for j in range(1, logits.shape[1]):
            if logits[i, j] > m:
                m = logits[i, j]
        s = 0.0
        for j in range(logits.shape[1]):
            s += math.exp(logits[i, j] - m)
        loss += m + math.log(s) - logits[i, labels[i]]
    return loss / logits.shape[0]


def softmax_xent_jax(logits, labels):
    logp = jax.nn.log_softmax(logits, axis=1)
    return -jnp.mean(logp[jnp.arange(logits.shape[0]), labels])


program(FAMILY, "softmax-xent-stable", softmax_xent_stable, softmax_xent_jax, _logits_args,
        transforms=SMOOTH)


@njit
def softmax_xent_np_max(logits, labels):
    loss = 0.0
    for i in range(logits.shape[0]):
        row = logits[i]
        m = np.max(row)
        loss += m + math.log(np.sum(np.exp(row - m))) - row[labels[i]]
    return loss / logits.shape[0]


program(FAMILY, "softmax-xent-np-max", softmax_xent_np_max, softmax_xent_jax, _logits_args,
        transforms=SMOOTH)


@njit
def softmax_xent_naive(logits, labels):
    loss = 0.0
    for i in range(logits.shape[0]):
        s = 0.0
        for j in range(logits.shape[1]):
            s += math.exp(logits[i, j])
        loss += math.log(s) - logits[i, labels[i]]
    return loss / logits.shape[0]


program(FAMILY, "softmax-xent-naive", softmax_xent_naive, softmax_xent_jax, _logits_args,
        transforms=SMOOTH)


@njit
def linear_softmax_xent(w, x, labels):
    # Logits computed from a weight matrix, then the naive cross-entropy.
    loss = 0.0
    c = w.shape[1]
    z = np.empty(c)
    for i in range(x.shape[0]):
        s = 0.0
        for k in range(c):
            z[k] = 0.0
            for j in range(x.shape[1]):
                z[k] += x[i, j] * w[j, k]
            s += math.exp(z[k])
        loss += math.log(s) - z[labels[i]]
    return loss


def linear_softmax_xent_jax(w, x, labels):
    logp = jax.nn.log_softmax(x @ w, axis=1)
    return -jnp.sum(logp[jnp.arange(x.shape[0]), labels])


program(FAMILY, "linear-softmax-xent", linear_softmax_xent, linear_softmax_xent_jax,
        lambda rng: (rng.standard_normal((3, 4)), rng.standard_normal((6, 3)), rng.integers(0, 4, 6)),
        transforms=SMOOTH)


@njit
def classifier_per_sample(w, x, y):
    """A softmax classifier's mean cross-entropy, the scores of each sample in an array allocated for it
    (Enzyme once cached every sample it read: pyjlad/memory_scopes.py)."""
    n, k, d = x.shape[0], w.shape[0], w.shape[1]
    loss = 0.0
    for i in range(n):
        z = np.empty(k)
        for a in range(k):
            s = 0.0
            for b in range(d):
                s += w[a, b] * x[i, b]
            z[a] = s
        m = z[0]
        for a in range(1, k):
            m = max(m, z[a])
        t = 0.0
        for a in range(k):
            t += math.exp(z[a] - m)
        loss += m + math.log(t) - z[y[i]]
    return loss / n


@njit
def classifier_numpy(w, x, y):
    """The same loss with NumPy per sample: each sample's scores, shifted scores and exponentials new arrays."""
    loss = 0.0
    for i in range(x.shape[0]):
        z = w @ x[i]
        m = z.max()
        loss += m + np.log(np.sum(np.exp(z - m))) - z[y[i]]
    return loss / x.shape[0]


def classifier_jax(w, x, y):
    z = x @ w.T
    return jnp.mean(jax.nn.logsumexp(z, axis=1) - z[jnp.arange(y.shape[0]), y])


def _classifier_args(rng):
    return rng.standard_normal((4, 5)) / 2, rng.standard_normal((7, 5)), rng.integers(0, 4, 7)


program(FAMILY, "classifier-per-sample", classifier_per_sample, classifier_jax, _classifier_args,
        transforms=SMOOTH)
program(FAMILY, "classifier-numpy", classifier_numpy, classifier_jax, _classifier_args, transforms=SMOOTH)


@njit
def binary_xent(w, x, y):
    loss = 0.0
    for i in range(x.shape[0]):
        z = 0.0
        for j in range(x.shape[1]):
            z += x[i, j] * w[j]
        p = 1.0 / (1.0 + math.exp(-z))
        loss -= y[i] * math.log(p) + (1.0 - y[i]) * math.log(1.0 - p)
    return loss


def binary_xent_jax(w, x, y):
    p = jax.nn.sigmoid(x @ w)
    return -jnp.sum(y * jnp.log(p) + (1.0 - y) * jnp.log(1.0 - p))


program(FAMILY, "binary-xent", binary_xent, binary_xent_jax,
        lambda rng: (rng.standard_normal(3), rng.standard_normal((8, 3)),
                     rng.integers(0, 2, 8).astype(np.float64)),
        transforms=SMOOTH)


@njit
def focal_loss(z, y, gamma):
    loss = 0.0
    for i in range(z.shape[0]):
        p = 1.0 / (1.0 + math.exp(-z[i]))
        pt = p if y[i] > 0.5 else 1.0 - p
        loss -= (1.0 - pt) ** gamma * math.log(pt)
    return loss


def focal_loss_jax(z, y, gamma):
    p = jax.nn.sigmoid(z)
    pt = jnp.where(y > 0.5, p, 1.0 - p)
    return -jnp.sum((1.0 - pt) ** gamma * jnp.log(pt))


program(FAMILY, "focal-loss", focal_loss, focal_loss_jax,
        lambda rng: (rng.standard_normal(10), rng.integers(0, 2, 10).astype(np.float64), 2.0), wrt=(0, 2))


# ------------------------------------------------------------------ regression and margins
@njit
def ridge_mse(w, x, y, lam):
    loss = 0.0
    for i in range(x.shape[0]):
        r = -y[i]
        for j in range(x.shape[1]):
            r += x[i, j] * w[j]
        loss += r * r
    reg = 0.0
    for j in range(w.shape[0]):
        reg += w[j] * w[j]
    return loss / x.shape[0] + lam * reg


def ridge_mse_jax(w, x, y, lam):
    return jnp.mean((x @ w - y) ** 2) + lam * jnp.sum(w * w)


program(FAMILY, "ridge-mse", ridge_mse, ridge_mse_jax,
        lambda rng: (rng.standard_normal(4), rng.standard_normal((9, 4)), rng.standard_normal(9), 0.1),
        wrt=(0, 3), transforms=("gradient",))
program(FAMILY, "ridge-mse-hvp", ridge_mse, ridge_mse_jax,
        lambda rng: (rng.standard_normal(4), rng.standard_normal((9, 4)), rng.standard_normal(9), 0.1),
        transforms=SMOOTH)


@njit
def lasso_objective(w, x, y, lam):
    loss = 0.0
    for i in range(x.shape[0]):
        r = np.dot(x[i], w) - y[i]
        loss += 0.5 * r * r
    for j in range(w.shape[0]):
        loss += lam * abs(w[j])
    return loss


def lasso_objective_jax(w, x, y, lam):
    return 0.5 * jnp.sum((x @ w - y) ** 2) + lam * jnp.sum(jnp.abs(w))


program(FAMILY, "lasso-objective", lasso_objective, lasso_objective_jax,
        lambda rng: (distinct(rng, 5, -1.5, 1.5, 0.2) + 0.05, rng.standard_normal((8, 5)),
                     rng.standard_normal(8), 0.3),
        wrt=(0, 3))


def _hinge_args(rng, n=10, d=3):
    while True:
        w = rng.standard_normal(d)
        x = rng.standard_normal((n, d))
        y = rng.choice([-1.0, 1.0], n)
        if np.min(np.abs(1.0 - y * (x @ w))) > 0.05:
            return w, x, y


@njit
def hinge_svm(w, x, y):
    loss = 0.0
    for i in range(x.shape[0]):
        z = 0.0
        for j in range(w.shape[0]):
            z += x[i, j] * w[j]
        loss += max(0.0, 1.0 - y[i] * z)
    return loss + 0.05 * np.sum(w * w)


def hinge_svm_jax(w, x, y):
    return jnp.sum(jnp.maximum(0.0, 1.0 - y * (x @ w))) + 0.05 * jnp.sum(w * w)


program(FAMILY, "hinge-svm", hinge_svm, hinge_svm_jax, _hinge_args, wrt=(0, 1))


def _triplet_args(rng, n=6, d=4):
    while True:
        a, p, q = (rng.standard_normal((n, d)) for _ in range(3))
        gap = np.sum((a - p) ** 2, axis=1) - np.sum((a - q) ** 2, axis=1) + 0.5
        if np.min(np.abs(gap)) > 0.05:
            return a, p, q


@njit
def triplet_loss(anchor, pos, neg):
    loss = 0.0
    for i in range(anchor.shape[0]):
        dp = 0.0
        dn = 0.0
        for j in range(anchor.shape[1]):
            dp += (anchor[i, j] - pos[i, j]) ** 2
            dn += (anchor[i, j] - neg[i, j]) ** 2
        loss += max(dp - dn + 0.5, 0.0)
    return loss


def triplet_loss_jax(anchor, pos, neg):
    gap = jnp.sum((anchor - pos) ** 2, axis=1) - jnp.sum((anchor - neg) ** 2, axis=1) + 0.5
    return jnp.sum(jnp.maximum(gap, 0.0))


program(FAMILY, "triplet-loss", triplet_loss, triplet_loss_jax, _triplet_args, wrt=(0, 1, 2))


@njit
def cosine_similarity_loss(a, b):
    loss = 0.0
    for i in range(a.shape[0]):
        dot = 0.0
        na = 0.0
        nb = 0.0
        for j in range(a.shape[1]):
            dot += a[i, j] * b[i, j]
            na += a[i, j] * a[i, j]
            nb += b[i, j] * b[i, j]
        loss += 1.0 - dot / math.sqrt(na * nb)
    return loss


def cosine_similarity_loss_jax(a, b):
    dot = jnp.sum(a * b, axis=1)
    return jnp.sum(1.0 - dot / jnp.sqrt(jnp.sum(a * a, axis=1) * jnp.sum(b * b, axis=1)))


program(FAMILY, "cosine-similarity-loss", cosine_similarity_loss, cosine_similarity_loss_jax,
        lambda rng: (rng.standard_normal((4, 5)), rng.standard_normal((4, 5))), wrt=(0, 1))
program(FAMILY, "cosine-similarity-loss-hvp", cosine_similarity_loss, cosine_similarity_loss_jax,
        lambda rng: (rng.standard_normal((4, 5)), rng.standard_normal((4, 5))), transforms=SMOOTH)


# ------------------------------------------------------------------ convolutions and pooling
@njit
def conv1d_valid(signal, kernel):
    n = signal.shape[0] - kernel.shape[0] + 1
    out = np.zeros(n)
    for i in range(n):
        for k in range(kernel.shape[0]):
            out[i] += signal[i + k] * kernel[k]
    return out


def conv1d_valid_jax(signal, kernel):
    return jnp.convolve(signal, kernel[::-1], mode="valid")


program(FAMILY, "conv1d-valid", conv1d_valid, conv1d_valid_jax,
        lambda rng: (rng.standard_normal(9), rng.standard_normal(3)), wrt=(0, 1), transforms=ARRAY)


@njit
def conv2d_loss(image, kernel, target):
    h = image.shape[0] - kernel.shape[0] + 1
    w = image.shape[1] - kernel.shape[1] + 1
    loss = 0.0
    for i in range(h):
        for j in range(w):
            acc = 0.0
            for a in range(kernel.shape[0]):
                for b in range(kernel.shape[1]):
                    acc += image[i + a, j + b] * kernel[a, b]
            loss += (math.tanh(acc) - target[i, j]) ** 2
    return loss


def conv2d_loss_jax(image, kernel, target):
    h = image.shape[0] - kernel.shape[0] + 1
    w = image.shape[1] - kernel.shape[1] + 1
    acc = sum(image[a:a + h, b:b + w] * kernel[a, b]
              for a in range(kernel.shape[0]) for b in range(kernel.shape[1]))
    return jnp.sum((jnp.tanh(acc) - target) ** 2)


program(FAMILY, "conv2d-loss", conv2d_loss, conv2d_loss_jax,
        lambda rng: (rng.standard_normal((6, 6)), rng.standard_normal((3, 3)) * 0.4,
                     rng.standard_normal((4, 4))),
        wrt=(0, 1))
program(FAMILY, "conv2d-loss-hvp", conv2d_loss, conv2d_loss_jax,
        lambda rng: (rng.standard_normal((5, 5)), rng.standard_normal((3, 3)) * 0.4,
                     rng.standard_normal((3, 3))),
        wrt=(1,), transforms=SMOOTH)


@njit
def maxpool1d(x, width):
    n = x.shape[0] // width
    out = np.empty(n)
    for i in range(n):
        m = x[i * width]
        for k in range(1, width):
            if x[i * width + k] > m:
                m = x[i * width + k]
        out[i] = m
    return out


def maxpool1d_jax(x, width):
    return jnp.max(x[: (x.shape[0] // width) * width].reshape(-1, width), axis=1)


program(FAMILY, "maxpool1d", maxpool1d, maxpool1d_jax,
        lambda rng: (distinct(rng, 12), 3), transforms=ARRAY,
        notes="reverse modes dropped the adjoint of a window whose maximum is not its first element "
              "until pyjlad kept Enzyme's loop-carried select rule from applying (pyjlad/carried_selects.py)")


@njit
def maxpool_loss(x, width):
    loss = 0.0
    for i in range(x.shape[0] // width):
        m = -np.inf
        for k in range(width):
            m = max(m, x[i * width + k])
        loss += m * m
    return loss


program(FAMILY, "maxpool-loss", maxpool_loss, lambda x, w: jnp.sum(maxpool1d_jax(x, w) ** 2),
        lambda rng: (distinct(rng, 12), 4), transforms=SMOOTH)


@njit
def avgpool2d(image):
    out = np.empty((image.shape[0] // 2, image.shape[1] // 2))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = 0.25 * (image[2 * i, 2 * j] + image[2 * i + 1, 2 * j]
                                + image[2 * i, 2 * j + 1] + image[2 * i + 1, 2 * j + 1])
    return out


def avgpool2d_jax(image):
    h, w = image.shape[0] // 2, image.shape[1] // 2
    return jnp.mean(image[: 2 * h, : 2 * w].reshape(h, 2, w, 2), axis=(1, 3))


program(FAMILY, "avgpool2d", avgpool2d, avgpool2d_jax,
        lambda rng: (rng.standard_normal((4, 6)),), transforms=ARRAY)


# ------------------------------------------------------------------ normalisation and attention
@njit
def layer_norm(x, gamma, beta):
    n = x.shape[0]
    mean = 0.0
    for i in range(n):
        mean += x[i]
    mean /= n
    var = 0.0
    for i in range(n):
        var += (x[i] - mean) ** 2
    var /= n
    out = np.empty(n)
    inv = 1.0 / math.sqrt(var + 1e-5)
    for i in range(n):
        out[i] = gamma[i] * (x[i] - mean) * inv + beta[i]
    return out


def layer_norm_jax(x, gamma, beta):
    return gamma * (x - jnp.mean(x)) / jnp.sqrt(jnp.var(x) + 1e-5) + beta


program(FAMILY, "layer-norm", layer_norm, layer_norm_jax,
        lambda rng: (rng.standard_normal(6), rng.uniform(0.5, 1.5, 6), rng.standard_normal(6)),
        wrt=(0, 1, 2), transforms=ARRAY)


@njit
def batch_norm_columns(x):
    out = np.empty_like(x)
    for j in range(x.shape[1]):
        col = x[:, j]
        mean = np.mean(col)
        std = math.sqrt(np.mean((col - mean) ** 2) + 1e-5)
        for i in range(x.shape[0]):
            out[i, j] = (x[i, j] - mean) / std
    return out


def batch_norm_columns_jax(x):
    return (x - jnp.mean(x, axis=0)) / jnp.sqrt(jnp.var(x, axis=0) + 1e-5)


program(FAMILY, "batch-norm-columns", batch_norm_columns, batch_norm_columns_jax,
        lambda rng: (rng.standard_normal((5, 3)),), transforms=ARRAY)


@njit
def attention_single_query(q, keys, values):
    n = keys.shape[0]
    scores = np.empty(n)
    for i in range(n):
        s = 0.0
        for j in range(q.shape[0]):
            s += q[j] * keys[i, j]
        scores[i] = s / math.sqrt(q.shape[0])
    m = np.max(scores)
    total = 0.0
    for i in range(n):
        scores[i] = math.exp(scores[i] - m)
        total += scores[i]
    out = np.zeros(values.shape[1])
    for i in range(n):
        for j in range(values.shape[1]):
            out[j] += scores[i] / total * values[i, j]
    return out


def attention_single_query_jax(q, keys, values):
    weights = jax.nn.softmax(keys @ q / jnp.sqrt(q.shape[0]))
    return weights @ values


def _attention_args(rng):
    while True:
        q, keys = rng.standard_normal(4), rng.standard_normal((5, 4))
        scores = np.sort(keys @ q)
        if scores[-1] - scores[-2] > 0.05:
            return q, keys, rng.standard_normal((5, 3))


program(FAMILY, "attention-single-query", attention_single_query, attention_single_query_jax,
        _attention_args, wrt=(0, 1, 2), transforms=ARRAY)


# ------------------------------------------------------------------ recurrent cells
@njit
def rnn_tanh_loss(w_in, w_rec, xs, target):
    h = np.zeros(w_rec.shape[0])
    new = np.empty_like(h)
    for t in range(xs.shape[0]):
        for i in range(h.shape[0]):
            z = w_in[i] * xs[t]
            for j in range(h.shape[0]):
                z += w_rec[i, j] * h[j]
            new[i] = math.tanh(z)
        h, new = new, h
    loss = 0.0
    for i in range(h.shape[0]):
        loss += (h[i] - target[i]) ** 2
    return loss


def rnn_tanh_loss_jax(w_in, w_rec, xs, target):
    def step(h, x):
        return jnp.tanh(w_in * x + w_rec @ h), None

    h, _ = jax.lax.scan(step, jnp.zeros(w_rec.shape[0]), xs)
    return jnp.sum((h - target) ** 2)


def _rnn_args(rng):
    w_in, w_rec = rng.standard_normal(4), rng.standard_normal((4, 4)) * 0.4
    return w_in, w_rec, rng.standard_normal(7), rng.standard_normal(4) * 0.5


program(FAMILY, "rnn-tanh-loss", rnn_tanh_loss, rnn_tanh_loss_jax, _rnn_args, wrt=(0, 1))
program(FAMILY, "rnn-tanh-loss-hvp", rnn_tanh_loss, rnn_tanh_loss_jax, _rnn_args, wrt=(1,),
        transforms=SMOOTH)


@njit
def _sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


@njit
def lstm_final_state(w, xs):
    # A scalar-input LSTM with hidden size h; w holds 4 gates x (input, recurrent, bias).
    h_size = w.shape[1]
    h = np.zeros(h_size)
    c = np.zeros(h_size)
    for t in range(xs.shape[0]):
        new_h = np.empty(h_size)
        for k in range(h_size):
            rec = 0.0
            for j in range(h_size):
                rec += h[j]
            gates = np.empty(4)
            for g in range(4):
                gates[g] = w[g, k, 0] * xs[t] + w[g, k, 1] * rec + w[g, k, 2]
            i_g = _sigmoid(gates[0])
            f_g = _sigmoid(gates[1])
            o_g = _sigmoid(gates[2])
            c[k] = f_g * c[k] + i_g * math.tanh(gates[3])
            new_h[k] = o_g * math.tanh(c[k])
        h = new_h
    return h


def lstm_final_state_jax(w, xs):
    h_size = w.shape[1]

    def step(state, x):
        h, c = state
        rec = jnp.sum(h)
        gates = w[:, :, 0] * x + w[:, :, 1] * rec + w[:, :, 2]
        c = jax.nn.sigmoid(gates[1]) * c + jax.nn.sigmoid(gates[0]) * jnp.tanh(gates[3])
        return (jax.nn.sigmoid(gates[2]) * jnp.tanh(c), c), None

    (h, _), _ = jax.lax.scan(step, (jnp.zeros(h_size), jnp.zeros(h_size)), xs)
    return h


program(FAMILY, "lstm-final-state", lstm_final_state, lstm_final_state_jax,
        lambda rng: (rng.standard_normal((4, 3, 3)) * 0.5, rng.standard_normal(5)), transforms=ARRAY)


# ------------------------------------------------------------------ clustering, embeddings, kernels
def _kmeans_args(rng):
    centroids = np.array([[-2.0, 0.0], [2.0, 0.5], [0.0, 2.5]]) + 0.1 * rng.standard_normal((3, 2))
    points = centroids[rng.integers(0, 3, 12)] + 0.5 * rng.standard_normal((12, 2))
    return centroids, points


@njit
def kmeans_objective(centroids, points):
    total = 0.0
    for i in range(points.shape[0]):
        best = np.inf
        for k in range(centroids.shape[0]):
            d = (points[i, 0] - centroids[k, 0]) ** 2 + (points[i, 1] - centroids[k, 1]) ** 2
            if d < best:
                best = d
        total += best
    return total


def kmeans_objective_jax(centroids, points):
    d = jnp.sum((points[:, None, :] - centroids[None, :, :]) ** 2, axis=-1)
    return jnp.sum(jnp.min(d, axis=1))


program(FAMILY, "kmeans-objective", kmeans_objective, kmeans_objective_jax, _kmeans_args,
        wrt=(0, 1))


@njit
def embedding_bag_loss(table, idx, offsets, target):
    # Mean of embedding rows per bag (bags given by offsets), squared error to a target.
    loss = 0.0
    for b in range(offsets.shape[0] - 1):
        for j in range(table.shape[1]):
            s = 0.0
            for p in range(offsets[b], offsets[b + 1]):
                s += table[idx[p], j]
            s /= offsets[b + 1] - offsets[b]
            loss += (s - target[b, j]) ** 2
    return loss


def embedding_bag_loss_jax(table, idx, offsets, target):
    loss = 0.0
    for b in range(offsets.shape[0] - 1):
        rows = table[idx[int(offsets[b]):int(offsets[b + 1])]]
        loss = loss + jnp.sum((jnp.mean(rows, axis=0) - target[b]) ** 2)
    return loss


program(FAMILY, "embedding-bag-loss", embedding_bag_loss, embedding_bag_loss_jax,
        lambda rng: (rng.standard_normal((6, 3)), rng.integers(0, 6, 9), np.array([0, 2, 5, 9]),
                     rng.standard_normal((3, 3))), wrt=(0, 3))


@njit
def matrix_factorization(users, items, rows, cols, ratings, lam):
    loss = 0.0
    for k in range(ratings.shape[0]):
        u = rows[k]
        v = cols[k]
        pred = 0.0
        for f in range(users.shape[1]):
            pred += users[u, f] * items[v, f]
        loss += (pred - ratings[k]) ** 2
    return loss + lam * (np.sum(users * users) + np.sum(items * items))


def matrix_factorization_jax(users, items, rows, cols, ratings, lam):
    pred = jnp.sum(users[rows] * items[cols], axis=1)
    return jnp.sum((pred - ratings) ** 2) + lam * (jnp.sum(users * users) + jnp.sum(items * items))


program(FAMILY, "matrix-factorization", matrix_factorization, matrix_factorization_jax,
        lambda rng: (rng.standard_normal((4, 2)), rng.standard_normal((5, 2)), rng.integers(0, 4, 12),
                     rng.integers(0, 5, 12), rng.standard_normal(12), 0.05), wrt=(0, 1), transforms=SMOOTH)


@njit
def rbf_kernel_quadratic(alpha, x, lengthscale):
    n = x.shape[0]
    q = 0.0
    for i in range(n):
        for j in range(n):
            d2 = 0.0
            for k in range(x.shape[1]):
                d2 += (x[i, k] - x[j, k]) ** 2
            q += alpha[i] * alpha[j] * math.exp(-0.5 * d2 / (lengthscale * lengthscale))
    return q


def rbf_kernel_quadratic_jax(alpha, x, lengthscale):
    d2 = jnp.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
    return alpha @ jnp.exp(-0.5 * d2 / lengthscale ** 2) @ alpha


program(FAMILY, "rbf-kernel-quadratic", rbf_kernel_quadratic, rbf_kernel_quadratic_jax,
        lambda rng: (rng.standard_normal(6), rng.standard_normal((6, 2)), 0.8), wrt=(0, 1, 2))


# ------------------------------------------------------------------ unrolled optimisers
@njit
def unrolled_gd(w0, lr, x, y):
    w = w0.copy()
    grad = np.empty_like(w)
    for _ in range(10):
        for j in range(w.shape[0]):
            grad[j] = 0.0
        for i in range(x.shape[0]):
            r = -y[i]
            for j in range(w.shape[0]):
                r += x[i, j] * w[j]
            for j in range(w.shape[0]):
                grad[j] += 2.0 * r * x[i, j] / x.shape[0]
        for j in range(w.shape[0]):
            w[j] -= lr * grad[j]
    loss = 0.0
    for i in range(x.shape[0]):
        loss += (np.dot(x[i], w) - y[i]) ** 2
    return loss


def unrolled_gd_jax(w0, lr, x, y):
    w = w0
    for _ in range(10):
        w = w - lr * 2.0 * x.T @ (x @ w - y) / x.shape[0]
    return jnp.sum((x @ w - y) ** 2)


program(FAMILY, "unrolled-gd", unrolled_gd, unrolled_gd_jax,
        lambda rng: (rng.standard_normal(3), 0.1, rng.standard_normal((8, 3)), rng.standard_normal(8)),
        wrt=(0, 1))


@njit
def _half_sq_residual(w, x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += 0.5 * (np.dot(x[i], w) - y[i]) ** 2
    return s


@njit
def unrolled_adam(w0, x, y):
    w = w0.copy()
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t in range(1, 6):
        g = np.zeros_like(w)
        for i in range(x.shape[0]):
            r = np.dot(x[i], w) - y[i]
            for j in range(w.shape[0]):
                g[j] += r * x[i, j]
        for j in range(w.shape[0]):
            m[j] = 0.9 * m[j] + 0.1 * g[j]
            v[j] = 0.999 * v[j] + 0.001 * g[j] * g[j]
            mhat = m[j] / (1.0 - 0.9 ** t)
            vhat = v[j] / (1.0 - 0.999 ** t)
            w[j] -= 0.05 * mhat / (math.sqrt(vhat) + 1e-8)
    return _half_sq_residual(w, x, y)


def unrolled_adam_jax(w0, x, y):
    w, m, v = w0, jnp.zeros_like(w0), jnp.zeros_like(w0)
    for t in range(1, 6):
        g = x.T @ (x @ w - y)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w = w - 0.05 * (m / (1.0 - 0.9 ** t)) / (jnp.sqrt(v / (1.0 - 0.999 ** t)) + 1e-8)
    return 0.5 * jnp.sum((x @ w - y) ** 2)


program(FAMILY, "unrolled-adam", unrolled_adam, unrolled_adam_jax,
        lambda rng: (rng.standard_normal(3), rng.standard_normal((8, 3)), rng.standard_normal(8)),
        rtol=1e-7)


@njit
def residual_block(x, w1, w2):
    h = np.empty(w1.shape[0])
    for i in range(w1.shape[0]):
        z = 0.0
        for j in range(x.shape[0]):
            z += w1[i, j] * x[j]
        # tanh-approximated GELU
        h[i] = 0.5 * z * (1.0 + math.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))
    out = x.copy()
    for i in range(x.shape[0]):
        for j in range(h.shape[0]):
            out[i] += w2[i, j] * h[j]
    return out


def residual_block_jax(x, w1, w2):
    return x + w2 @ jax.nn.gelu(w1 @ x, approximate=True)


program(FAMILY, "residual-block-gelu", residual_block, residual_block_jax,
        lambda rng: (rng.standard_normal(4), rng.standard_normal((5, 4)) * 0.5,
                     rng.standard_normal((4, 5)) * 0.5),
        wrt=(0, 1, 2), transforms=ARRAY)
