"""``compile``'s arguments resolved into the steps' configuration, as Keras'
``trainers/compile_utils``: optimizer, loss and metrics by name or object.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mirrorfit._src import losses as losses_lib
from mirrorfit._src import metrics as metrics_lib
from mirrorfit._src import optimizers as optimizers_lib
from mirrorfit._src.modules import ModuleAdapter
from mirrorfit._src.steps import StepConfig


def step_config(adapter: ModuleAdapter, optimizer: Any, loss: Any,
                metrics: Sequence[Any] | None, *, require_loss: bool = True) -> StepConfig:
    """The `StepConfig` for ``Model.compile(optimizer, loss, metrics)``.

    ``require_loss=False`` (a model with its own ``train_step``) accepts ``loss=None``.

    Raises:
        ValueError: for a missing loss or an unknown name.
        TypeError: for ``metrics`` that is not a list, or objects of the wrong type.
    """
    if loss is None and require_loss:
        raise ValueError("compile needs a loss, e.g. loss=\"sparse_categorical_crossentropy\"."
                         " Received: loss=None")
    tx = optimizers_lib.get(optimizer)
    loss_fn = None if loss is None else losses_lib.get(loss)
    if metrics is not None and (isinstance(metrics, (str, dict)) or not isinstance(
            metrics, Sequence)):
        raise TypeError("metrics must be a list, e.g. metrics=[\"accuracy\"]. "
                        f"Received: metrics={metrics!r}")
    metric_objs = tuple(metrics_lib.get(m) for m in (metrics or []))
    return StepConfig(adapter, loss_fn, metric_objs, tx)
