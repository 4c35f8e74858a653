"""One writer per checkpoint directory: `DirectoryLock`.

Two writers on one checkpoint directory (two ``ModelCheckpoint`` s, a run started twice,
``save_weights`` into a directory a live run writes) delete each other's versions as stale.
A writer therefore holds the directory's lock while it writes: a hidden file beside the
directory, ``.<name>.mirrorfit-lock``, locked with ``fcntl.flock`` and holding a JSON record
of the holder (process id, host, since when, and the argument that named the directory). A
second writer fails at once with `DirectoryLockedError` naming the directory and the holder;
the first is not disturbed.

Why ``flock`` and not the ``filelock`` package: the kernel drops a ``flock`` when its
process dies (even by ``SIGKILL``), so a crashed run never leaves a lock that blocks its
restart, and the record in the same file names the holder, which ``filelock`` does not
offer. A record left by a process that no longer holds the lock (it crashed) is taken over
with a warning. The file lives beside the directory, not in it, so the directory holds only
checkpoints; it is deleted when the lock is released.

In a multi-process job only the chief (process 0) writes the directory's bookkeeping, so only
the chief locks; the others learn from it whether it succeeded. Where ``fcntl`` is missing
(Windows) or the lock file cannot be created (a read-only parent directory), writing goes on
unlocked.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Self

import jax

from mirrorfit._src.distribute.mesh import from_chief
from mirrorfit._src.utils.checks import MirrorfitWarning

try:
    import fcntl
except ImportError:  # Windows: no flock; writers are not locked
    fcntl = None

LOCK_SUFFIX = ".mirrorfit-lock"
"""Suffix of the lock file ``.<directory name>.mirrorfit-lock`` beside a directory."""

LOCKED = (
    "{argument} {path!r} is being written by another writer: {holder} holds its lock "
    "{lock!r}. Two writers on one checkpoint directory delete each other's versions, so this "
    "one was stopped before writing anything (the other run is unharmed). Wait for that run "
    "to end or stop it, or pass another directory. Received: {argument}={path!r}")
"""Error for a directory whose lock another writer holds."""

LOCKED_ON_CHIEF = (
    "{argument} {path!r} is being written by another writer (process 0 of this job could not "
    "lock it; its error names the holder). Received: {argument}={path!r}")
"""Error on the non-chief processes of a job whose chief could not lock the directory."""


class DirectoryLockedError(RuntimeError):
    """Another live writer holds the lock of a checkpoint directory."""


def lock_path(directory: str | os.PathLike) -> Path:
    """The lock file of ``directory``: ``.<name>.mirrorfit-lock`` in its parent."""
    root = Path(directory).resolve()
    return root.parent / f".{root.name}{LOCK_SUFFIX}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _describe(record: dict[str, Any] | None) -> str:
    if not record:
        return "an unknown process (its record is not written yet)"
    pid, host = record.get("pid"), record.get("host")
    mine = pid == os.getpid() and host == socket.gethostname()
    since = record.get("since")
    when = f" since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if isinstance(
        since, (int, float)) else ""
    who = f" ({record['argument']})" if record.get("argument") else ""
    return (f"process {pid} on host {host!r}{who}{when}"
            + (" (this process: another callback or object in it writes there)" if mine else ""))


def _read_record(fd: int) -> dict[str, Any] | None:
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    try:
        record = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _unlock(fd: int, path: str) -> None:
    """Deletes lock file ``path`` if it is still ``fd`` 's, then closes ``fd`` (the unlock)."""
    try:
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except OSError:
        pass
    finally:
        os.close(fd)


class DirectoryLock:
    """The write lock of one checkpoint directory, held from `acquire` to `release`.

    Args:
        directory: the checkpoint directory (it need not exist yet).
        argument: how the caller's user names ``directory`` in error messages
            (``"BackupAndRestore backup_dir"``).

    Example:
        >>> with DirectoryLock("run/ckpt", "path"):  # write run/ckpt in the block
        ...     try:
        ...         DirectoryLock("run/ckpt", "path").acquire()  # a second writer
        ...     except DirectoryLockedError as err:
        ...         print(str(err).split(":")[0])
        path 'run/ckpt' is being written by another writer
    """

    def __init__(self, directory: str | os.PathLike, argument: str = "path"):
        self.directory = Path(directory).resolve()
        self.shown = os.fspath(directory)
        self.argument = argument
        self._unlock: weakref.finalize | None = None  # releases at exit or when collected
        self._held = False

    @property
    def held(self) -> bool:
        """Whether this object holds the lock (on a non-chief process: the chief holds it)."""
        return self._held

    def acquire(self) -> Self:
        """Takes the lock, at once or not at all; idempotent. All processes of a job call it.

        Returns:
            ``self``.

        Raises:
            DirectoryLockedError: naming the directory and the holder (process id, host),
                if another writer holds the lock. Nothing is changed.
        """
        if self._held:
            return self
        error: DirectoryLockedError | None = None
        if jax.process_index() == 0:
            try:
                self._lock()
            except DirectoryLockedError as err:
                error = err
        if from_chief(0 if error else 1) == 0:
            raise error or DirectoryLockedError(LOCKED_ON_CHIEF.format(
                argument=self.argument, path=self.shown))
        self._held = True
        return self

    def _lock(self) -> None:
        if fcntl is None:
            return
        path = lock_path(self.directory)
        while True:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError:  # a read-only parent: write unlocked, the write reports its error
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = _describe(_read_record(fd))
                os.close(fd)
                raise DirectoryLockedError(LOCKED.format(
                    argument=self.argument, path=self.shown, holder=holder,
                    lock=os.fspath(path))) from None
            try:  # the holder may have released (and deleted the file) before we locked it
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        previous = _read_record(fd)
        if previous and (previous.get("pid"), previous.get("host")) != (
                os.getpid(), socket.gethostname()):
            pid, host = previous.get("pid"), previous.get("host")
            state = ("is no longer running" if host == socket.gethostname()
                     and isinstance(pid, int) and not _alive(pid) else "no longer holds it")
            warnings.warn(
                f"{self.argument} {self.shown!r}: taking over the lock left by process {pid} on "
                f"host {host!r}, which {state} (it ended without releasing it, e.g. it was "
                "killed). Its last checkpoint, if any, is kept.", MirrorfitWarning, stacklevel=4)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
                  "argument": self.argument, "directory": os.fspath(self.directory)}
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(record).encode())
        self._unlock = weakref.finalize(self, _unlock, fd, os.fspath(path))

    def release(self) -> None:
        """Gives the lock up and deletes the lock file; idempotent, never raises.

        A lock not released is released when the object is collected or Python exits.
        """
        self._held = False
        unlock, self._unlock = self._unlock, None
        if unlock is not None:
            unlock()

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
