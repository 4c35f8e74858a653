"""The gradient check that ``fit`` runs with `TerminateOnNaN`.

This module owns when the check is on (`wants_check_numerics`), how the host reads its flag
(`non_finite_seen`) and the line printed when it stops training (`NON_FINITE_GRADIENTS`).
The check itself is in the one optimizer update (`mirrorfit._src.optimizers.update`), which
every form of train step runs: ``fit`` picks a train step built with ``check_numerics``
(`StepLoops.train_step_for`, a flag of the step, compiled apart; compile's configuration is
unchanged), whose replica context turns the check on; an update whose gradients are not all
finite on some replica is not applied and is counted in the step's statistics. Off, the step
is the same program as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from mirrorfit._src.callbacks.stopping import TerminateOnNaN
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.step_family import StepConfig

NON_FINITE_GRADIENTS = (
    "Epoch {epoch}, batch {batch}: non-finite gradients (NaN or inf) although the loss may be "
    "finite; the update was not applied, so the weights are those before this batch. "
    "Terminating training (TerminateOnNaN).")
"""Printed (chief) when ``fit`` with TerminateOnNaN stops at a non-finite gradient."""


def wants_check_numerics(callbacks: Iterable[Any], config: StepConfig) -> bool:
    """Whether ``fit`` checks gradients in the step: with a `TerminateOnNaN` among
    ``callbacks``, and not under loss scaling (which skips non-finite steps and lowers its
    scale instead)."""
    return (any(isinstance(cb, TerminateOnNaN) for cb in callbacks)
            and not isinstance(config.optimizer, LossScaleOptimizer))


def non_finite_seen(layout: stats_lib.StatsLayout, statistics: np.ndarray) -> bool:
    """Whether a train step of this epoch had non-finite gradients.

    Args:
        layout: the train statistics' layout.
        statistics: the epoch's statistics vector, on the host.
    """
    return float(layout.unflatten(statistics).get(stats_lib.NON_FINITE, 0.0)) > 0


def stop_message(epoch: int, done: int, group: int) -> str:
    """`NON_FINITE_GRADIENTS` for the (0-based) ``epoch`` after ``done`` batches run
    ``group`` at a time: the batch, or the range of the group it was in."""
    batch = done - 1 if group == 1 else f"in {done - min(group, done)}..{done - 1}"
    return NON_FINITE_GRADIENTS.format(epoch=epoch + 1, batch=batch)
