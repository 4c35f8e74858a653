"""The trained models the export tests share (built once per pytest process), and a fresh
Python process to serve an artifact in."""

import functools
import os
import subprocess
import sys

import numpy as np

import mirrorfit as mf
from tests.helpers import REPO_ROOT, mirrored_strategy

L = mf.layers


def mlp_layers():
    """6 features -> 3 logits, with BatchNormalization and Dropout."""
    return [L.Input((6,)), L.Dense(16, activation="relu"), L.BatchNormalization(),
            L.Dropout(0.5), L.Dense(3)]


def cnn_layers():
    """8x8x1 images -> 3 class probabilities: conv, max pooling, BatchNormalization."""
    return [L.Input((8, 8, 1)), L.Conv2D(4, 3, activation="relu"), L.MaxPooling2D(2),
            L.BatchNormalization(), L.Flatten(), L.Dropout(0.3),
            L.Dense(3, activation="softmax")]


@functools.cache
def trained(kind, replicas=8):
    """``(model, x, predicted)``: the ``kind`` ("mlp" or "cnn") model on ``replicas``
    replicas, trained one epoch (so its BatchNorm moving statistics are not their initial
    values), 37 rows of inputs ``x`` and ``model.predict(x)``."""
    rng = np.random.default_rng(0)
    shape = (6,) if kind == "mlp" else (8, 8, 1)
    x = rng.normal(size=(64, *shape)).astype(np.float32)
    y = (x.reshape(64, -1)[:, 0] > 0).astype(np.int32)
    with mirrored_strategy(replicas).scope():
        model = mf.Sequential(mlp_layers() if kind == "mlp" else cnn_layers(), seed=1)
    loss = mf.losses.SparseCategoricalCrossentropy(from_logits=kind == "mlp")
    model.compile("adam", loss)
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    return model, x[:37], model.predict(x[:37], verbose=0)


def run_python(code, *args):
    """Runs ``code`` in a fresh single-device CPU Python process (``sys.argv[1:]`` =
    ``args``) and returns its stdout; fails the test with its stderr if it fails."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "PYTHONPATH": str(REPO_ROOT),
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env,
                          check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout
