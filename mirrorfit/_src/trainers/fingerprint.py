"""Fingerprints of a run's training data and compile configuration, stored with backups.

`Trainer.fingerprints` computes both for the running ``fit``;
`mirrorfit.callbacks.BackupAndRestore` records them in every backup and compares them
(`mirrorfit._src.callbacks.fingerprint_check.differences`) before resuming, so a backup is
never continued on other data, or with another optimizer, loss or metrics, without a word
(two runs silently mixed into one).

* data (`data_fingerprint`): the row count; each array of ``x``, ``y`` and ``sample_weight``
  with its shape and dtype; and one SHA-256 over a fixed sample of rows (`SAMPLE_ROWS` rows
  evenly spaced over the data, the first and last included), so a changed value in those
  rows, or a reordering, is caught without hashing the whole data set;
* compile (`compile_fingerprint`): the optimizer, loss and metrics, each described by its
  configuration (``get_config``) or its name (`public_name`: ``mirrorfit.<qualname>`` for
  mirrorfit's own, whatever module defines them): never by an object ``repr`` that holds a
  memory address, so the same script gives the same fingerprint in every process, every
  restart and every mirrorfit layout.

Fingerprints are JSON (they are stored in the checkpoint's ``meta``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import jax
import numpy as np

from mirrorfit._src.callbacks.fingerprint_check import public_name
from mirrorfit._src.trainers.data_adapters import DataAdapter
from mirrorfit._src.trainers.step_family import StepConfig

SAMPLE_ROWS = 32
"""Rows hashed per fingerprint (all of them when the data has fewer)."""


def sample_rows(num_rows: int) -> np.ndarray:
    """int64 ``[min(num_rows, SAMPLE_ROWS)]``: evenly spaced row indices, first and last."""
    count = min(num_rows, SAMPLE_ROWS)
    return np.unique(np.linspace(0, num_rows - 1, count).round().astype(np.int64))


def data_fingerprint(data: DataAdapter) -> dict[str, Any] | None:
    """The fingerprint of a training data adapter; ``None`` for an iterable input.

    An iterable cannot be read without consuming it, so it has no fingerprint (the shuffle
    order and shapes are still checked on resume).

    Args:
        data: the data adapter ``fit`` trains on (after ``validation_split``).

    Returns:
        ``{"rows": int, "arrays": {name: {"shape": [...], "dtype": str}}, "sample_sha256":
        str}``, or ``None``.
    """
    trees = data.arrays()
    if trees is None:
        return None
    num_examples = len(jax.tree.leaves(trees[0])[0])
    index = sample_rows(num_examples)
    digest = hashlib.sha256()
    arrays = {}
    for name, tree in zip(("x", "y", "sample_weight"), trees):
        if tree is None:
            continue
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            key = name + jax.tree_util.keystr(path)
            arrays[key] = {"shape": list(leaf.shape), "dtype": leaf.dtype.name}
            digest.update(key.encode())
            digest.update(np.ascontiguousarray(np.take(leaf, index, axis=0)).tobytes())
    return {"rows": int(num_examples), "arrays": arrays,
            "sample_sha256": digest.hexdigest()}


def _describe(obj: Any) -> Any:
    """A JSON description of one compile argument that is the same in every process."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    obj = getattr(obj, "loss", obj)  # compile's per-example wrapper -> the loss
    get_config = getattr(obj, "get_config", None)
    if callable(get_config):
        try:  # functions in a config (a wrapped loss's fn) by name, not by address
            return {type(obj).__qualname__: json.loads(json.dumps(get_config(),
                                                                  default=public_name))}
        except TypeError:  # e.g. an optimizer with a schedule: describe it by its parts
            pass
    if isinstance(obj, (list, tuple)):  # metrics; an optax transformation's functions
        return [_describe(item) for item in obj]
    return public_name(obj)


def compile_fingerprint(config: StepConfig | None) -> dict[str, Any] | None:
    """The fingerprint of a compiled model's resolved optimizer, loss and metrics.

    Resolved objects, not ``compile`` 's arguments, so ``"adam"`` and
    ``mf.optimizers.Adam()`` fingerprint alike. ``steps_per_execution`` is left out: it
    changes how steps are grouped, not their results.

    Args:
        config: ``model.trainer.config`` (``None`` before ``compile``).
    """
    if config is None:
        return None
    return {"optimizer": _describe(config.optimizer), "loss": _describe(config.loss),
            "metrics": [f"{type(m).__qualname__}({m.name})"
                        for m in (*config.metrics, *config.weighted_metrics)]}
