"""``compile``'s arguments resolved into the steps' configuration, as Keras'
``trainers/compile_utils``: optimizer, loss (one, or one per output with ``loss_weights``),
``metrics`` (weighted by the padding mask only) and ``weighted_metrics`` (also by
``sample_weight``), by name or object.
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.layers.graph.model_info import (
    freeze_non_trainable,
    list_output_names,
    weight_constraints,
)
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.optimizers import optimizers as optimizers_lib
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer
from mirrorfit._src.trainers import multi_output
from mirrorfit._src.trainers.step_family import StepConfig, StepFamily


class _Renamed:
    """A metric logged under another name (a weighted metric that shares an unweighted one's)."""

    def __init__(self, metric: Any, name: str):
        self.metric, self.name = metric, name
        self.update, self.result = metric.update, metric.result


def step_config(adapter: ModuleAdapter, optimizer: Any, loss: Any, metrics: Any = None, *,
                family: StepFamily, loss_weights: Any = None, weighted_metrics: Any = None,
                scale_loss: bool = False, require_loss: bool = True, module: Any) -> StepConfig:
    """The `StepConfig` for ``Model.compile(optimizer, loss, metrics, ...)``.

    ``family`` is the model's `StepFamily` (`model_hooks.step_family_for`).

    With ``scale_loss`` (``"mixed_float16"``), the optimizer is wrapped in a
    `LossScaleOptimizer` unless it is one already, as Keras' ``compile`` does.
    ``require_loss=False`` (a model with its own ``train_step``) accepts ``loss=None``.
    ``module`` is the model's Flax module: the params of its layers set to
    ``trainable = False`` get no updates (read from the module itself: under a
    mixed-precision policy ``adapter`` wraps it), and a functional model's list outputs are
    named by their layers (``loss={"cls": ...}``, logs ``cls_loss``), as Keras 3.

    Raises:
        ValueError: for a missing loss, an unknown name, per-output arguments that do not
            match the outputs, or two metrics with one log name.
        TypeError: for ``metrics`` that is not a list or dict, or objects of the wrong type.
    """
    if loss is None and require_loss:
        raise ValueError("compile needs a loss, e.g. loss=\"sparse_categorical_crossentropy\"."
                         " Received: loss=None")
    # Layers set to trainable=False before compile get no updates, as in Keras.
    tx = freeze_non_trainable(optimizers_lib.get(optimizer), module)
    if scale_loss and not isinstance(tx, LossScaleOptimizer):
        tx = LossScaleOptimizer(tx)
    names = list_output_names(module)  # a functional model's list outputs, by layer name
    keys = multi_output.loss_keys(loss, names)
    if loss is None:
        loss_fn = None
    elif keys is None:
        loss_fn = multi_output.scaled(multi_output.single_loss(loss), loss_weights)
    else:
        loss_fn = multi_output.MultiOutputLoss(loss, loss_weights, names)
    plain = multi_output.metric_objects(metrics, keys, "metrics", names)
    weighted = multi_output.metric_objects(weighted_metrics, keys, "weighted_metrics", names)
    names = [m.name for m in plain]
    weighted = tuple(_Renamed(m, f"weighted_{m.name}") if m.name in names else m
                     for m in weighted)
    names += [m.name for m in weighted]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:
        raise ValueError(f"Every metric needs its own log name; give the metrics distinct "
                         f"`name=`s. Received: metrics named {clashes} more than once")
    return StepConfig(adapter, loss_fn, plain, tx, weighted, family,
                      constrain=weight_constraints(module))
