"""The stuck-rank watchdog: a multi-process job whose steps stop ends, naming who is behind.

A process that hangs while alive (a deadlocked input pipeline, a callback waiting on a
network share, a host callback that never returns) keeps its heartbeat, so JAX's runtime
never ends the job: every other process waits in its next collective, forever (the case of
jax-ml/jax#38503). On each process of a `MultiWorkerMirroredStrategy` job this module runs a
thread that:

* publishes this process's **completed steps** (train, evaluate and predict steps, counted at
  the end of each step's callbacks; `Progress`) in JAX's coordination service, key
  ``mirrorfit/progress/<process id>``, whenever the count changed, at most once per poll;
* when no step has completed for ``timeout`` seconds while a loop (``fit``, ``evaluate``,
  ``predict``) runs, records ``mirrorfit/stuck`` (the first process to notice wins);
* once that key is there (seen within a poll on every process, also by a process outside a
  loop): prints a line and this process's Python stacks (``faulthandler``, every thread),
  then one line naming the process(es) behind (fewer completed steps than the furthest; all
  processes equal means a step itself hangs, e.g. inside a collective or a host callback)
  and exits with `STUCK_EXIT_CODE` once every process has seen the verdict, process 0 last
  (it hosts the service; see `mirrorfit._src.distribute.multi_worker.failfast.leave`).

The timeout is `DEFAULT_TIMEOUT` (30 minutes, past any compile or checkpoint write), the
strategy's ``step_timeout`` argument, or ``$MIRRORFIT_STEP_TIMEOUT`` (seconds; ``0`` turns the
watchdog off). In an interactive session (IPython, Jupyter, ``python -i``), where a user may
pause a loop on purpose, it is off unless set. The cost per step is an increment and a clock
read on the main thread; the key-value writes happen on the watchdog's thread.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from mirrorfit._src.distribute.multi_worker import failfast

STUCK_EXIT_CODE = 124
"""Exit code of every process of a job the watchdog ended (as GNU ``timeout``'s)."""
DEFAULT_TIMEOUT = 1800.0
"""Seconds without a completed step before the job counts as stuck (30 minutes)."""
TIMEOUT_ENV = "MIRRORFIT_STEP_TIMEOUT"
"""Environment variable giving the timeout in seconds (``0``: off)."""
MAX_POLL_SECONDS = 1.0  # the thread's period (a quarter of the timeout when that is shorter)
SEEN_SECONDS = 5.0  # how long a process waits for every other to see the verdict
_PROGRESS_DIR = "mirrorfit/progress/"
_STUCK_KEY = "mirrorfit/stuck"
_SEEN_DIR = "mirrorfit/stuck_seen/"  # processes that saw the verdict


def interactive() -> bool:
    """Whether this is an interactive session (IPython/Jupyter kernel, ``python -i``, REPL)."""
    return bool(hasattr(sys, "ps1") or sys.flags.interactive or "IPython" in sys.modules)


def resolve_timeout(step_timeout: float | None) -> float | None:
    """The watchdog's timeout in seconds, or None when it is off.

    Args:
        step_timeout: the strategy's argument (seconds; ``0`` is off), or None for
            ``$MIRRORFIT_STEP_TIMEOUT``, else `DEFAULT_TIMEOUT` (off in an interactive session).

    Raises:
        ValueError: naming the argument or variable, for a negative or non-numeric value.
    """
    name, value = "step_timeout", step_timeout
    if value is None and os.environ.get(TIMEOUT_ENV, "").strip():
        name, value = TIMEOUT_ENV, os.environ[TIMEOUT_ENV]
    if value is None:
        return None if interactive() else DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if isinstance(value, bool) or not seconds >= 0:
        raise ValueError(f"{name} must be a number of seconds >= 0 (0 turns the stuck-rank "
                         f"watchdog off). Received: {name}={value!r}")
    return seconds or None


class Progress:
    """This process's completed steps and when a step or loop last began or ended.

    Written by the training loop's thread (through the callbacks), read by the watchdog's.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.steps = 0  # steps completed by every loop of this process, in total
        self.loops: set[str] = set()  # the running loops: "train", "test", "predict"
        self.changed = clock()  # when the last step completed or a loop began or ended

    def loop_begin(self, kind: str) -> None:
        """A ``fit`` (``"train"``), ``evaluate`` (``"test"``) or ``predict`` loop starts."""
        self.loops.add(kind)
        self.changed = self.clock()

    def loop_end(self, kind: str | None = None) -> None:
        """Loop ``kind`` ended (None: every loop, e.g. ``fit`` raised)."""
        if kind is None:
            self.loops.clear()
        else:
            self.loops.discard(kind)
        self.changed = self.clock()

    def step_done(self) -> None:
        """One more step completed (its callbacks included)."""
        self.steps += 1
        self.changed = self.clock()

    def stalled_for(self) -> float:
        """Seconds since the last completed step while a loop runs (0 outside loops)."""
        return self.clock() - self.changed if self.loops else 0.0


def _by_process(records: Iterable[tuple[str, str]], num_processes: int) -> dict[int, int]:
    steps = dict.fromkeys(range(num_processes), 0)
    steps.update({int(key.rsplit("/", 1)[1]): int(value) for key, value in records})
    return steps


def behind(records: Iterable[tuple[str, str]], num_processes: int) -> tuple[list[int], int]:
    """The processes behind the furthest one, and its completed steps.

    Args:
        records: ``(key, value)`` pairs of ``mirrorfit/progress/`` (``key_value_dir_get``);
            a process with no record has completed no step.
        num_processes: processes in the job.

    Returns:
        (process ids with fewer completed steps than the furthest, in order; its steps).
    """
    steps = _by_process(records, num_processes)
    furthest = max(steps.values())
    return [rank for rank, done in steps.items() if done < furthest], furthest


def verdict(records: Iterable[tuple[str, str]], num_processes: int, timeout: float) -> str:
    """The line naming the processes behind, from the progress ``records``."""
    records = list(records)
    late, furthest = behind(records, num_processes)
    steps = _by_process(records, num_processes)
    if not late:
        return (f"mirrorfit: the job is stuck: no step completed for {timeout:g} s, and every "
                f"process completed {furthest} steps, so none is behind: the next step hangs "
                "on every process (a collective waiting for a process stuck inside the step, "
                "a host callback, I/O). See each process's stacks above.")
    named = ", ".join(f"process {rank} ({_steps(steps[rank])})" for rank in late)
    return (f"mirrorfit: the job is stuck: no step completed for {timeout:g} s. Behind: "
            f"{named}; the furthest process completed {_steps(furthest)}. See the stacks "
            f"of process {late[0]} above for where it waits.")


def _steps(count: int) -> str:
    return f"{count} step" + ("" if count == 1 else "s")


class _Watchdog:
    """The watchdog thread of one process (made by `install`)."""

    def __init__(self, client: Any, process_id: int, num_processes: int,
                 timeout: float | None, leaving: Callable[[], None],
                 leave: Callable[[int], None]):
        self.client, self.process_id, self.num_processes = client, process_id, num_processes
        self.timeout, self.leaving, self.leave = timeout, leaving, leave
        self.progress = Progress()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="mirrorfit-watchdog",
                                       daemon=True)
        self._published: int | None = None

    def _declared(self) -> str | None:
        try:
            return self.client.key_value_try_get(_STUCK_KEY)
        except Exception:  # noqa: BLE001 - NOT_FOUND (or no service: nothing to watch)
            return None

    def poll(self) -> bool:
        """One round: publishes progress, declares a stall; True once the job is stuck."""
        steps = self.progress.steps
        if steps != self._published:
            self.client.key_value_set(f"{_PROGRESS_DIR}{self.process_id}", str(steps),
                                      allow_overwrite=True)
            self._published = steps
        if self._declared() is not None:
            return True
        if self.timeout is not None and self.progress.stalled_for() >= self.timeout:
            with contextlib.suppress(Exception):  # another process declared it first
                self.client.key_value_set(_STUCK_KEY, str(self.process_id))
            return True
        return False

    def _run(self) -> None:
        try:
            while not self.stopped.wait(min(MAX_POLL_SECONDS, (self.timeout or 4.0) / 4)):
                if self.poll():
                    break
            else:
                return
        except Exception:  # noqa: BLE001 - the service is gone: the job is ending anyway
            return
        self.end()

    def end(self) -> None:
        """Prints this process's stacks and the verdict, and leaves the job once every
        process has seen the verdict (at most `SEEN_SECONDS`): one that left earlier would
        cut the others' collectives short before they could print theirs."""
        self.leaving()
        with contextlib.suppress(Exception):  # no service: nobody to tell
            self.client.key_value_set(f"{_SEEN_DIR}{self.process_id}", "1")
        timeout = self.timeout if self.timeout is not None else DEFAULT_TIMEOUT
        print(f"mirrorfit: watchdog: the job made no progress for {timeout:g} s (process "
              f"{self._declared()} noticed first); the Python stacks of process "
              f"{self.process_id}:", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        try:
            records = self.client.key_value_dir_get(_PROGRESS_DIR)
        except Exception:  # noqa: BLE001 - the service is gone
            records = []
        print(f"{verdict(records, self.num_processes, timeout)} Stopping process "
              f"{self.process_id} with exit code {STUCK_EXIT_CODE}.", file=sys.stderr,
              flush=True)
        deadline = time.monotonic() + SEEN_SECONDS
        while time.monotonic() < deadline:
            try:
                if len(self.client.key_value_dir_get(_SEEN_DIR)) >= self.num_processes:
                    break
            except Exception:  # noqa: BLE001 - the service is gone: nobody left to wait for
                break
            time.sleep(0.05)
        self.leave(STUCK_EXIT_CODE)


_installed: _Watchdog | None = None


def install(client: Any, process_id: int, num_processes: int, timeout: float | None) -> None:
    """Starts this process's watchdog (once; a later call only sets ``timeout``).

    Args:
        client: ``jax._src.distributed.global_state.client``, the coordination service client.
        process_id: this process's index in ``[0, num_processes)``.
        num_processes: processes in the job (1: nothing is installed).
        timeout: seconds without a completed step (`resolve_timeout`); None: only publish
            progress and follow another process's verdict.
    """
    global _installed
    if _installed is not None:
        _installed.timeout = timeout
        return
    if num_processes == 1:
        return
    _installed = _Watchdog(client, process_id, num_processes, timeout, failfast.begin_leaving,
                           failfast.leave)
    _installed.thread.start()


def progress() -> Progress | None:
    """This process's `Progress`, which the loops' callbacks update; None without a job."""
    return None if _installed is None else _installed.progress
