"""Checkpoints on disk: pytrees saved with orbax-checkpoint, atomically, checksummed, no pickle.

A checkpoint path is a directory of numbered versions ``ckpt-<n>``. Each version is one orbax
checkpoint with an ``arrays`` and a ``meta`` item (what they hold, and how they are checked:
`mirrorfit._src.saving.checkpoint_format`). This module owns the directories: numbering,
writing, pruning and reading versions.

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

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from mirrorfit._src.distribute.mesh import from_chief
from mirrorfit._src.saving import checkpoint_format, checkpoint_index, restore_errors
from mirrorfit._src.saving.checkpoint_files import (
    TMP_SUFFIX,
    VERSION_NAME,
    VERSION_PREFIX,
    CheckpointWriteError,
    check_directory,
    has_version_layout,
    is_partial,
    write_failure,
)
from mirrorfit._src.saving.checkpoint_format import CheckpointError, LoadedVersion, flatten
from mirrorfit._src.saving.directory_lock import DirectoryLock

# -- versions -------------------------------------------------------------------------------


def versions(path: str | os.PathLike) -> list[Path]:
    """Complete versions ``ckpt-<n>`` under checkpoint directory ``path``, newest first ([] if
    none).

    Only directories laid out as `save` writes them count (`written_by_mirrorfit`); a
    user's own ``ckpt-3`` folder is not a version.
    """
    return checkpoint_index.numbered(path, VERSION_PREFIX)[::-1]


def _next_number(root: Path) -> int:
    """One more than any ``ckpt-<n>`` name in ``root``, the user's included: never reused."""
    taken = [int(m.group(1)) for p in root.iterdir() if (m := VERSION_NAME.match(p.name))]
    return 1 + max(taken, default=0)


def _checkpointer() -> ocp.Checkpointer:
    return ocp.Checkpointer(ocp.CompositeCheckpointHandler())


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
    items, meta = checkpoint_format.describe(tree, info)
    shown = os.fspath(path)
    root = Path(path).absolute()
    check_directory(root, shown, argument)
    if lock is None or not lock.held or lock.directory != root.resolve():
        with DirectoryLock(path, argument):
            return _write(root, shown, items, meta, keep, argument)
    return _write(root, shown, items, meta, keep, argument)




def _write_orbax(target: Path, items: list[tuple[list[str], np.ndarray]],
                 meta: dict[str, Any]) -> None:
    with _checkpointer() as checkpointer:
        checkpointer.save(target, args=ocp.args.Composite(
            arrays=ocp.args.PyTreeSave(checkpoint_format.nest(items)),
            meta=ocp.args.JsonSave(meta)))


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
    items, meta = checkpoint_format.describe(tree, info)
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


def load(version: str | os.PathLike) -> LoadedVersion:
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
                checkpoint_format.check_meta(meta, version, damaged)
                entries = meta["arrays"]
                restore_args = checkpoint_format.nest(
                    [(e["path"], ocp.RestoreArgs(restore_type=np.ndarray)) for e in entries])
                nested = checkpointer.restore(version, args=ocp.args.Composite(
                    arrays=ocp.args.PyTreeRestore(restore_args=restore_args)))["arrays"]
        except CheckpointError:
            raise
        except Exception as err:  # orbax/tensorstore/JSON errors on damaged files
            detail = restore_errors.explain(version, [e["path"] for e in entries], err)
            raise CheckpointError(damaged.format(detail=detail)) from err
    arrays = {key: np.asarray(value) for key, value in flatten(nested).items()}
    checkpoint_format.check_arrays(arrays, entries, damaged)
    return LoadedVersion(arrays, meta.get("info", {}), version)


def read_latest(path: str | os.PathLike) -> LoadedVersion:
    """Loads and verifies the newest version under checkpoint directory ``path``
    (`checkpoint_index.latest`).

    Raises:
        CheckpointError: if ``path`` holds no complete checkpoint, or the newest is damaged.
        NewerFormatError: if a newer mirrorfit wrote it.
    """
    found = checkpoint_index.latest(path, VERSION_PREFIX)
    if found is None:
        raise CheckpointError(
            f"No checkpoint found at {os.fspath(path)!r}: expected a directory written by "
            "model.save_weights/model.save (it holds ckpt-<n> versions). Check the path. "
            f"Received: path={os.fspath(path)!r}")
    return load(found)


