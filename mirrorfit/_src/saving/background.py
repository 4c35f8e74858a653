"""Checkpoint writes in the background: one at a time, on a thread, errors never lost.

`save` takes a pytree already copied to the host in the caller's thread, once
(`mirrorfit._src.distribute.zero.host_copy`: a training step may donate and reuse the device
buffers at once, and no code changes the copy), and runs
`mirrorfit._src.saving.checkpoint.save` on a `BackgroundWriter` 's thread while training
goes on. The write itself is the synchronous one, so a background checkpoint is as
crash-safe as any other: orbax writes a temporary version and renames it into place, and
older versions are deleted only once it is complete.

A `BackgroundWriter` has at most one write in flight: the next `BackgroundWriter.submit`
first waits for the previous write. A failed write's error is raised by the next
`BackgroundWriter.wait` (the next save, or the end of ``fit``), naming the path.

A thread (rather than orbax's ``AsyncCheckpointer``) keeps mirrorfit's own steps of a save
(numbering the version, checksums, deleting old versions only after the new one is complete)
in one place, unchanged. In a multi-process job the write stays in the caller's thread:
it numbers the version with a collective, which must run in step order on every process.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax

from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving.checkpoint_files import CheckpointWriteError, check_directory
from mirrorfit._src.saving.directory_lock import DirectoryLock

write_hook: Callable[[str, str], None] | None = None
"""Called as ``write_hook(event, path)`` on the writer's thread, with event ``"start"``
before and ``"end"`` after each background write (for tests and tracing)."""


class BackgroundWriteError(RuntimeError):
    """A checkpoint write in the background failed (raised at the next save or ``fit``'s end)."""


class BackgroundWriter:
    """Runs checkpoint writes on a thread, one at a time; re-raises a failure in `wait`.

    Example:
        >>> writer = BackgroundWriter()
        >>> writer.submit(lambda: None, "ckpt", "filepath")
        >>> writer.wait()  # the write is done (and raised nothing)
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._where = ("", "")  # (argument, path) of the write in flight, for the message

    @property
    def in_flight(self) -> bool:
        """Whether a write is still running."""
        return self._thread is not None and self._thread.is_alive()

    def submit(self, write: Callable[[], Any], path: str, argument: str) -> None:
        """Waits for the previous write (raising its error), then starts ``write``.

        Args:
            write: the write to run on the thread (its result is dropped).
            path: where it writes, as the user named it (for error messages).
            argument: how the user names ``path`` (``"ModelCheckpoint filepath"``).

        Raises:
            BackgroundWriteError, CheckpointWriteError: as `wait`, for the previous write;
                then ``write`` is not started.
        """
        self.wait()
        self._where = (argument, path)
        self._thread = threading.Thread(target=self._run, args=(write, path), daemon=True,
                                        name="mirrorfit-checkpoint-writer")
        self._thread.start()

    def _run(self, write: Callable[[], Any], path: str) -> None:
        if write_hook is not None:
            write_hook("start", path)
        try:
            write()
        except BaseException as err:  # noqa: BLE001 - kept for `wait`, never lost
            self._error = err
        finally:
            if write_hook is not None:
                write_hook("end", path)

    def wait(self) -> None:
        """Waits for the write in flight, if any; raises its error once.

        Raises:
            CheckpointWriteError: the write's own error (a full disk, no permission), which
                names the argument, the path and the fix.
            BackgroundWriteError: any other error of the write, naming the argument and
                path, chained to it.
        """
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        if error is None:
            return
        if isinstance(error, CheckpointWriteError):
            raise error
        argument, path = self._where
        raise BackgroundWriteError(
            f"The checkpoint write in the background to {argument}={path!r} failed "
            f"({type(error).__name__}: {error}); that version was not completed, and the "
            "earlier versions there are intact. Fix the cause and save again, or pass "
            "save_on_background=False to save in the training thread, where the error "
            f"comes at once. Received: {argument}={path!r}") from error


def save(writer: BackgroundWriter, path: str | os.PathLike, host: Any,
         info: Mapping[str, Any] | None = None, *, keep: int = 1, argument: str = "path",
         lock: DirectoryLock | None = None) -> None:
    """`mirrorfit._src.saving.checkpoint.save` of ``host``, written on ``writer`` 's thread.

    ``host`` is the write's own copy, read on the thread while the caller goes on: a pytree
    of NumPy arrays that nothing changes, as `mirrorfit._src.distribute.zero.host_copy`
    returns (it is not copied again here). A multi-process job writes in this thread (see
    the module docstring). The other arguments as `mirrorfit._src.saving.checkpoint.save`.

    Raises:
        ValueError: naming ``argument``, if ``path`` is an existing file (checked here).
        BackgroundWriteError, CheckpointWriteError: for the previous background write
            (`BackgroundWriter.wait`); this one's errors come at the next call.
    """
    check_directory(Path(path).absolute(), os.fspath(path), argument)  # at once, as in a save
    if jax.process_count() > 1:
        writer.wait()
        checkpoint_lib.save(path, host, info, keep=keep, argument=argument, lock=lock)
        return
    writer.submit(lambda: checkpoint_lib.save(path, host, info, keep=keep, argument=argument,
                                              lock=lock), os.fspath(path), argument)



def wait_quietly(writer: BackgroundWriter | None, error: BaseException) -> None:
    """Waits for ``writer`` 's write while ``error`` ends ``fit``: a failure of the write
    is added to ``error`` as a note (kept, without hiding the error that ended ``fit``)."""
    if writer is None:
        return
    try:
        writer.wait()
    except Exception as failed:  # noqa: BLE001 - reported on the error that propagates
        error.add_note(f"Also, a checkpoint write in the background failed: {failed}")
