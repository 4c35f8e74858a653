"""What a callback may use of the trainer: the training loop's side of the callback contract.

The trainer (`mirrorfit._src.trainers.trainer.Trainer`) sits above the callbacks and
implements `TrainingLoop`; a callback reaches it as ``self.model.trainer`` and uses nothing
else of it. Through it a callback reads where ``fit`` is (`Progress`), what it trains on
and with (``fingerprints``, ``epoch_order``) and what one train step costs (`StepCost`),
and makes ``fit`` continue mid-epoch (`ResumePoint`), as
`mirrorfit.callbacks.BackupAndRestore` does. The model's side is
``Model.assign_state`` (its training state) and ``Model.save_checkpoint``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np


class Progress(NamedTuple):
    """Where training is after the newest step; `TrainingLoop.progress`, read by callbacks."""

    epoch: int  # current epoch (0-based)
    step: int  # train steps of ``epoch`` done (the newest state is after them)
    end_of_epoch: bool  # whether ``step`` is the epoch's last step
    statistics: Any  # float32 [size]: the epoch's metric statistics after ``step`` (a
    #                  mirrored device array that later steps do not change)


class ResumePoint(NamedTuple):
    """Where ``fit`` starts instead of ``initial_epoch``; see `TrainingLoop.resume_from`."""

    epoch: int  # epoch to resume (0-based)
    step: int  # train steps of ``epoch`` already done
    restore_statistics: Callable[[np.ndarray], np.ndarray] | None  # zero statistics (host,
    #                  float32 [size]) -> the restored ones; None: start from zeros


class StepCost(NamedTuple):
    """What one train step of the running ``fit`` processes and computes;
    `TrainingLoop.train_step_cost`, read by `mirrorfit.callbacks.ThroughputMonitor`."""

    global_batch_size: int  # rows of one train step over all replicas: the global batch,
    #                         padded up to a multiple of the replica count
    flops: float | None  # floating-point operations of one train step over all replicas,
    #                      XLA's cost-analysis estimate; None where the backend gives none


class ProgramTrap(NamedTuple):
    """A trap found in a train step's program (`TrainingLoop.audit_train_step`,
    ``mf.utils.audit_step``; the kinds are `mirrorfit._src.trainers.audit` 's)."""

    kind: str  # "logits_scatter", "half_scatter_add", "table_convert", "collective", "undonated"
    layer: str  # the layer's module path (e.g. "wte"), or the state leaf; "" if unknown
    message: str  # what was found and what to do


class TrainingLoop(Protocol):
    """The trainer as callbacks see it (``model.trainer``).

    Attributes:
        progress: `Progress` after the newest train step of ``fit``, set before each
            ``on_train_batch_end``; ``None`` outside ``fit``.
        steps_per_execution: train steps in one device call, so in one
            ``on_train_batch_begin``/``on_train_batch_end`` pair (``compile``'s
            ``steps_per_execution``).
    """

    progress: Progress | None
    steps_per_execution: int

    def resume_from(self, point: ResumePoint) -> None:
        """Makes the running ``fit`` start at ``point``; call it in ``on_train_begin``."""

    def fingerprints(self) -> dict[str, Any]:
        """The running ``fit`` 's fingerprints, JSON: ``{"data": ..., "compile": ...}``.

        ``data`` describes the training data (``None`` for an input that cannot be read
        twice), ``compile`` the optimizer, loss and metrics (``None`` before ``compile``);
        two runs with equal fingerprints train alike. Compare them with
        `mirrorfit._src.callbacks.fingerprint_check.differences`. Call it in ``fit``.
        """
        ...

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """int ``[num_examples]``: the order of the training rows in ``epoch`` of the running
        ``fit``; ``None`` when they are taken in order, or the input has no fixed order."""
        ...

    def train_step_cost(self) -> StepCost:
        """`StepCost` of one train step of the running ``fit``, from the compiled step.

        Call it in ``fit`` after the first train call has returned (``on_train_batch_end``
        or later); it reuses the compiled step, so it does not compile again. Calls cost a
        lowering each: call it once per ``fit``.
        """
        ...

    def audit_train_step(self, platform: str | None = None) -> list[ProgramTrap]:
        """The `ProgramTrap` s of the running ``fit`` 's train step lowered for ``platform``
        (``"cuda"`` works without a GPU; ``None``: the step's devices). Call it as
        `train_step_cost`; each call lowers the step again.
        """
        ...
