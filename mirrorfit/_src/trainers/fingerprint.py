"""Fingerprints of a run's training data and compile configuration, stored with backups.

`mirrorfit.callbacks.BackupAndRestore` records both in every backup and compares them before
resuming, so a backup is never continued on other data, or with another optimizer, loss or
metrics, without a word (two runs silently mixed into one).

* data (`data_fingerprint`): the row count; each array of ``x``, ``y`` and ``sample_weight``
  with its shape and dtype; and one SHA-256 over a fixed sample of rows (`SAMPLE_ROWS` rows
  evenly spaced over the data, the first and last included), so a changed value in those
  rows, or a reordering, is caught without hashing the whole data set;
* compile (`compile_fingerprint`): the optimizer, loss and metrics, each described by its
  configuration (``get_config``) or its qualified name: never by an object ``repr`` that
  holds a memory address, so the same script gives the
  same fingerprint in every process and every restart.

Fingerprints are JSON (they are stored in the checkpoint's ``meta``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from mirrorfit._src.trainers.data_adapters import DataAdapter
from mirrorfit._src.trainers.steps import StepConfig

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


def _qualified_name(obj: Any) -> str:
    named = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"


def _describe(obj: Any) -> Any:
    """A JSON description of one compile argument that is the same in every process."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    obj = getattr(obj, "loss", obj)  # compile's per-example wrapper -> the loss
    get_config = getattr(obj, "get_config", None)
    if callable(get_config):
        try:  # functions in a config (a wrapped loss's fn) by name, not by address
            return {type(obj).__qualname__: json.loads(json.dumps(get_config(),
                                                                  default=_qualified_name))}
        except TypeError:  # e.g. an optimizer with a schedule: describe it by its parts
            pass
    if isinstance(obj, (list, tuple)):  # metrics; an optax transformation's functions
        return [_describe(item) for item in obj]
    return _qualified_name(obj)


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


def _data_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    if saved["rows"] != current["rows"]:
        return [f"{saved['rows']} training rows in the backup, {current['rows']} now"]
    found = []
    for key in sorted(set(saved["arrays"]) | set(current["arrays"])):
        before, now = saved["arrays"].get(key), current["arrays"].get(key)
        if before != now:
            show = lambda spec: ("absent" if spec is None else
                                 f"shape {tuple(spec['shape'])} {spec['dtype']}")
            found.append(f"{key}: {show(before)} in the backup, {show(now)} now")
    if not found and saved["sample_sha256"] != current["sample_sha256"]:
        found.append("the values of the sampled training rows differ (other data of the same "
                      "shape, or the same data in another order)")
    return found


def differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between a backup's fingerprints and the current run's, in words.

    Args:
        saved: ``{"data": ..., "compile": ...}`` as stored in the backup.
        current: the same for the run that would resume.

    Returns:
        One line per difference; ``[]`` when they match. A fingerprint that is ``None`` on
        either side (an iterable input) is not compared.
    """
    found = []
    if saved.get("data") is not None and current.get("data") is not None:
        found += [f"training data: {line}" for line in _data_differences(saved["data"],
                                                                         current["data"])]
    before, now = saved.get("compile"), current.get("compile")
    if before is not None and now is not None:
        for key in ("optimizer", "loss", "metrics"):
            if before.get(key) != now.get(key):
                found.append(f"compile {key}: {before.get(key)!r} in the backup, "
                             f"{now.get(key)!r} now")
    return found
