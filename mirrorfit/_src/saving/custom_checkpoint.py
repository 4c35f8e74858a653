"""Checkpoints for custom training loops, as ``tf.train.Checkpoint``/``CheckpointManager``.

`Checkpoint` holds named objects (``model=model, optimizer=optimizer``: Variables, the objects
that own them, ``mf.Model`` s, pytrees; `mirrorfit._src.saving.checkpoint_objects` says what
each stores). As TensorFlow's, ``save(file_prefix)`` writes ``<file_prefix>-<n>`` (``n``
counts its saves, `Checkpoint.save_counter`) and records it in the ``checkpoint`` index file
beside it (`mirrorfit._src.saving.checkpoint_index`), ``write(path)`` writes exactly
``path``, and ``restore(path)`` fills the objects in place. `CheckpointManager` numbers and
prunes saves in one directory; `latest_checkpoint` finds the newest. Each save is one version
as `mirrorfit._src.saving.checkpoint` writes it (orbax, atomic, SHA-256 checksummed, no
pickle) with host arrays, so a checkpoint saved on N devices restores onto M: a restored
value is placed like the value it replaces (mirrored values on their devices again).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np

from mirrorfit._src.distribute.mesh import from_chief
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving import checkpoint_format, checkpoint_index
from mirrorfit._src.saving.checkpoint_files import has_version_layout
from mirrorfit._src.saving.checkpoint_objects import (
    Entry,
    check_value,
    mismatches,
    waits_for_build,
)
from mirrorfit._src.variables import deferred
from mirrorfit._src.variables.variable import Variable

_KIND = "checkpoint"
_MAX_LISTED = 8  # mismatches shown in an error message

NOT_FOUND = (
    "No checkpoint found at {path!r}: expected a path returned by Checkpoint.save or "
    "Checkpoint.write (or by mf.latest_checkpoint), or a directory holding such saves. Check "
    "the path. Received: save_path={path!r}")
"""Error for a restore path that holds no checkpoint."""


class CheckpointLoadStatus:
    """What `Checkpoint.restore` restored, as TensorFlow's load status.

    A restore is all or nothing for the checkpoint's own names (it raises on a mismatch), so
    the objects always match; a checkpoint may hold more names than were restored. A model or
    optimizer not built yet is restored when it is built (``deferred``, as TF's deferred
    restoration).
    """

    def __init__(self, restored: list[str], unused: list[str],
                 deferred: dict[str, Any] | None = None):
        self.restored = restored  # the checkpoint's names that were restored (or deferred)
        self.unused = unused  # names in the saved checkpoint that this one does not have
        self._deferred = dict(deferred or {})  # name -> object whose restore waits for build

    @property
    def deferred(self) -> list[str]:
        """The names whose objects are not built yet: restored when they are."""
        return [name for name, obj in self._deferred.items() if deferred.is_pending(obj)]

    def assert_consumed(self) -> CheckpointLoadStatus:
        """Returns ``self`` if the saved checkpoint held nothing this one left unrestored.

        Raises:
            AssertionError: listing the saved names that were not restored, or the objects
                whose restore still waits for them to be built.
        """
        if self.unused:
            raise AssertionError(
                f"The checkpoint holds {self.unused} which this Checkpoint does not have (it "
                f"restored {self.restored}). Add them as attributes to restore them, or call "
                "expect_partial(). Received: a partial restore")
        if self.deferred:
            raise AssertionError(
                f"{self.deferred} are not built yet: their saved values are assigned when "
                "they are (call the model on a batch; the optimizer builds at its first "
                "apply_gradients, or call optimizer.build(model.trainable_variables)). "
                "Received: a restore still deferred")
        return self

    def assert_existing_objects_matched(self) -> CheckpointLoadStatus:
        """Returns ``self``: every object was matched (a restore raises otherwise)."""
        return self

    def expect_partial(self) -> CheckpointLoadStatus:
        """Returns ``self``: a partial restore is expected (no warning is ever given)."""
        return self


class Checkpoint:
    """Objects to save and restore together, as ``tf.train.Checkpoint``.

    Args:
        **objects: name -> what to save, each also an attribute: an ``mf.Model`` (its whole
            training state: params, other collections, optimizer state, step, RNG key),
            a Keras-style layer, model, optimizer or metric (its variables), an
            ``mf.Variable``, or a pytree of arrays, numbers and the above (``params=params,
            step=0``). Assign a new pytree to the attribute before saving
            (``ckpt.params = params``); assigning a new name adds it, as in TensorFlow.

    Attributes:
        save_counter: ``mf.Variable``, int32 ``[]``: the saves `save` made (restored by
            `restore`); the next save is ``<file_prefix>-<save_counter + 1>``.

    Raises:
        ValueError: if nothing is given, or a name is ``save_counter``.
        TypeError: for a value holding something else (strings, other objects).

    Example:
        >>> step = mf.Variable(0, dtype="int32", trainable=False)
        >>> ckpt = mf.Checkpoint(params={"w": jnp.zeros(3)}, step=step)
        >>> path = ckpt.save("run/ckpts/ckpt")
        >>> path, mf.latest_checkpoint("run/ckpts")
        ('run/ckpts/ckpt-1', 'run/ckpts/ckpt-1')
        >>> _ = step.assign(5)
        >>> ckpt.params = {"w": jnp.ones(3)}
        >>> status = ckpt.restore(path)
        >>> int(step.numpy()), ckpt.params["w"]
        (0, Array([0., 0., 0.], dtype=float32))
    """

    _names: list[str]  # the objects' names, in the order given
    save_counter: Variable

    def __init__(self, **objects: Any):
        if not objects:
            raise ValueError("Checkpoint needs at least one object, e.g. "
                             "mf.Checkpoint(model=model, optimizer=optimizer). Received: none")
        self.__dict__["_names"] = []
        self.__dict__["save_counter"] = Variable(0, dtype=np.int32, trainable=False,
                                                 name="save_counter")
        for name, value in objects.items():
            setattr(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "save_counter":
            raise ValueError("save_counter is the Checkpoint's own counter of saves; name the "
                             f"object otherwise. Received: save_counter={value!r}")
        if not name.startswith("_"):
            check_value(name, value)
            if name not in self._names:
                self._names.append(name)
        self.__dict__[name] = value

    def _entries(self, action: str, skip: set[str] | None = None) -> list[Entry]:
        seen: set[int] = set()
        return [Entry(name, getattr(self, name), seen, action) for name in self._names
                if name not in (skip or set())]

    def _write(self, path: str | os.PathLike, argument: str, save_counter: int | None) -> str:
        arrays = {}
        for entry in self._entries("save"):
            arrays.update(entry.arrays())
        info: dict[str, Any] = {"kind": _KIND, "names": list(self._names)}
        if save_counter is not None:
            info["save_counter"] = save_counter
        tree: dict[str, Any] = {}
        for key, array in arrays.items():
            node = tree
            *parents, last = key.split("/")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = array
        checkpoint_lib.write_version(path, tree, info, argument=argument)
        return os.fspath(path)

    def save(self, file_prefix: str | os.PathLike) -> str:
        """Writes ``<file_prefix>-<n>`` and names it in the directory's ``checkpoint`` index.

        ``n`` is `save_counter` + 1 (1 for the first save), as ``tf.train.Checkpoint.save``:
        ``save("run/ckpt")`` writes ``run/ckpt-1``, then ``run/ckpt-2``. A save of that name
        already there is replaced.

        Args:
            file_prefix: the path before ``-<n>``; its directory is created if missing.

        Returns:
            The new save's path, ``f"{file_prefix}-{n}"``, for `restore`.

        Raises:
            ValueError: for an unbuilt model, or if the path exists and is not a save.
            CheckpointWriteError: naming ``file_prefix``, if the write fails (full disk, no
                permission); the counter is not advanced then.
        """
        number = int(self.save_counter) + 1
        path = self._write(f"{os.fspath(file_prefix)}-{number}", "file_prefix", number)
        self.save_counter.assign(number)
        written = Path(path).absolute()
        checkpoint_index.write_index(written.parent, written, [written])
        from_chief(0)  # nobody reads the index before the chief has written it
        return path

    def write(self, file_prefix: str | os.PathLike) -> str:
        """Writes exactly ``file_prefix``, as ``tf.train.Checkpoint.write``: no number, no
        index, `save_counter` unchanged. A save already there is replaced.

        Returns:
            ``file_prefix``, as a string.

        Raises:
            ValueError: for an unbuilt model, or if the path exists and is not a save.
            CheckpointWriteError: naming ``file_prefix``, if the write fails.
        """
        return self._write(file_prefix, "file_prefix", None)

    def restore(self, save_path: str | os.PathLike | None) -> CheckpointLoadStatus:
        """Fills every object with the saved values, as ``tf.train.Checkpoint.restore``.

        Variables (also those of layers, models and optimizers) are assigned in place and
        keep their placement; an ``mf.Model`` gets its training state through its
        ``assign_state``, placed on its devices; a pytree attribute is replaced by the saved
        one, each leaf placed like the leaf it replaces (an ``mf.Mirrored`` is mirrored on its
        devices again). `save_counter` takes the saved count. All or nothing: on a mismatch
        nothing is restored.

        A model or optimizer that has not created its variables yet (a subclassed model
        before its first call, an optimizer before its first ``apply_gradients``) is restored
        when it does, as TensorFlow defers it: its saved values are kept and assigned at the
        end of its build (checked then: a mismatch raises from the build).

        Args:
            save_path: a path `save`, `write` or `latest_checkpoint` returned, or a
                directory (its newest save). ``None`` restores nothing (``latest_checkpoint``
                of an empty directory), as in TensorFlow.

        Returns:
            A `CheckpointLoadStatus`.

        Raises:
            ValueError: listing every mismatch (a variable missing from the checkpoint, or
                of another shape, or a saved one the objects lack) with the expected and
                found shapes; or for an unbuilt model.
            mirrorfit._src.saving.checkpoint_format.CheckpointError: if ``save_path`` holds no
                checkpoint, or it is damaged.
        """
        return self._read(save_path, restore_counter=True)

    def read(self, save_path: str | os.PathLike) -> CheckpointLoadStatus:
        """`restore` without `save_counter`, as ``tf.train.Checkpoint.read`` (pairs with
        `write`)."""
        return self._read(save_path, restore_counter=False)

    def _read(self, save_path: str | os.PathLike | None,
              restore_counter: bool) -> CheckpointLoadStatus:
        if save_path is None:
            return CheckpointLoadStatus([], [])
        found = checkpoint_lib.load(_version(save_path))
        waiting = {name: self.__dict__[name] for name in self._names
                   if waits_for_build(self.__dict__[name])}
        entries = self._entries("restore", skip=set(waiting))
        problems = mismatches(entries, found.arrays)
        if problems:
            shown = "\n  ".join(problems[:_MAX_LISTED])
            more = (f"\n  ... and {len(problems) - _MAX_LISTED} more"
                    if len(problems) > _MAX_LISTED else "")
            raise ValueError(
                f"The checkpoint does not match the objects ({len(problems)} mismatching "
                f"entries; nothing was restored):\n  {shown}{more}\nRestore into objects "
                "built like the saved ones (same layers, shapes and optimizer). Objects that "
                "create their variables on first use (layers, models, optimizers) must be "
                "built first, e.g. by calling the model on a batch or optimizer.build("
                f"model.trainable_variables). Received: save_path={os.fspath(save_path)!r}")
        for entry in entries:
            entry.restore_states(found.arrays)
        for entry in entries:
            self.__dict__[entry.name] = entry.restore(found.arrays)
        for name, obj in waiting.items():
            mine = {k: v for k, v in found.arrays.items() if k.split("/", 1)[0] == name}
            if mine:
                deferred.defer_until_built(obj, functools.partial(
                    self._restore_built, name, obj, mine, os.fspath(save_path)))
        if restore_counter and "save_counter" in found.info:
            self.save_counter.assign(found.info["save_counter"])
        saved = found.info.get("names") or sorted({k.split("/", 1)[0] for k in found.arrays})
        return CheckpointLoadStatus(list(self._names),
                                    [name for name in saved if name not in self._names],
                                    waiting)

    def _restore_built(self, name: str, obj: Any, arrays: dict[str, np.ndarray],
                       save_path: str) -> None:
        """The deferred restore of ``obj`` (checkpoint attribute ``name``), now built.

        Raises:
            ValueError: listing the mismatches, when it was built unlike the saved one.
        """
        entry = Entry(name, obj, set(), "restore")
        problems = mismatches([entry], arrays)
        if problems:
            raise ValueError(
                f"The restore of {name!r} from {save_path!r}, deferred until it was built, "
                f"does not match it ({len(problems)} mismatching entries; nothing of it was "
                "restored):\n  " + "\n  ".join(problems[:_MAX_LISTED]) + "\nBuild it like "
                f"the saved one (same layers, shapes and optimizer). Received: {name}={obj!r}")
        with jax.ensure_compile_time_eval():  # concrete values, also when built in a trace
            entry.restore_states(arrays)
            self.__dict__[name] = entry.restore(arrays)

    def __repr__(self) -> str:
        return f"Checkpoint({', '.join(self._names)})"


def _version(save_path: str | os.PathLike) -> Path:
    """The save ``save_path`` names: itself, or a directory's newest."""
    path = Path(save_path)
    if has_version_layout(path):
        return path
    newest = checkpoint_index.latest(path) if path.is_dir() else None
    if newest is None:
        raise checkpoint_format.CheckpointError(NOT_FOUND.format(path=os.fspath(save_path)))
    return newest


