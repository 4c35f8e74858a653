"""Checkpoints for custom training loops, as ``tf.train.Checkpoint``/``CheckpointManager``.

`Checkpoint` holds named pytrees (params, optimizer state, step, ...) as attributes;
`CheckpointManager` numbers and prunes its saves in one directory; `latest_checkpoint` finds
the newest. They write the versions `mirrorfit._src.saving.checkpoint` writes (``<dir>/ckpt-<n>``:
orbax, atomic, SHA-256 checksummed, no pickle), and `Checkpoint.restore` places every value
like the value it replaces, so a checkpoint saved on N devices restores onto M.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import jax
import numpy as np

from mirrorfit._src.saving import checkpoint as checkpoint_lib

_KIND = "checkpoint"
_VERSION = re.compile(r"ckpt-\d+")


class Checkpoint:
    """Named pytrees to save and restore together, as ``tf.train.Checkpoint``.

    Args:
        **pytrees: name -> pytree of arrays or numbers (e.g. ``params=params,
            opt_state=opt_state, step=0``). Each is an attribute; assign a new value to
            the attribute before saving (``ckpt.params = params``).

    Raises:
        ValueError: if no pytree is given.

    Example:
        >>> ckpt = mf.Checkpoint(params={"w": jnp.zeros(3)}, step=0)
        >>> path = ckpt.save("run/ckpts")
        >>> ckpt.restore(path)
    """

    _names: tuple[str, ...]  # the pytrees' names, in the order given

    def __init__(self, **pytrees: Any):
        if not pytrees:
            raise ValueError("Checkpoint needs at least one named pytree, e.g. "
                             "mf.Checkpoint(params=params, opt_state=opt_state). Received: none")
        self.__dict__["_names"] = tuple(pytrees)
        self.__dict__.update(pytrees)

    def _tree(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self._names}

    def save(self, directory: str | os.PathLike, *, keep: int | None = None) -> str:
        """Writes a new version ``<directory>/ckpt-<n>`` and returns its path.

        Args:
            directory: the checkpoint directory (created if missing).
            keep: complete versions kept after this one (``None``: all).

        Returns:
            The new version's path, for `restore`.
        """
        keep = sys.maxsize if keep is None else keep
        path = checkpoint_lib.save(directory, self._tree(),
                                   {"kind": _KIND, "names": list(self._names)}, keep=keep)
        return os.fspath(path)

    def restore(self, save_path: str | os.PathLike) -> None:
        """Replaces every pytree by the saved one, placed like the current value.

        Args:
            save_path: a version path returned by `save` (or `latest_checkpoint`), or a
                checkpoint directory (its newest version).

        Raises:
            ValueError: if the saved pytrees do not match this checkpoint's (listing the
                mismatching paths); nothing is restored then.
            mirrorfit._src.saving.checkpoint.CheckpointError: if the version is missing or damaged.
        """
        path = Path(save_path)
        found = checkpoint_lib.load(path if _VERSION.fullmatch(path.name)
                                    else checkpoint_lib.latest(path))
        current = self._tree()
        template = jax.tree.map(lambda v: v if hasattr(v, "shape") else np.asarray(v), current)
        values = checkpoint_lib.unflatten_like(template, found.arrays, source=str(found.path))
        placed = jax.tree.map(_place_like, values, template)
        self.__dict__.update(placed)

    def __repr__(self) -> str:
        return f"Checkpoint({', '.join(self._names)})"


def _place_like(value: np.ndarray, like: Any) -> Any:
    sharding = getattr(like, "sharding", None)
    if isinstance(like, jax.Array) and sharding is not None:
        return jax.device_put(value, sharding)
    return value


class CheckpointManager:
    """Saves a `Checkpoint` as numbered versions in one directory, keeping the newest few.

    As ``tf.train.CheckpointManager``.

    Args:
        checkpoint: the `Checkpoint` to save.
        directory: where the versions go (``<directory>/ckpt-<n>``).
        max_to_keep: versions kept; ``None`` keeps all.

    Raises:
        TypeError: if ``checkpoint`` is not a `Checkpoint`.
        ValueError: if ``max_to_keep`` is not a positive int or ``None``.
    """

    def __init__(self, checkpoint: Checkpoint, directory: str | os.PathLike,
                 max_to_keep: int | None = 5):
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError("CheckpointManager needs an mf.Checkpoint. Received: "
                            f"checkpoint of type {type(checkpoint).__name__}")
        if max_to_keep is not None and (isinstance(max_to_keep, bool) or not isinstance(
                max_to_keep, int) or max_to_keep < 1):
            raise ValueError("max_to_keep must be a positive int (versions kept) or None (all)."
                             f" Received: max_to_keep={max_to_keep!r}")
        self.checkpoint = checkpoint
        self.directory = os.fspath(directory)
        self.max_to_keep = max_to_keep

    def save(self) -> str:
        """Saves a new version, deletes those beyond ``max_to_keep``; returns its path."""
        return self.checkpoint.save(self.directory, keep=self.max_to_keep)

    @property
    def checkpoints(self) -> list[str]:
        """The kept versions' paths, oldest first."""
        return [os.fspath(p) for p in reversed(checkpoint_lib.versions(self.directory))]

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest version's path, or ``None``."""
        return latest_checkpoint(self.directory)


def latest_checkpoint(checkpoint_dir: str | os.PathLike) -> str | None:
    """The newest complete version in ``checkpoint_dir``, or ``None``, as
    ``tf.train.latest_checkpoint``."""
    found = checkpoint_lib.versions(checkpoint_dir)
    return os.fspath(found[0]) if found else None
