"""The steps' statistics: an epoch's running sums (sufficient statistics) as one vector.

A step computes its replica's sums (`compiled_statistics` for the loss and metrics given to
``compile``), flattens them into one float32 vector (`flatten`), all-reduces it as one
operand and adds it to the running ``statistics`` argument. `StatsLayout` says which entries
are whose; the host unflattens a snapshot and reads the logs (`compiled_results`) and the
warnings (`statistics_warnings`) from it.

Losses and metrics are sums over real rows (padding rows carry ``mask == False``), divided by
the sum of real-row counts only when read, so every result equals the single-device value
over the real examples. Under a model output's Keras mask, the loss sums unmasked element
losses and its count is the number of unmasked elements in real rows (Keras'
``sum(l * sample_weight * mask) / sum(mask)``, global over replicas).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.losses.losses import NOT_PROBABILITIES_WARNING
from mirrorfit._src.metrics.reduction_metrics import MeanMetricWrapper
from mirrorfit._src.optimizers.loss_scale import MIN_LOSS_SCALE, LossScaleOptimizer
from mirrorfit._src.trainers import input_checks
from mirrorfit._src.trainers.multi_output import OutputMetric, select
from mirrorfit._src.trainers.step_family import StepConfig

NOT_PROBABILITIES = "_not_probabilities"
"""Statistics key: count of examples whose outputs were not probabilities."""
NON_FINITE = "_non_finite"
"""Statistics key (loss scaling, or ``StepConfig.check_numerics``): replicas whose gradients
were not all finite, summed."""
LOSS_SCALE = "_loss_scale"
"""Statistics key (loss scaling): the loss scale after the newest train step (not a sum)."""
SKIPPED_AT_FLOOR = "_skipped_at_floor"
"""Statistics key (loss scaling): train steps skipped for non-finite gradients while the loss
scale was already at its floor (`MIN_LOSS_SCALE`), counted once per step."""
LOSS_SCALE_FLOOR_WARNING = (
    "Training under the 'mixed_float16' policy skipped {count} step(s) for non-finite "
    "gradients with the loss scale already at its floor of {floor:g}: these gradients overflow "
    "float16 (or are NaN) whatever the scale, and the weights are not updated on such steps. "
    "Lower the learning rate, normalize the inputs, clip the gradients, or use "
    "'mixed_bfloat16' or 'float32'.")
"""Warning (once per fit) when a train step was skipped at the loss scale's floor."""


def masked_sum(values: jax.Array, weight: jax.Array) -> jax.Array:
    """``sum(values * weight)`` over the rows whose weight is not 0 (float32 ``[]``).

    ``where``, not a multiply alone: a non-finite value on a padding row (weight 0) must not
    leak into the sum.

    Args:
        values: per-example values ``[batch]``.
        weight: per-example weights ``[batch]``, 0 on padding rows.
    """
    return jnp.sum(jnp.where(weight != 0, values * weight, 0.0))


def example_weights(batch: Batch) -> jax.Array:
    """Per-example weights float32 ``[batch]``: the sample weights (0 on padding rows), or
    the mask as floats when there are none."""
    if batch.sample_weight is None:
        return batch.mask.astype(jnp.float32)
    return batch.sample_weight


def loss_counts(batch: Batch, counts: jax.Array | None) -> jax.Array:
    """What each row adds to the loss's divisor: 1 per real row, or under an output mask
    its count of unmasked loss elements (`input_checks.masked_loss`); 0 on padding rows.

    Returns:
        The mask ``[batch]`` (bool) itself without ``counts``, else float32 ``[batch]``.
    """
    return batch.mask if counts is None else jnp.where(batch.mask, counts, 0.0)


