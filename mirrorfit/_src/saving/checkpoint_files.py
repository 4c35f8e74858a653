"""What mirrorfit owns in a checkpoint directory, and how a failed write is reported.

A checkpoint directory holds versions ``ckpt-<n>`` (see `mirrorfit._src.saving.checkpoint`) and,
after a crash mid-save, orbax's temporary ``ckpt-<n>.orbax-checkpoint-tmp`` directories.
Those are the only entries mirrorfit may delete: anything else in the directory is the
user's. Write failures (a full disk, no permission, a file where the directory should be)
become `CheckpointWriteError` s that name the caller's argument and the fix.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

VERSION_PREFIX = "ckpt"
"""A version directory is ``<VERSION_PREFIX>-<n>``."""
VERSION_NAME = re.compile(rf"{VERSION_PREFIX}-(\d+)")
"""Name of a complete version directory; group 1 is its number."""
TMP_SUFFIX = ".orbax-checkpoint-tmp"
"""Suffix orbax gives a version while it is written (renamed away once complete)."""
_LAYOUT = frozenset({"arrays", "meta", "_CHECKPOINT_METADATA", "commit_success.txt"})
"""Everything a mirrorfit save (through orbax) puts in a version directory."""


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed (full disk, no permission); earlier versions are intact."""


def has_version_layout(path: str | os.PathLike) -> bool:
    """Whether directory ``path`` holds what a mirrorfit save writes (orbax items, ``meta``),
    whatever its name (``mf.Checkpoint.write`` chooses any name)."""
    path = Path(path)
    if not path.is_dir():
        return False
    names = {p.name for p in path.iterdir()}
    return "meta" in names and names <= _LAYOUT


def written_by_mirrorfit(version: str | os.PathLike) -> bool:
    """Whether ``version`` has the layout `save` writes (``ckpt-<n>`` with orbax items).

    Only such a directory may be deleted as damaged: anything else may be the user's.
    """
    return bool(VERSION_NAME.fullmatch(Path(version).name)) and has_version_layout(version)


def is_partial(entry: Path) -> bool:
    """Whether ``entry`` is a version orbax was still writing (left by a crash or failure)."""
    return bool(VERSION_NAME.match(entry.name)) and TMP_SUFFIX in entry.name


def holds_checkpoints(path: str | os.PathLike) -> bool:
    """Whether directory ``path`` holds a version (or a half-written one) `save` wrote."""
    root = Path(path)
    return root.is_dir() and any(written_by_mirrorfit(p) or is_partial(p)
                                 for p in root.iterdir())


def remove_checkpoints(path: str | os.PathLike) -> None:
    """Deletes what `save` wrote under ``path``, then ``path`` itself if nothing else is left.

    Files and directories that are not mirrorfit versions (the user's) are left alone.
    """
    root = Path(path)
    if not root.is_dir():
        return
    for entry in root.iterdir():
        if written_by_mirrorfit(entry) or is_partial(entry):
            shutil.rmtree(entry, ignore_errors=True)
    if not any(root.iterdir()):
        root.rmdir()


def write_failure(err: BaseException) -> tuple[str, str, int] | None:
    """``(what went wrong, what to do, errno)`` for a storage failure, ``None`` otherwise.

    Looks through the exception chain: orbax re-raises tensorstore's ``RESOURCE_EXHAUSTED``
    (a ``ValueError`` without an errno) and Python's ``OSError`` s from its writer threads.
    The errno is the failure's own (28, ``ENOSPC``, for a full disk, also when tensorstore
    only says so in words), ``EIO`` when nothing says which.
    """
    seen: BaseException | None = err
    while seen is not None:
        text = str(seen)
        code = getattr(seen, "errno", None)
        if code in (errno.ENOSPC, errno.EDQUOT) or (
                "RESOURCE_EXHAUSTED" in text or "No space left" in text):
            code = code if code in (errno.ENOSPC, errno.EDQUOT) else errno.ENOSPC
            return (f"the disk is full ([Errno {code}] {os.strerror(code)})",
                    "Free disk space, or pass a {argument} on a disk with room.", code)
        if code in (errno.EACCES, errno.EPERM, errno.EROFS) or "PERMISSION_DENIED" in text:
            code = code or errno.EACCES
            what = ("the file system is read-only" if code == errno.EROFS
                    else "permission denied")
            return (f"{what} ([Errno {code}] {os.strerror(code)})",
                    "Pass a {argument} in a directory you can write to.", code)
        if isinstance(seen, OSError):
            return (os.strerror(seen.errno) if seen.errno else "the file system refused it",
                    "Check that {argument} is a directory you can write to.",
                    seen.errno or errno.EIO)
        seen = seen.__cause__ or seen.__context__
    return None


PATH_IS_A_FILE = (
    "{argument} must name a directory (mirrorfit checkpoints and backups are directories of "
    "ckpt-<n> versions), but {path!r} is an existing file. Choose a new directory name, e.g. "
    "{path!r} + '_ckpt', or move the file away. Received: {argument}={path!r}")
"""Error for a checkpoint path that is a file; used by every writer."""


def check_directory(root: Path, shown: str, argument: str) -> None:
    """Raises a ``ValueError`` naming ``argument`` if directory ``root`` is an existing file."""
    if root.exists() and not root.is_dir():
        raise ValueError(PATH_IS_A_FILE.format(argument=argument, path=shown))
