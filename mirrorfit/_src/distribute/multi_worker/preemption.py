"""Preemption notices: every process of a job learns of a SIGTERM at the same step.

A scheduler that preempts a job (SLURM ``--signal=TERM@60``, Kubernetes' pod termination)
sends SIGTERM to one or more processes and kills them a grace period later. To save a
consistent backup, every process must stop at the **same** step, even when only one of
them got the signal. `PreemptionNotice` gives that answer at each step boundary:

* **one process** (no ``jax.distributed`` client): a Python SIGTERM handler, installed by
  `PreemptionNotice.install` and replaced by the previous handler in
  `PreemptionNotice.uninstall`, sets a flag; `PreemptionNotice.reached` reads it. The cost
  per step is one attribute read: no device or host synchronization.
* **several processes** (``jax.distributed`` initialized): JAX's preemption sync manager
  (``jax.experimental.multihost_utils.reached_preemption_sync_point``). JAX's runtime
  catches SIGTERM on any process, the coordination service tells every process, and they
  agree on the step ``max(step of every process) + 1``; ``reached`` is ``True`` on every
  process at that step and no other. Until a notice arrives each call is a local check (no
  network round trip), so no per-step synchronization is added to the training loop. No
  Python handler is installed then: it would hide the signal from JAX's runtime.

`PREEMPTED_EXIT_CODE` is the exit code of a process that saved its backup and stopped
because of a notice. It is neither 143 (``128 + SIGTERM``: what a process killed by the
signal before it could save reports) nor 75 (``PEER_FAILED_EXIT_CODE``), so a launcher or a
batch script can tell "saved, restart me" from "died".
"""

from __future__ import annotations

import signal
import threading
import warnings
from typing import Any

from mirrorfit._src.utils.checks import MirrorfitWarning

PREEMPTED_EXIT_CODE = 76
"""Exit code of a process that saved its backup after a preemption notice: restart it to
resume. Not 143 (``128 + SIGTERM``, a process the signal killed) nor 75 (a peer failed)."""
NO_SYNC_MANAGER = (
    "save_before_preemption=True in a multi-process job needs JAX's preemption sync manager, "
    "which jax.distributed.initialize starts unless the config 'jax_enable_preemption_service' "
    "is False. Set jax.config.update('jax_enable_preemption_service', True) before the "
    "strategy starts JAX, or pass save_before_preemption=False.")

NOT_MAIN_THREAD = (
    "save_before_preemption=True listens for SIGTERM with a signal handler, which Python "
    "allows only in the main thread; this fit runs in another thread, so a SIGTERM will not "
    "save a backup. Call fit from the main thread.")


def _distributed_state() -> Any:
    from jax._src import distributed  # jax only when a notice is armed

    return distributed.global_state


class PreemptionNotice:
    """Whether a preemption notice reached this job, asked at each step boundary.

    Example:
        A training loop asks at every step boundary, and saves and exits at the agreed one
        (``if notice.reached(step): save(); raise SystemExit(PREEMPTED_EXIT_CODE)``):

        >>> notice = PreemptionNotice()
        >>> notice.install()
        >>> notice.reached(0)  # no SIGTERM has come
        False
        >>> notice.uninstall()
    """

    def __init__(self) -> None:
        self._signalled = threading.Event()
        self._previous: Any = None
        self._installed = False
        self._sync_manager: Any = None

    @property
    def multi_process(self) -> bool:
        """Whether the answer comes from JAX's preemption sync manager (several processes)."""
        return self._sync_manager is not None

    def install(self) -> None:
        """Starts listening: the sync manager of several processes, or a SIGTERM handler.

        Raises:
            RuntimeError: in a multi-process job whose preemption sync manager is disabled.
        """
        state = _distributed_state()
        if state.client is not None:
            if state.preemption_sync_manager is None:
                raise RuntimeError(NO_SYNC_MANAGER)
            self._sync_manager = state.preemption_sync_manager
            return
        if threading.current_thread() is not threading.main_thread():
            warnings.warn(NOT_MAIN_THREAD, MirrorfitWarning, stacklevel=3)
            return  # signal handlers can only be set from the main thread
        self._signalled.clear()
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._installed = True

    def _on_sigterm(self, signum, frame) -> None:
        del signum, frame
        self._signalled.set()

    def reached(self, step: int) -> bool:
        """Whether every process should save now and stop.

        Args:
            step: a counter of step boundaries, the same on every process and increasing by
                one per call (JAX's sync manager agrees on one of its values).

        Returns:
            ``True`` at the agreed step after a notice, else ``False``.
        """
        if self._sync_manager is not None:
            return bool(self._sync_manager.reached_sync_point(step))
        return self._signalled.is_set()

    def uninstall(self) -> None:
        """Puts back the SIGTERM handler that was there before `install`."""
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False
        self._sync_manager = None