def _metric_weight(metric: Any, weight: jax.Array, output_mask: Any) -> jax.Array:
    """``weight`` ``[batch]``, or times the output mask ``[batch, timesteps]`` for a metric
    that Keras masks (a `MeanMetricWrapper` such as ``accuracy``, whose update reads the
    output's ``_keras_mask``); a multi-output model's metric takes its own output's mask."""
    if isinstance(metric, OutputMetric) and output_mask is not None:
        output_mask = select(output_mask, metric.key)
    inner = getattr(metric, "metric", metric)  # a renamed weighted metric, an output's
    inner = getattr(inner, "metric", inner)
    if not isinstance(output_mask, jax.Array) or not isinstance(inner, MeanMetricWrapper):
        return weight
    mask = output_mask.astype(jnp.float32)
    return weight.reshape(weight.shape + (1,) * (mask.ndim - 1)) * mask


def compiled_statistics(cfg: StepConfig, y: Any, y_pred: Any, per_example_loss: jax.Array,
                        batch: Batch, extra_loss: jax.Array | None = None,
                        counts: jax.Array | None = None,
                        output_mask: Any = None, *, over_replicas: bool = True) -> dict:
    """One replica's sums for the compiled loss and every compiled metric (not all-reduced).

    Args:
        cfg: the compiled configuration (its loss, metrics and optimizer).
        y: this replica's targets ``[batch, ...]``.
        y_pred: this replica's outputs ``[batch, ...]``.
        per_example_loss: float ``[batch]``, summed with `example_weights`.
        batch: this replica's `Batch` (its mask and sample weights).
        extra_loss: float32 ``[]`` added to the loss sum as is (e.g. this replica's share of
            the sown losses, `mirrorfit._src.modules.sown_losses.share_of_sum`), or ``None``.
        counts: `loss_counts` under an output mask (the loss's divisor counts unmasked
            elements, not rows), or ``None``.
        output_mask: the output's Keras mask, bool ``[batch, timesteps]``, or ``None``: the
            `MeanMetricWrapper` metrics then weight each element (``accuracy`` counts
            unmasked steps only, as in Keras). For several outputs, their masks in the
            outputs' structure: each output's loss and metrics use its own.
        over_replicas: whether this runs per replica on the mesh (a masked output of a
            multi-output loss sums its divisor over the replicas); ``False`` for shapes
            only (`StepFamily.statistics_shapes`).

    Returns:
        ``{"loss": {"total", "count"}, <output>_loss..., <metric name>: stats..., ...}``.
    """
    weight = example_weights(batch)
    loss_total = masked_sum(per_example_loss, weight)
    if extra_loss is not None:
        loss_total = loss_total + extra_loss
    count = jnp.sum(batch.mask if counts is None else counts, dtype=jnp.float32)
    stats: dict[str, Any] = {"loss": {"total": loss_total, "count": count}}
    per_output = getattr(cfg.loss, "per_output", None)  # a multi-output model's losses
    rows = batch.mask if over_replicas else None
    for name, values in (per_output(y, y_pred, output_mask, rows) if per_output else {}).items():
        stats[name] = masked_sum(values, weight)
    mask = batch.mask.astype(jnp.float32)
    for metric in cfg.metrics:  # as Keras: `metrics` ignore sample_weight
        stats[metric.name] = metric.update(y, y_pred, _metric_weight(metric, mask, output_mask))
    for metric in cfg.weighted_metrics:
        stats[metric.name] = metric.update(y, y_pred,
                                           _metric_weight(metric, weight, output_mask))
    check = getattr(cfg.loss, "not_probabilities", None)
    flags = check(y_pred) if check is not None else None
    if flags is not None:
        stats[NOT_PROBABILITIES] = jnp.sum(jnp.logical_and(flags, batch.mask), dtype=jnp.float32)
    out_of_range = input_checks.label_range_statistic(cfg.loss, y, y_pred, batch.mask)
    if out_of_range is not None:
        stats[input_checks.LABELS_OUT_OF_RANGE] = out_of_range
    if isinstance(cfg.optimizer, LossScaleOptimizer):  # set by the train step; 0 elsewhere
        stats[NON_FINITE] = stats[LOSS_SCALE] = stats[SKIPPED_AT_FLOOR] = jnp.zeros(
            (), jnp.float32)
    elif getattr(cfg, "check_numerics", False):
        stats[NON_FINITE] = jnp.zeros((), jnp.float32)
    return stats


