"""What one checkpoint version holds, and how it is checked: the format of `checkpoint` 's files.

A version is one orbax checkpoint with two items:

* ``arrays``: the pytree's leaves as a nested dict of NumPy arrays (orbax ``PyTreeSave``),
  keyed by the leaves' paths (``params/Dense_0/kernel``, ``opt_state/inner_state/0/mu/...``),
  so any pytree (NamedTuples, optax states) saves without its Python classes;
* ``meta``: JSON (orbax ``JsonSave``) listing every array's path, shape, dtype and SHA-256,
  plus the caller's ``info`` (epoch, compile arguments, ...), itself checksummed (``sha256``
  over the canonical JSON of everything else), so a changed digit is damage, not data.

This module owns the leaves' path keys (`flatten`, `select`, `nest`, `unflatten_like`),
the ``meta`` item (`describe`) and its checks on loading (`check_meta`, `check_arrays`):
damage raises `CheckpointError`, a version written by a newer mirrorfit `NewerFormatError`
(it is not damaged, and nothing may delete it). Reading and writing the directories is
`mirrorfit._src.saving.checkpoint` 's.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from mirrorfit._src.optimizers.accumulation import resized_accumulators

FORMAT_NAME = "mirrorfit-checkpoint"
FORMAT_VERSION = 2
"""Version 2 checksums ``meta`` too; version 1 (arrays checksummed only) still loads."""
FORMAT = f"{FORMAT_NAME}/{FORMAT_VERSION}"
"""Format tag stored in every version's ``meta``."""

_MAX_LISTED = 5  # mismatches shown in an error message


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or damaged (truncated files, wrong checksums)."""


class NewerFormatError(CheckpointError):
    """A checkpoint written by a newer mirrorfit: not damaged, so never deleted."""


class LoadedVersion(NamedTuple):
    """One loaded, verified checkpoint version."""

    arrays: dict[str, np.ndarray]  # path key ("params/Dense_0/kernel") -> array, any shape
    info: dict[str, Any]  # the ``info`` given to `save`
    path: Path  # the version directory, e.g. ``<path>/ckpt-3``


# -- pytree paths ---------------------------------------------------------------------------


def path_segments(path: Sequence[Any]) -> list[str]:
    """The names of a ``jax.tree_util`` key path's entries (dict keys, attribute names, sequence
    indices: ``["opt_state", "0", "mu"]``), the parts of a checkpoint's array keys."""
    return [jax.tree_util.keystr((entry,), simple=True) for entry in path]


def _segments(tree: Any) -> list[tuple[list[str], Any]]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(path_segments(path), leaf) for path, leaf in leaves]


def flatten(tree: Any) -> dict[str, Any]:
    """Leaves of ``tree`` keyed by their ``/``-joined paths (``"params/Dense_0/kernel"``)."""
    return {"/".join(path): leaf for path, leaf in _segments(tree)}


def select(arrays: Mapping[str, Any], *roots: str) -> dict[str, Any]:
    """The entries of a flat checkpoint whose first path segment is one of ``roots``."""
    return {key: value for key, value in arrays.items() if key.split("/", 1)[0] in roots}


