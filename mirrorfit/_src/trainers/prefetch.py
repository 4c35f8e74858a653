"""`prefetch`: a background thread that prepares and places the next global batches.

While the current step runs on the devices, the thread pulls the next host batches from the
data adapter (running the user's generator, ``__getitem__`` or loader) and places them on
the mesh, keeping at most `DEPTH` placed batches ready. Batches arrive in the order the
adapter yields them, so results are the same as without the thread. An exception in the
thread is re-raised in the caller, with its original traceback, when the caller reaches the
batch that failed. Placement is a host-to-device copy, not a collective, so it does not add
to the two device calls a loop may have queued (`mirrorfit._src.distribute.mesh.InFlight`).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import Any, Self

DEPTH = 2
"""Placed batches kept ready ahead of the step."""

_END = object()


class Prefetcher(Iterator[Any]):
    """Iterates ``source`` on a daemon thread, ``depth`` items ahead of the caller.

    Use it as a context manager (or call `close`): closing stops the thread and waits for
    it, so the source is never advanced by two threads at once.

    Args:
        source: the iterator to run ahead (e.g. placed batches of one epoch).
        depth: items kept ready.
    """

    def __init__(self, source: Iterator[Any], depth: int = DEPTH):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._produce, args=(source,),
                                        name="mirrorfit-prefetch", daemon=True)
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, source: Iterator[Any]) -> None:
        try:
            for item in source:
                if not self._put((item, None)):
                    return
            self._put((_END, None))
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller
            self._put((_END, error))

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        item, error = self._queue.get()
        if item is _END:
            self._done = True
            self._thread.join()
            if error is not None:
                raise error  # keeps the producer's frames in error.__traceback__
            raise StopIteration
        return item

    def close(self) -> None:
        """Stops the thread (dropping batches it prepared) and waits for it to end."""
        self._done = True
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def prefetch(source: Generator[Any, None, None], enabled: bool = True
             ) -> Prefetcher | Generator[Any, None, None]:
    """``source`` run ahead on a `Prefetcher` thread, or ``source`` itself if not ``enabled``."""
    return Prefetcher(source) if enabled else source
