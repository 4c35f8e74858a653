"""One worker's uncaught exception ends the whole multi-process job within seconds.

Left alone, a worker that raises prints its traceback and then waits in JAX's shutdown
barrier, while the other workers wait in their next collective, until the heartbeat timeout
(100 s by default) aborts every process with a flood of C++ log lines. This module installs,
on each process of a `MultiWorkerMirroredStrategy` job:

* a ``sys.excepthook`` that prints the traceback as usual, records the failure in JAX's
  coordination service (key ``mirrorfit/failed``) and leaves with ``os._exit(1)`` (no
  shutdown barrier);
* a watchdog thread that polls that key every `POLL_SECONDS` and, when a peer has failed,
  prints one line naming it and leaves with `PEER_FAILED_EXIT_CODE`.

`failed_peer` reads that key for code that must tell a peer's death from its own fault: a
checkpoint restore cut short by a dead peer raises `PeerFailedError`, not "damaged" (which
would delete a good backup), and the fail-fast line then names only the peer.

A process that dies without a Python exception (killed, out of memory) is not reported
here: on the CPU backend its peers' next gloo collective fails at once (its sockets close,
and the excepthook adds a line saying so); when process 0 dies, JAX's runtime aborts the
others at once; otherwise they stop after the heartbeat timeout.

Process 0 hosts the coordination service, so it leaves last: it waits (at most
`ACK_SECONDS`) until every other process has reported that it is stopping.

At a normal exit, an ``atexit`` hook (which runs before JAX's own) stops the watchdog and
waits until every process is exiting, like JAX's shutdown barrier, but leaves at once with
`PEER_FAILED_EXIT_CODE` if a process fails meanwhile (e.g. the chief finished, and a worker
raised in its last lines).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PEER_FAILED_EXIT_CODE = 75  # sysexits' EX_TEMPFAIL: stopped because another process failed
POLL_SECONDS = 0.25  # how often each process checks for a failed peer
ACK_SECONDS = 3.0  # how long a failing process waits for the others to notice
_FAILED_KEY = "mirrorfit/failed"
# A gloo collective whose peer process is gone (on loopback: at once).
_LOST_PEER = re.compile(r"Gloo .*(Connection closed by peer|Connection reset by peer)")
_STOPPED_DIR = "mirrorfit/stopped/"  # processes stopping because a peer failed
_EXITING_DIR = "mirrorfit/exiting/"  # processes at a normal exit


class PeerFailedError(RuntimeError):
    """This process's operation failed because another process of the job failed first (its
    error, e.g. a checkpoint restore cut short at orbax's barrier, says nothing of the files)."""


def _describe(value: str) -> str:
    """The failure record ``"<process id> <exit code>[ lost]"`` in words."""
    rank, _, rest = value.partition(" ")
    code, _, lost = rest.partition(" ")
    if lost:
        return (f"process {rank} lost its connection to another process of the job, which "
                f"died without a Python traceback (killed, out of memory, or a crash; see the "
                f"output of the process that is missing)")
    return f"process {rank} of the job failed with exit code {code} (see its traceback)"