def compiled_results(cfg: StepConfig, stats: dict) -> dict[str, Any]:
    """Logs of `compiled_statistics` accumulated over steps, in Keras' order: ``loss``, each
    ``<output>_loss`` of a multi-output model, then each metric by name (and ``loss_scale``
    under loss scaling).

    Args:
        cfg: the compiled configuration.
        stats: the accumulated statistics, unflattened on the host (`StatsLayout.unflatten`).
    """
    loss = stats["loss"]
    count = max(float(loss["count"]), 1.0)
    logs = {"loss": loss["total"] / count}
    logs.update({name: stats[name] / count for name in getattr(cfg.loss, "loss_names", ())})
    for metric in (*cfg.metrics, *cfg.weighted_metrics):
        logs[metric.name] = metric.result(stats[metric.name])
    if stats.get(LOSS_SCALE, 0) > 0:  # train statistics under loss scaling
        logs["loss_scale"] = stats[LOSS_SCALE]
    return logs


def statistics_warnings(cfg: StepConfig, stats: dict) -> dict[str, str]:
    """Warnings that accumulated statistics call for, by statistics key (shown once per fit):
    outputs that were not probabilities, sparse labels outside the classes, train steps
    skipped with the loss scale at its floor."""
    found = {}
    if stats.get(SKIPPED_AT_FLOOR, 0) > 0:
        found[SKIPPED_AT_FLOOR] = LOSS_SCALE_FLOOR_WARNING.format(
            count=int(stats[SKIPPED_AT_FLOOR]), floor=MIN_LOSS_SCALE)
    if stats.get(NOT_PROBABILITIES, 0) > 0:
        name = getattr(cfg.loss, "name", type(cfg.loss).__name__)
        found[NOT_PROBABILITIES] = NOT_PROBABILITIES_WARNING.format(name=name)
    if input_checks.LABELS_OUT_OF_RANGE in stats:
        message = input_checks.label_range_warning(cfg.loss,
                                                   stats[input_checks.LABELS_OUT_OF_RANGE])
        if message is not None:
            found[input_checks.LABELS_OUT_OF_RANGE] = message
    return found


def flatten(stats: Any) -> tuple[jax.Array, Callable[[jax.Array], Any]]:
    """The statistics as one float32 vector in `StatsLayout` order, and its inverse.

    One vector is one operand of the all-reduce: XLA:CPU rendezvous once per operand, so
    every extra operand costs as much as a small all-reduce.
    """
    return ravel_pytree(jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float32), stats))


def flat_offset(stats: dict, key: str) -> int:
    """Where the top-level statistic ``key`` starts in `flatten`'s vector of ``stats``.

    Raises:
        KeyError: if ``stats`` has no top-level ``key``.
    """
    offset = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(stats)[0]:
        if path == (jax.tree_util.DictKey(key),):
            return offset
        offset += math.prod(np.shape(leaf))
    raise KeyError(key)


class StatsLayout(NamedTuple):
    """Where each statistic sits in the flat accumulator vector."""

    treedef: Any  # the statistics pytree's structure
    shapes: tuple[tuple[int, ...], ...]  # each leaf's shape, in `flatten` order

    @classmethod
    def from_shapes(cls, shapes: Any) -> StatsLayout:
        """The layout of statistics shaped like ``shapes`` (a pytree of arrays or
        ``jax.ShapeDtypeStruct`` s, e.g. `StepFamily.statistics_shapes`)."""
        leaves, treedef = jax.tree.flatten(shapes)
        return cls(treedef, tuple(tuple(leaf.shape) for leaf in leaves))

    @property
    def size(self) -> int:
        return sum(math.prod(shape) for shape in self.shapes)

    def unflatten(self, vector: np.ndarray) -> dict:
        """Host vector ``[size]`` -> the statistics pytree (NumPy leaves)."""
        leaves, start = [], 0
        for shape in self.shapes:
            stop = start + math.prod(shape)
            leaves.append(vector[start:stop].reshape(shape))
            start = stop
        return jax.tree.unflatten(self.treedef, leaves)
