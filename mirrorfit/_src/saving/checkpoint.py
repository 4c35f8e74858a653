"""Checkpoints on disk: pytrees saved with orbax-checkpoint, atomically, checksummed, no pickle.

A checkpoint path is a directory of numbered versions ``ckpt-<n>``. Each version is one orbax
checkpoint with two items:

* ``arrays``: the pytree's leaves as a nested dict of NumPy arrays (orbax ``PyTreeSave``),
  keyed by the leaves' paths (``params/Dense_0/kernel``, ``opt_state/inner_state/0/mu/...``),
  so any pytree (NamedTuples, optax states) saves without its Python classes;
* ``meta``: JSON (orbax ``JsonSave``) listing every array's path, shape, dtype and SHA-256,
  plus the caller's ``info`` (epoch, compile arguments, ...), itself checksummed (``sha256``
  over the canonical JSON of everything else), so a changed digit is damage, not data.

Atomicity: orbax writes a version into ``ckpt-<n>.orbax-checkpoint-tmp`` and renames it to
``ckpt-<n>`` once complete, and a new version is complete before older ones are deleted, so a
crash at any point leaves every complete version loadable. Loading restores NumPy arrays (so
a checkpoint saved from N devices loads onto any M), checks every shape and checksum, and
raises `CheckpointError` naming the version directory on any damage. A version written by a
newer mirrorfit raises `NewerFormatError` instead: it is not damaged, and nothing may delete
it. Loading never runs code: orbax reads tensorstore arrays and JSON.

`write_version` writes one version at a path the caller names instead (``mf.Checkpoint``'s
``<prefix>-<n>``). Writing fails with `CheckpointWriteError` (an ``OSError``) naming the
caller's argument and the fix (a full disk, no permission, a file where the directory should
be); the failed version's temporary files are removed and the previous versions stay as they
were.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp

from mirrorfit._src.distribute.mesh import from_chief
from mirrorfit._src.optimizers.accumulation import resized_accumulators
from mirrorfit._src.saving import restore_errors
from mirrorfit._src.saving.checkpoint_files import (
    TMP_SUFFIX,
    VERSION_NAME,
    CheckpointWriteError,
    check_directory,
    has_version_layout,
    is_partial,
    write_failure,
    written_by_mirrorfit,
)
from mirrorfit._src.saving.directory_lock import DirectoryLock

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


class Checkpoint(NamedTuple):
    """One loaded, verified checkpoint version."""

    arrays: dict[str, np.ndarray]  # path key ("params/Dense_0/kernel") -> array, any shape
    info: dict[str, Any]  # the ``info`` given to `save`
    path: Path  # the version directory, e.g. ``<path>/ckpt-3``


# -- pytree paths ---------------------------------------------------------------------------


def _segment(key: Any) -> str:
    for attr in ("key", "name", "idx"):  # DictKey/FlattenedIndexKey, GetAttrKey, SequenceKey
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _segments(tree: Any) -> list[tuple[list[str], Any]]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [([_segment(k) for k in path], leaf) for path, leaf in leaves]


def flatten(tree: Any) -> dict[str, Any]:
    """Leaves of ``tree`` keyed by their ``/``-joined paths (``"params/Dense_0/kernel"``)."""
    return {"/".join(path): leaf for path, leaf in _segments(tree)}


def select(arrays: Mapping[str, Any], *roots: str) -> dict[str, Any]:
    """The entries of a flat checkpoint whose first path segment is one of ``roots``."""
    return {key: value for key, value in arrays.items() if key.split("/", 1)[0] in roots}


def _nest(items: list[tuple[list[str], Any]]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for path, value in items:
        node = nested
        for name in path[:-1]:
            node = node.setdefault(name, {})
        node[path[-1]] = value
    return nested


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


# -- versions -------------------------------------------------------------------------------


def versions(path: str | os.PathLike) -> list[Path]:
    """Complete versions under checkpoint directory ``path``, newest first ([] if none).

    Only directories laid out as `save` writes them count (`written_by_mirrorfit`); a
    user's own ``ckpt-3`` folder is not a version.
    """
    root = Path(path)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir()
             if (m := VERSION_NAME.fullmatch(p.name)) and written_by_mirrorfit(p)]
    return [p for _, p in sorted(found, reverse=True)]


def _next_number(root: Path) -> int:
    """One more than any ``ckpt-<n>`` name in ``root``, the user's included: never reused."""
    taken = [int(m.group(1)) for p in root.iterdir() if (m := VERSION_NAME.match(p.name))]
    return 1 + max(taken, default=0)


def _checkpointer() -> ocp.Checkpointer:
    return ocp.Checkpointer(ocp.CompositeCheckpointHandler())