class _Watch:
    """The failure hooks of one process (one per process, made by `install`)."""

    def __init__(self, client: Any, process_id: int, num_processes: int, exit_timeout: float,
                 before_exit: Callable[[], None]):
        self.client, self.process_id, self.num_processes = client, process_id, num_processes
        self.exit_timeout = exit_timeout
        self.before_exit = before_exit
        self.stopped = threading.Event()
        self.leaving = threading.Event()  # `leave` ends the process from another thread
        self.previous_hook = sys.excepthook
        self.thread = threading.Thread(target=self._watch, name="mirrorfit-failfast",
                                       daemon=True)

    def _failure(self) -> str | None:
        """The failure record ``"<process id> <exit code>"`` (with ``" lost"`` when that process
        only lost a peer that died without a traceback), or None if no process failed."""
        try:
            return self.client.key_value_try_get(_FAILED_KEY)
        except Exception:  # noqa: BLE001 - NOT_FOUND; the runtime raises one error type
            return None

    def _leave(self, code: int, acks_needed: int = 0) -> None:
        """Exits with ``code``; process 0 first waits for ``acks_needed`` peers to stop.

        Process 0 hosts the coordination service, so it leaves last: a process that loses
        the service while still running is aborted by JAX's C++ runtime.
        """
        deadline = time.monotonic() + ACK_SECONDS
        while self.process_id == 0 and acks_needed and time.monotonic() < deadline:
            try:
                if len(self.client.key_value_dir_get(_STOPPED_DIR)) >= acks_needed:
                    break
            except Exception:  # noqa: BLE001 - the service is gone: nobody left to wait for
                break
            time.sleep(POLL_SECONDS / 5)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        self.before_exit()
        os._exit(code)

    def excepthook(self, exc_type, exc, tb) -> None:
        """Prints the traceback, tells the other processes, and leaves without the barrier."""
        if self.leaving.is_set():  # an echo of the job ending (a collective cut short)
            threading.Event().wait()  # `leave` exits the process from its thread
        self.stopped.set()
        peer = self._failure()
        if peer is not None:  # this error is the echo of a peer's failure (a closed socket)
            echo = not str(exc) or issubclass(exc_type, PeerFailedError)  # says it already
            self._peer_failed(peer, "" if echo else
                              f" Here: {exc_type.__name__}: {str(exc).splitlines()[0]}")
        self.previous_hook(exc_type, exc, tb)
        lost_peer = bool(_LOST_PEER.search(str(exc)))
        if lost_peer:
            print(f"mirrorfit: process {self.process_id} lost its connection to another "
                  f"process of the job during a collective: that process died without a "
                  f"Python traceback (killed, out of memory, or a crash); see its output.",
                  file=sys.stderr, flush=True)
        code = 130 if issubclass(exc_type, KeyboardInterrupt) else 1
        with contextlib.suppress(Exception):  # another process failed first, or no service
            # " lost": this process only reports a peer that died without a traceback.
            self.client.key_value_set(_FAILED_KEY, f"{self.process_id} {code}"
                                      + (" lost" if lost_peer else ""))
        # A lost peer is dead and never acknowledges: waiting for it would only let the
        # heartbeat timeout abort this process.
        self._leave(code, acks_needed=self.num_processes - 1 - lost_peer)

    def _peer_failed(self, value: str, detail: str = "") -> None:
        print(f"mirrorfit: {_describe(value)}; stopping process {self.process_id} with exit code "
              f"{PEER_FAILED_EXIT_CODE}.{detail}", file=sys.stderr, flush=True)
        if self.process_id != 0:
            with contextlib.suppress(Exception):  # best effort: process 0 waits ACK_SECONDS
                self.client.key_value_set(f"{_STOPPED_DIR}{self.process_id}", "1")
        self._leave(PEER_FAILED_EXIT_CODE, acks_needed=self.num_processes - 2)

    def _watch(self) -> None:
        while not self.stopped.wait(POLL_SECONDS):
            failure = self._failure()
            if failure is not None:
                if not self.stopped.is_set():
                    self._peer_failed(failure)
                return

    def at_exit(self) -> None:
        """A normal exit: waits until every process is exiting, leaving at once if one fails.

        JAX's shutdown barrier (which runs next) would wait ``exit_timeout`` for a process
        that failed meanwhile; this barrier watches the failure key instead.
        """
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2 * POLL_SECONDS + 1)
        try:
            self.client.key_value_set(f"{_EXITING_DIR}{self.process_id}", "1")
        except Exception:  # noqa: BLE001 - no service: nothing to wait for
            return
        deadline = time.monotonic() + self.exit_timeout
        while time.monotonic() < deadline:
            try:
                if len(self.client.key_value_dir_get(_EXITING_DIR)) >= self.num_processes:
                    return
            except Exception:  # noqa: BLE001 - the service is gone: nothing to wait for
                return
            failure = self._failure()
            if failure is not None:
                self._peer_failed(failure)
            time.sleep(POLL_SECONDS / 5)


_installed: _Watch | None = None


def begin_leaving() -> None:
    """Marks this process as leaving the job (call `leave` soon): from now on, an uncaught
    exception in another thread (e.g. a collective cut short as the others exit) is not
    reported, and the failure watcher stops."""
    if _installed is not None:
        _installed.leaving.set()
        _installed.stopped.set()


def leave(code: int) -> None:
    """Exits this process with ``code`` now, as the fail-fast hooks do (no shutdown barrier).

    For a decision every process takes (e.g. the stuck-rank watchdog's): a process other
    than 0 records that it is stopping; process 0, which hosts the coordination service,
    waits for the others (at most `ACK_SECONDS`). An exception that the job's end raises
    meanwhile in another thread is not reported. Without `install`, exits at once.
    """
    watch = _installed
    if watch is None:
        os._exit(code)
    begin_leaving()
    if watch.process_id != 0:
        with contextlib.suppress(Exception):  # best effort: process 0 waits ACK_SECONDS
            watch.client.key_value_set(f"{_STOPPED_DIR}{watch.process_id}", "1")
    watch._leave(code, acks_needed=watch.num_processes - 1)


def failed_peer() -> str | None:
    """Which process of this job failed and how, in words, if one did; else None.

    Read from the coordination service, where a failing process records itself before it
    exits; None outside a multi-process job (nothing `install` ed).
    """
    value = None if _installed is None else _installed._failure()
    return None if value is None else _describe(value)


def install(client: Any, process_id: int, num_processes: int, exit_timeout: float,
            before_exit: Callable[[], None] = lambda: None) -> None:
    """Makes an uncaught exception on this process end every process of the job quickly.

    Call once, after ``jax.distributed.initialize``; later calls do nothing.

    Args:
        client: ``jax._src.distributed.global_state.client``, the coordination service client.
        process_id: this process's index in ``[0, num_processes)``.
        num_processes: processes in the job.
        exit_timeout: seconds a normally exiting process waits for the others to exit too
            (JAX's ``shutdown_timeout``).
        before_exit: called right before ``os._exit`` (e.g. to flush an output relay).
    """
    global _installed
    if _installed is not None or num_processes == 1:
        return
    _installed = _Watch(client, process_id, num_processes, exit_timeout, before_exit)
    sys.excepthook = _installed.excepthook
    _installed.thread.start()
    atexit.register(_installed.at_exit)  # runs before JAX's shutdown (registered earlier)