def nest(items: list[tuple[list[str], Any]]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, value in items:
        node = nested
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value
    return nested


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _meta_checksum(meta: Mapping[str, Any]) -> str:
    """SHA-256 of ``meta`` without its ``sha256`` entry, as canonical JSON."""
    body = {key: value for key, value in meta.items() if key != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def describe(tree: Any, info: Mapping[str, Any] | None
              ) -> tuple[list[tuple[list[str], np.ndarray]], dict[str, Any]]:
    """``tree`` 's leaves on the host with their paths, and the ``meta`` item describing them."""
    items = [(path_, np.asarray(leaf)) for path_, leaf in _segments(jax.device_get(tree))]
    if not items:
        raise ValueError("A checkpoint needs at least one array. Received: tree with no leaves")
    meta = {
        "format": FORMAT,
        "arrays": [{"path": p, "shape": list(a.shape), "dtype": a.dtype.name,
                    "sha256": _sha256(a)} for p, a in items],
        "info": dict(info or {}),
    }
    meta["sha256"] = _meta_checksum(meta)
    return items, meta


def check_meta(meta: Any, version: Path, damaged: str) -> None:
    """Raises unless ``meta`` is an intact description in a format this mirrorfit reads."""
    tag = meta.get("format") if isinstance(meta, dict) else None
    name, _, number = str(tag).partition("/")
    if name != FORMAT_NAME or not number.isdigit():
        raise CheckpointError(damaged.format(detail="its meta item is not a mirrorfit "
                                                    "checkpoint description"))
    if int(number) > FORMAT_VERSION:
        raise NewerFormatError(
            f"The checkpoint {os.fspath(version)!r} was written by a newer mirrorfit (format "
            f"{tag!r}; this mirrorfit reads up to {FORMAT!r}). Nothing was loaded or deleted. "
            "Upgrade mirrorfit to load it, or move the directory away to start over. "
            f"Received: checkpoint {os.fspath(version)!r}")
    if int(number) >= 2 and meta.get("sha256") != _meta_checksum(meta):
        raise CheckpointError(damaged.format(detail="its meta item fails its SHA-256 checksum"))


def check_arrays(arrays: Mapping[str, np.ndarray], entries: list[dict[str, Any]],
                 damaged: str) -> None:
    """Raises unless ``arrays`` holds every array ``meta`` lists (``entries``), intact.

    Args:
        arrays: the loaded arrays, path key -> array.
        entries: ``meta["arrays"]``: each array's path, shape, dtype and SHA-256.
        damaged: the error message, with a ``{detail}`` field.

    Raises:
        CheckpointError: naming the first array that is missing, has another shape or
            dtype, or fails its SHA-256 checksum.
    """
    for entry in entries:
        key = "/".join(entry["path"])
        array = arrays.get(key)
        if array is None:
            raise CheckpointError(damaged.format(detail=f"array {key!r} is missing"))
        if list(array.shape) != entry["shape"] or array.dtype.name != entry["dtype"]:
            raise CheckpointError(damaged.format(
                detail=f"array {key!r} has shape {array.shape} and dtype {array.dtype}, "
                       f"expected {tuple(entry['shape'])} and {entry['dtype']}"))
        if _sha256(array) != entry["sha256"]:
            raise CheckpointError(damaged.format(detail=f"array {key!r} fails its SHA-256 "
                                                        "checksum"))


def unflatten_like(template: Any, arrays: Mapping[str, np.ndarray], *, source: str) -> Any:
    """Builds a pytree shaped like ``template`` from a flat checkpoint, or raises on mismatch.

    Every leaf of ``template`` must have an entry of the same shape under its path, and
    ``arrays`` must hold nothing else. Values are cast to the template leaves' dtypes.

    Args:
        template: pytree whose leaves have ``.shape`` and ``.dtype`` (arrays or
            ``jax.ShapeDtypeStruct`` s).
        arrays: flat checkpoint entries, path key -> array.
        source: the checkpoint's location, for error messages.

    Returns:
        A pytree with ``template`` 's structure and NumPy leaves.

    Raises:
        ValueError: listing the first mismatching paths with expected and received shapes.
            Nothing is built, so a caller that assigns the result loads all or nothing.
    """
    leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    keys = ["/".join(path_segments(path)) for path, _ in leaves]
    arrays = resized_accumulators(arrays, dict(zip(keys, (leaf.shape for _, leaf in leaves))))
    problems = []
    for key, (_, leaf) in zip(keys, leaves):
        expected = tuple(leaf.shape)
        if key not in arrays:
            problems.append(f"{key}: expected shape {expected}, missing from the checkpoint")
        elif tuple(np.shape(arrays[key])) != expected:
            problems.append(f"{key}: expected shape {expected}, received "
                            f"{tuple(np.shape(arrays[key]))}")
    for key in sorted(set(arrays) - set(keys)):
        problems.append(f"{key}: not in the model, received shape {tuple(np.shape(arrays[key]))}")
    if problems:
        shown = "\n  ".join(problems[:_MAX_LISTED])
        more = f"\n  ... and {len(problems) - _MAX_LISTED} more" if len(
            problems) > _MAX_LISTED else ""
        raise ValueError(
            f"The checkpoint does not match the model ({len(problems)} mismatching entries; "
            f"nothing was loaded):\n  {shown}{more}\nLoad it into a model built with the same "
            f"layers and input shape (and, for optimizer state, the same optimizer). "
            f"Received: checkpoint {source!r}")
    values = [np.asarray(arrays[key], dtype=leaf.dtype) for key, (_, leaf) in zip(keys, leaves)]
    return jax.tree_util.tree_unflatten(treedef, values)