def _meta_checksum(meta: Mapping[str, Any]) -> str:
    """SHA-256 of ``meta`` without its ``sha256`` entry, as canonical JSON."""
    body = {key: value for key, value in meta.items() if key != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def save(path: str | os.PathLike, tree: Any, info: Mapping[str, Any] | None = None, *,
         keep: int = 1, argument: str = "path", lock: DirectoryLock | None = None) -> Path:
    """Writes ``tree`` as a new version of checkpoint directory ``path``; returns the version.

    Args:
        path: the checkpoint directory (created if missing).
        tree: pytree of arrays (``jax.Array`` s are copied to the host first).
        info: JSON-serializable metadata stored alongside (e.g. ``{"epoch": 3}``).
        keep: complete versions kept after this one is written (older ones are deleted).
        argument: how the caller's user names ``path`` in error messages
            (``"filepath"``, ``"backup_dir"``).
        lock: the caller's held `DirectoryLock` of ``path`` (a callback holds it for the
            whole ``fit``); without it, the directory is locked for this save only.

    Returns:
        The new version directory ``<path>/ckpt-<n>``.

    Raises:
        ValueError: if ``tree`` has no array leaves.
        ValueError: naming ``argument``, if ``path`` is an existing file.
        DirectoryLockedError: naming ``argument`` and the holder, if another writer holds
            the directory's lock; nothing is written.
        CheckpointWriteError: naming ``argument`` and the fix, if the write fails (full
            disk, no permission). The new version's temporary files are removed; earlier
            versions are untouched.
    """
    items, meta = _describe(tree, info)
    shown = os.fspath(path)
    root = Path(path).absolute()
    check_directory(root, shown, argument)
    if lock is None or not lock.held or lock.directory != root.resolve():
        with DirectoryLock(path, argument):
            return _write(root, shown, items, meta, keep, argument)
    return _write(root, shown, items, meta, keep, argument)


def _describe(tree: Any, info: Mapping[str, Any] | None
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


def _write_orbax(target: Path, items: list[tuple[list[str], np.ndarray]],
                 meta: dict[str, Any]) -> None:
    with _checkpointer() as checkpointer:
        checkpointer.save(target, args=ocp.args.Composite(
            arrays=ocp.args.PyTreeSave(_nest(items)), meta=ocp.args.JsonSave(meta)))


def _write_failed(err: Exception, target: Path | None, shown: str, argument: str,
                  kept: str) -> CheckpointWriteError | None:
    """The `CheckpointWriteError` for a failed write of ``target`` (its temporary files are
    removed), or ``None`` when ``err`` is not a storage failure (the caller re-raises it)."""
    failure = write_failure(err)
    if failure is None:
        return None
    if target is not None and jax.process_index() == 0:
        for partial in target.parent.glob(f"{target.name}{TMP_SUFFIX}*"):
            shutil.rmtree(partial, ignore_errors=True)
    what, fix, code = failure
    return CheckpointWriteError(
        code,
        f"Could not write a checkpoint to {argument}={shown!r}: {what} "
        f"({type(err).__name__}: {err}). {fix.format(argument=argument)} {kept} "
        f"Received: {argument}={shown!r}")


def _write(root: Path, shown: str, items: list[tuple[list[str], np.ndarray]],
           meta: dict[str, Any], keep: int, argument: str) -> Path:
    """`save` 's write, under the directory's lock."""
    chief = jax.process_index() == 0
    number = 0
    try:
        if chief:  # one process numbers the version and tidies up; the others follow it
            root.mkdir(parents=True, exist_ok=True)
            for stale in filter(is_partial, root.iterdir()):  # left by a crash mid-save
                shutil.rmtree(stale, ignore_errors=True)
            number = _next_number(root)
        number = from_chief(number)
        target = root / f"ckpt-{number}"
        _write_orbax(target, items, meta)
    except Exception as err:
        previous = versions(root)
        kept = (f"The previous checkpoint {os.fspath(previous[0])!r} is intact." if previous
                else "No earlier checkpoint was there.")
        failed = _write_failed(err, root / f"ckpt-{number}" if number else None, shown,
                               argument, kept)
        if failed is None:
            raise
        raise failed from err
    if chief:
        for old in versions(root)[keep:]:
            shutil.rmtree(old, ignore_errors=True)
    from_chief(number)  # nobody reads the directory while the chief still deletes
    return target


NOT_A_VERSION = (
    "{argument} {path!r} exists and is not a mirrorfit checkpoint, so it is not replaced. "
    "Choose a path that does not exist yet, or move it away. Received: {argument}={path!r}")
"""Error for writing a version over a file or directory mirrorfit did not write."""


def write_version(target: str | os.PathLike, tree: Any,
                  info: Mapping[str, Any] | None = None, *, argument: str = "path") -> Path:
    """Writes ``tree`` as exactly the version directory ``target``, as `save` writes one.

    A version already at ``target`` is replaced (as ``tf.train.Checkpoint.write`` replaces
    its files); its directory is locked during the write.

    Args:
        target: the version directory to write (its parent is created if missing).
        tree: pytree of arrays (``jax.Array`` s are copied to the host first).
        info: JSON-serializable metadata stored alongside.
        argument: how the caller's user names ``target`` in error messages.

    Returns:
        ``target``, absolute.

    Raises:
        ValueError: if ``tree`` has no array leaves, or naming ``argument``, if ``target``
            exists and is not a mirrorfit version (it is the user's).
        DirectoryLockedError: naming ``argument``, if another writer holds the lock of
            ``target`` 's directory; nothing is written.
        CheckpointWriteError: naming ``argument`` and the fix, if the write fails (full
            disk, no permission); the temporary files are removed.
    """
    items, meta = _describe(tree, info)
    shown = os.fspath(target)
    target = Path(target).absolute()
    if target.exists() and not has_version_layout(target):
        raise ValueError(NOT_A_VERSION.format(argument=argument, path=shown))
    with DirectoryLock(target.parent, argument):
        try:
            if jax.process_index() == 0:
                target.parent.mkdir(parents=True, exist_ok=True)
                for stale in target.parent.glob(f"{target.name}{TMP_SUFFIX}*"):
                    shutil.rmtree(stale, ignore_errors=True)
                if target.exists():
                    shutil.rmtree(target)
            from_chief(0)  # the others write once the chief has cleared the way
            _write_orbax(target, items, meta)
        except Exception as err:
            failed = _write_failed(err, target, shown, argument, "Nothing else was changed.")
            if failed is None:
                raise
            raise failed from err
    return target


# -- loading --------------------------------------------------------------------------------


def latest(path: str | os.PathLike) -> Path:
    """The newest complete version under checkpoint directory ``path``.

    Raises:
        CheckpointError: if ``path`` holds no complete checkpoint.
    """
    found = versions(path)
    if not found:
        raise CheckpointError(
            f"No checkpoint found at {os.fspath(path)!r}: expected a directory written by "
            "model.save_weights/model.save (it holds ckpt-<n> versions). Check the path. "
            f"Received: path={os.fspath(path)!r}")
    return found[0]


def _check_meta(meta: Any, version: Path, damaged: str) -> None:
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


def load(version: str | os.PathLike) -> Checkpoint:
    """Reads and verifies one version directory (``<path>/ckpt-<n>``) as NumPy arrays.

    Raises:
        NewerFormatError: naming ``version``, if a newer mirrorfit wrote it.
        CheckpointError: naming ``version``, if any file is missing, truncated or corrupted
            (orbax fails to read it, or ``meta`` or an array fails its SHA-256 or shape).
        PeerFailedError: naming ``version`` and the process, when orbax fails after another
            process of the job failed (its barrier, a read cut short): not damage, so a
            `BackupAndRestore` keeps the backup.
    """
    version = Path(version).absolute()
    damaged = (f"The checkpoint {os.fspath(version)!r} is damaged or incomplete and cannot be "
               "loaded: {detail}. Load an earlier checkpoint or save a new one.")
    entries: list[dict[str, Any]] = []
    with restore_errors.quiet_closed_loop(version):  # orbax's abandoned reads on failure
        try:
            with _checkpointer() as checkpointer:
                meta = checkpointer.restore(version, args=ocp.args.Composite(
                    meta=ocp.args.JsonRestore()))["meta"]
                _check_meta(meta, version, damaged)
                entries = meta["arrays"]
                restore_args = _nest([(e["path"], ocp.RestoreArgs(restore_type=np.ndarray))
                                      for e in entries])
                nested = checkpointer.restore(version, args=ocp.args.Composite(
                    arrays=ocp.args.PyTreeRestore(restore_args=restore_args)))["arrays"]
        except CheckpointError:
            raise
        except Exception as err:  # orbax/tensorstore/JSON errors on damaged files
            detail = restore_errors.explain(version, [e["path"] for e in entries], err)
            raise CheckpointError(damaged.format(detail=detail)) from err
    arrays = {key: np.asarray(value) for key, value in flatten(nested).items()}
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
    return Checkpoint(arrays, meta.get("info", {}), version)


def read_latest(path: str | os.PathLike) -> Checkpoint:
    """Loads and verifies the newest version under checkpoint directory ``path``.

    Raises:
        CheckpointError: if ``path`` holds no complete checkpoint, or the newest is damaged.
        NewerFormatError: if a newer mirrorfit wrote it.
    """
    return load(latest(path))


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
    keys = ["/".join(_segment(k) for k in path) for path, _ in leaves]
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