class CheckpointManager:
    """Saves a `Checkpoint` as numbered saves in one directory, keeping the newest few.

    As ``tf.train.CheckpointManager``: `save` writes ``<directory>/<checkpoint_name>-<n>``
    (``n``: the checkpoint's `Checkpoint.save_counter` after this save, or
    ``checkpoint_number``), deletes the oldest beyond ``max_to_keep`` and updates the
    directory's ``checkpoint`` index. A manager on a directory with saves goes on from them.

    Args:
        checkpoint: the `Checkpoint` to save.
        directory: where the saves go (created on the first save).
        max_to_keep: saves kept; ``None`` keeps all.
        checkpoint_name: the saves' name before ``-<n>``.

    Raises:
        TypeError: if ``checkpoint`` is not a `Checkpoint`.
        ValueError: if ``max_to_keep`` is not a positive int or ``None``.

    Example:
        >>> ckpt = mf.Checkpoint(w=np.zeros(2, np.float32))
        >>> manager = mf.CheckpointManager(ckpt, "run/managed", max_to_keep=2)
        >>> for _ in range(3):
        ...     _ = manager.save()
        >>> manager.checkpoints
        ['run/managed/ckpt-2', 'run/managed/ckpt-3']
    """

    def __init__(self, checkpoint: Checkpoint, directory: str | os.PathLike,
                 max_to_keep: int | None = 5, checkpoint_name: str = "ckpt"):
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
        self.checkpoint_name = checkpoint_name
        _, listed = checkpoint_index.read_index(directory)
        self._kept: list[Path] = ([p for p in listed if has_version_layout(p)] if listed
                                  else checkpoint_index.numbered(directory, checkpoint_name))

    def save(self, checkpoint_number: int | None = None) -> str:
        """Writes a new save, deletes those beyond ``max_to_keep``; returns its path.

        Args:
            checkpoint_number: the save's number (e.g. the global step); ``None``: the
                checkpoint's `Checkpoint.save_counter`, which every save advances.

        Raises:
            ValueError: for an unbuilt model, or if the path exists and is not a save.
            CheckpointWriteError: naming ``directory``, if the write fails.
        """
        counter = int(self.checkpoint.save_counter) + 1
        number = counter if checkpoint_number is None else int(checkpoint_number)
        written = Path(self.directory) / f"{self.checkpoint_name}-{number}"
        path = self.checkpoint._write(written, "directory", counter)
        self.checkpoint.save_counter.assign(counter)
        self._kept = [p for p in self._kept if p.absolute() != written.absolute()] + [written]
        if self.max_to_keep is not None:
            stale, self._kept = self._kept[:-self.max_to_keep], self._kept[-self.max_to_keep:]
            if jax.process_index() == 0:
                for old in filter(has_version_layout, stale):
                    shutil.rmtree(old, ignore_errors=True)
        checkpoint_index.write_index(self.directory, written, self._kept)
        from_chief(0)  # nobody reads the directory while the chief still writes it
        return path

    @property
    def checkpoints(self) -> list[str]:
        """The kept saves' paths, oldest first."""
        return [os.fspath(p) for p in self._kept]

    @property
    def latest_checkpoint(self) -> str | None:
        """The newest save's path, or ``None``."""
        return os.fspath(self._kept[-1]) if self._kept else None


def latest_checkpoint(checkpoint_dir: str | os.PathLike) -> str | None:
    """The newest complete save in ``checkpoint_dir``, or ``None``, as
    ``tf.train.latest_checkpoint``.

    Read from the directory's ``checkpoint`` index (written by `Checkpoint.save` and
    `CheckpointManager`); without one (e.g. a ``model.save_weights`` directory), the
    complete ``<prefix>-<n>`` with the highest ``n``.

    Example:
        >>> mf.latest_checkpoint("run/nothing_here") is None
        True
    """
    found = checkpoint_index.latest(checkpoint_dir)
    return None if found is None else os.fspath(found)
