"""A failed checkpoint restore, reported once: the damaged array named, orbax's noise dropped.

Orbax restores a checkpoint's arrays concurrently (``asyncio.gather`` over tensorstore
reads) in an event loop of its own. When one read fails, orbax raises at once and closes
that loop while the other reads are still in flight; as each of them completes, tensorstore
calls back into the closed loop, and Python prints an unraisable ``RuntimeError: Event loop
is closed`` traceback for every one (hundreds for a large model, on every process).

mirrorfit cannot reach those pending reads, and checking every array before each restore
would read a good checkpoint twice. So the happy path is left alone, and only a failed
restore does more:

* `quiet_closed_loop` drops exactly that unraisable error (a ``RuntimeError`` whose message
  is "Event loop is closed", raised inside ``asyncio``) while a restore runs, and, once a
  restore failed, for the rest of the process (the abandoned reads complete when they
  will); any other unraisable error goes to the previous ``sys.unraisablehook``. The
  abandoned reads that fail themselves are logged by ``asyncio`` ("Future exception was
  never retrieved"): a filter on its logger drops those that name the failed checkpoint's
  files, and only those;
* `explain` first asks whether another process of the job failed (`failfast.failed_peer`):
  then orbax failed at its barrier or a read cut short, the files are not at fault, and
  `PeerFailedError` names that process (a "damaged" error would make `BackupAndRestore`
  delete a good backup). Otherwise `first_damaged` reads the arrays one at a time, with tensorstore and no event loop,
  until one fails, so the error names the array at fault. The reads are sequential and stop
  at the first failure: bounded by one read of the checkpoint, on the error path only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import tensorstore as ts

from mirrorfit._src.distribute.multi_worker import failfast

CLOSED_LOOP = "Event loop is closed"
"""Message of the error a read that outlived orbax's event loop raises on completing."""

_hook_lock = threading.Lock()
_KEPT = "_mirrorfit_kept"  # attribute of a filter hook that stays for good (a failed restore)


def _is_closed_loop_noise(unraisable: Any) -> bool:
    error = unraisable.exc_value
    if not isinstance(error, RuntimeError) or str(error) != CLOSED_LOOP:
        return False
    tb = unraisable.exc_traceback
    while tb is not None:
        if "asyncio" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


_NEVER_RETRIEVED = ("Future exception was never retrieved", "Task exception was never retrieved")


class _AbandonedReads(logging.Filter):
    """Drops ``asyncio`` 's "exception was never retrieved" records of reads of the
    checkpoints in ``paths`` (whose restore failed or runs); every other record passes."""

    def __init__(self) -> None:
        super().__init__()
        self.paths: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith(_NEVER_RETRIEVED)
                    and any(path in text for path in self.paths))


_abandoned_reads = _AbandonedReads()
logging.getLogger("asyncio").addFilter(_abandoned_reads)


@contextlib.contextmanager
def quiet_closed_loop(version: str | os.PathLike[str] = "") -> Iterator[None]:
    """Drops the "Event loop is closed" unraisable errors of orbax's abandoned reads.

    Inside the block, and for the rest of the process once the block raised (the abandoned
    reads may complete at any later time), that one error raised inside ``asyncio`` is
    dropped; every other unraisable error reaches the hook that was there before. A block
    that completes removes the filter again (unless a later hook replaced it meanwhile); a
    kept filter that a later hook replaced is installed again by the next block.

    Args:
        version: the checkpoint being restored: ``asyncio`` 's log records of its abandoned
            reads are dropped while the block runs, and for good once it raised.
    """
    path = os.fspath(version)
    with _hook_lock:
        previous = sys.unraisablehook

        def hook(unraisable: Any) -> None:
            if not _is_closed_loop_noise(unraisable):
                previous(unraisable)

        if getattr(previous, _KEPT, False):
            hook = previous  # type: ignore[assignment]  # a kept filter is already in place
        else:
            sys.unraisablehook = hook
    if path:
        _abandoned_reads.paths.add(path)
    try:
        yield
    except BaseException:
        with _hook_lock:
            if sys.unraisablehook is hook:
                setattr(hook, _KEPT, True)
        raise
    _abandoned_reads.paths.discard(path)
    with _hook_lock:
        if sys.unraisablehook is hook and not getattr(hook, _KEPT, False):
            sys.unraisablehook = previous  # someone else's later hook stays


def _spec(arrays_dir: Path, name: str, driver: str) -> dict[str, Any]:
    return {"driver": driver, "kvstore": {"driver": "ocdbt", "base": f"file://{arrays_dir}/",
                                           "path": name}}


def first_damaged(version: Path, paths: Sequence[Sequence[str]]) -> str | None:
    """The first array of ``version`` (in ``paths`` order) that cannot be read, or None.

    Args:
        version: a version directory (``<path>/ckpt-<n>``) whose ``arrays`` item orbax wrote
            (zarr arrays in an OCDBT store, named by their path segments joined with ``.``).
        paths: the arrays' path segments, as listed in the version's ``meta``.

    Returns:
        What cannot be read and why, for the error message: ``"array '<key>' cannot be read
        (<error>)"`` for the first array that fails (``key`` joined with ``/``, as in
        `mirrorfit._src.saving.checkpoint_format.flatten`), or the store's own index; None when
        every array reads (the damage is elsewhere, e.g. in orbax's own metadata).
    """
    arrays_dir = version / "arrays"
    try:
        keys = [key.decode() for key in ts.KvStore.open(
            {"driver": "ocdbt", "base": f"file://{arrays_dir}/"}).result().list().result()]
    except Exception as err:  # noqa: BLE001 - the store's own manifest is the damage
        return f"the index of its arrays cannot be read ({type(err).__name__}: {err})"
    for path in paths:
        name = ".".join(path)
        driver = "zarr3" if f"{name}/zarr.json" in keys else "zarr"
        try:
            ts.open(_spec(arrays_dir, name, driver), open=True).result().read().result()
        except Exception as err:  # noqa: BLE001 - any tensorstore error is damage here
            return f"array {'/'.join(path)!r} cannot be read ({type(err).__name__}: {err})"
    return None


def explain(version: Path, paths: Sequence[Sequence[str]], error: Exception) -> str:
    """Why restoring ``version`` failed with ``error``, for a "damaged" message.

    Args:
        version: the version directory that failed to restore.
        paths: its arrays' path segments, as listed in its ``meta`` ([] if unread).
        error: what orbax raised.

    Returns:
        The array or index at fault (`first_damaged`), else ``error`` itself in words.

    Raises:
        PeerFailedError: naming ``version`` and the failed process, if another process of
            the job failed (the checkpoint is then not called damaged).
    """
    peer = failfast.failed_peer()
    if peer is not None:
        raise failfast.PeerFailedError(
            f"Could not load the checkpoint {str(version)!r}: {peer}. The checkpoint was not "
            "found damaged and nothing was deleted; restart the job. Here: "
            f"{type(error).__name__}: {error}") from error
    return first_damaged(version, paths) or f"{type(error).__name__}: {error}"
