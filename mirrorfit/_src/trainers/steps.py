"""Per-replica steps: pure functions that the strategy maps over the mesh.

Each step sees one replica's shard of the global batch and talks to the other replicas only
through collectives over the ``"batch"`` axis:

* ``train(state, statistics, batch) -> (state, statistics)``: forward, loss, ``jax.grad``,
  an all-reduce of the gradients, one optax update (identical on every replica);
* ``evaluate(state, statistics, batch) -> statistics``: forward in inference mode;
* ``predict(state, batch) -> y_pred``: forward in inference mode, rows stay sharded.

Every step takes a `Batch`. Padding rows carry ``mask == False``. Losses and metrics are
sums over real rows, ``lax.psum``'d across replicas and divided by the ``psum`` of real-row
counts, so every result equals the single-device value over the real examples.
``statistics`` holds the running sums (sufficient statistics) of the epoch as one float32
vector (`StatsLayout` says which entries are whose), all-reduced as one operand and added
with one operation. It is not donated: each step's ``statistics`` is a new array that later
steps leave alone, so the host can read it while they run. Metric values are computed from
it on the host, when they are read (`results`).

Every operation in a step runs once per replica, and on XLA:CPU each costs microseconds
however small its arrays, so the steps keep the compiled program short: one all-reduce with
one operand per gradient leaf plus one for all statistics, multiplies rather than divides
where XLA should fuse them into their consumers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.flatten_util import ravel_pytree

from mirrorfit._src.trainers import input_checks
from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer, all_finite
from mirrorfit._src.losses.losses import NOT_PROBABILITIES_WARNING
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.sown_losses import share_of_sum
from mirrorfit._src.trainers.state import TrainState, step_rng

NOT_PROBABILITIES = "_not_probabilities"
"""Statistics key: count of examples whose outputs were not probabilities."""
NON_FINITE = "_non_finite"
"""Statistics key (loss scaling): replicas whose gradients were not all finite, summed."""
LOSS_SCALE = "_loss_scale"
"""Statistics key (loss scaling): the loss scale after the newest train step (not a sum)."""


class StepConfig(NamedTuple):
    """What a step needs besides its arguments; fixed at ``compile``."""

    adapter: ModuleAdapter
    # (y_true, y_pred) -> per-example loss [batch]; None for a model with its own train_step
    loss: Callable[[Any, Any], jax.Array] | None
    metrics: Sequence[Any]  # mirrorfit.metrics.Metric objects, weighted by the mask only
    optimizer: optax.GradientTransformation
    weighted_metrics: Sequence[Any] = ()  # metrics weighted by sample_weight (and the mask)
    hooks: Any = None  # mirrorfit._src.trainers.model_hooks.StepHooks: a Model subclass's overrides


def _masked_sum(values: jax.Array, weight: jax.Array) -> jax.Array:
    # where, not multiply: a non-finite value on a padding row must not leak into the sum.
    return jnp.sum(jnp.where(weight != 0, values * weight, 0.0))


def _weight(batch: Batch) -> jax.Array:
    """Per-example weights ``[batch]``: the sample weights, or the mask when there are none."""
    if batch.sample_weight is None:
        return batch.mask.astype(jnp.float32)
    return batch.sample_weight


def _statistics(cfg: StepConfig, y, y_pred, per_example_loss, batch: Batch,
                extra_loss: jax.Array | None = None) -> dict:
    """Per-replica sums for the loss and every metric (not yet all-reduced).

    ``extra_loss`` is added to the loss sum as is (sown losses, see `share_of_sum`).
    """
    weight = _weight(batch)
    loss_total = _masked_sum(per_example_loss, weight)
    if extra_loss is not None:
        loss_total = loss_total + extra_loss
    stats: dict[str, Any] = {"loss": {"total": loss_total,
                                      "count": jnp.sum(batch.mask, dtype=jnp.float32)}}
    per_output = getattr(cfg.loss, "per_output", None)  # a multi-output model's losses
    for name, values in (per_output(y, y_pred) if per_output else {}).items():
        stats[name] = _masked_sum(values, weight)
    mask = batch.mask.astype(jnp.float32)
    for metric in cfg.metrics:  # as Keras: `metrics` ignore sample_weight
        stats[metric.name] = metric.update(y, y_pred, mask)
    for metric in cfg.weighted_metrics:
        stats[metric.name] = metric.update(y, y_pred, weight)
    check = getattr(cfg.loss, "not_probabilities", None)
    flags = check(y_pred) if check is not None else None
    if flags is not None:
        stats[NOT_PROBABILITIES] = jnp.sum(jnp.logical_and(flags, batch.mask), dtype=jnp.float32)
    out_of_range = input_checks.label_range_statistic(cfg.loss, y, y_pred, batch.mask)
    if out_of_range is not None:
        stats[input_checks.LABELS_OUT_OF_RANGE] = out_of_range
    if isinstance(cfg.optimizer, LossScaleOptimizer):  # set by the train step; 0 elsewhere
        stats[NON_FINITE] = stats[LOSS_SCALE] = jnp.zeros((), jnp.float32)
    return stats


def results(cfg: StepConfig, stats: dict, kind: str = "train") -> dict[str, Any]:
    """Metric values from accumulated statistics, in Keras' order: ``loss``, each
    ``<output>_loss`` of a multi-output model, then each metric by name.

    ``kind`` (``"train"`` or ``"eval"``) says which step produced them; it matters only for
    a model that overrides ``train_step`` or ``test_step`` (``cfg.hooks``).
    """
    if cfg.hooks is not None and cfg.hooks.results is not None:
        return cfg.hooks.results(cfg, stats, kind)
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
    outputs that were not probabilities, sparse labels outside the classes."""
    found = {}
    if stats.get(NOT_PROBABILITIES, 0) > 0:
        name = getattr(cfg.loss, "name", type(cfg.loss).__name__)
        found[NOT_PROBABILITIES] = NOT_PROBABILITIES_WARNING.format(name=name)
    if input_checks.LABELS_OUT_OF_RANGE in stats:
        message = input_checks.label_range_warning(cfg.loss,
                                                   stats[input_checks.LABELS_OUT_OF_RANGE])
        if message is not None:
            found[input_checks.LABELS_OUT_OF_RANGE] = message
    return found


def _flat(stats: dict) -> tuple[jax.Array, Callable[[jax.Array], dict]]:
    """The statistics as one float32 vector in `StatsLayout` order, and its inverse.

    One vector is one operand of the all-reduce: XLA:CPU rendezvous once per operand, so
    every extra operand costs as much as a small all-reduce.
    """
    return ravel_pytree(jax.tree.map(lambda leaf: jnp.asarray(leaf, jnp.float32), stats))


class StatsLayout(NamedTuple):
    """Where each statistic sits in the flat accumulator vector."""

    treedef: Any
    shapes: tuple[tuple[int, ...], ...]

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


def _index(stats: dict, key: str) -> int:
    """Where the top-level statistic ``key`` starts in `_flat`'s vector of ``stats``."""
    offset = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(stats)[0]:
        if path == (jax.tree_util.DictKey(key),):
            return offset
        offset += math.prod(np.shape(leaf))
    raise KeyError(key)


def _mean_model_state(model_state):
    """Averages float collections (e.g. batch_stats) across replicas so they stay mirrored."""
    return jax.tree.map(
        lambda v: lax.pmean(v, BATCH_AXIS) if jnp.issubdtype(v.dtype, jnp.inexact) else v,
        model_state,
    )


def make_train_step(cfg: StepConfig, *, skip_empty: bool = False) -> Callable:
    """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``.

    The gradient is ``psum_r(grad sum_i w_i l_i) / psum_r(n_r)`` over replicas ``r`` (rows
    ``i``, real-row counts ``n_r``): the gradient of the global batch's mean loss, exactly as
    on one device with the whole batch. Gradients, counts and metric statistics travel in
    one all-reduce. With ``skip_empty``, a batch with no real rows (filler at the end of a
    ``steps_per_execution`` group) leaves the state unchanged. Values the module sows into
    ``"losses"`` are added once (`share_of_sum`). A `Model` subclass that overrides
    ``compute_loss`` or ``train_step`` gets its own step (``cfg.hooks``).

    With a `LossScaleOptimizer`, the differentiated sum is multiplied by the loss scale over
    the global batch size (so the scale means what it means in Keras, which scales the mean
    loss), and
    each replica's "gradients not all finite" flag travels in the same all-reduce (one
    statistics entry). If any replica had a non-finite gradient, every replica skips the
    update: params, other collections and the inner optimizer state stay as they were, the
    scale halves (`LossScaleOptimizer.handle_non_finite_grads`) and ``step`` advances.
    """
    if cfg.hooks is not None and cfg.hooks.train is not None:
        return cfg.hooks.train(cfg, skip_empty)
    scaler = cfg.optimizer if isinstance(cfg.optimizer, LossScaleOptimizer) else None

    def step(state: TrainState, statistics: jax.Array, batch: Batch):
        rng = step_rng(state, lax.axis_index(BATCH_AXIS))
        # Keras scales the mean loss over the global batch (its rows, padding included).
        global_rows = batch.mask.shape[0] * lax.axis_size(BATCH_AXIS)

        def objective(params):
            y_pred, model_state, losses = cfg.adapter.apply_with_losses(
                params, state.model_state, batch.x, train=True, rng=rng
            )
            assert cfg.loss is not None  # compile requires a loss for the default steps
            per_example = input_checks.per_example_loss(cfg.loss, batch.y, y_pred)
            extra = share_of_sum(losses, batch.mask)
            total = _masked_sum(per_example, _weight(batch))
            if extra is not None:
                total = total + extra
            if scaler is not None:
                total = scaler.scale_loss(total * (1.0 / global_rows), state.opt_state)
            return total, (y_pred, per_example, model_state, extra)

        local_grads, (y_pred, per_example, model_state, extra) = jax.grad(
            objective, has_aux=True)(state.params)
        local_stats = _statistics(cfg, batch.y, y_pred, per_example, batch, extra)
        if scaler is not None:
            local_stats[NON_FINITE] = 1.0 - all_finite(local_grads).astype(jnp.float32)
        stats, unflatten = _flat(local_stats)
        grad_sum, stats = lax.psum((local_grads, stats), BATCH_AXIS)  # the all-reduce
        count = unflatten(stats)["loss"]["count"]
        model_state = _mean_model_state(model_state)

        def update(state: TrainState) -> TrainState:
            # A multiply, not a divide: XLA duplicates it into each consumer (the moment
            # updates), where a divide would be one more kernel per gradient leaf.
            scale = (1.0 if scaler is None else global_rows) / jnp.maximum(count, 1.0)
            grads = jax.tree.map(lambda g: g * scale, grad_sum)
            update_fn = cfg.optimizer.update if scaler is None else scaler.handle_finite_grads
            updates, opt_state = update_fn(grads, state.opt_state, state.params)
            return TrainState(
                params=optax.apply_updates(state.params, updates),
                model_state=model_state,
                opt_state=opt_state,
                step=state.step + 1,
                rng=state.rng,
            )

        def skip(state: TrainState) -> TrainState:  # a non-finite gradient on some replica
            assert scaler is not None  # only a LossScaleOptimizer skips
            return state._replace(opt_state=scaler.handle_non_finite_grads(state.opt_state),
                                  step=state.step + 1)

        def update_if_finite(state: TrainState) -> TrainState:
            if scaler is None:
                return update(state)
            return lax.cond(unflatten(stats)[NON_FINITE] == 0, update, skip, state)

        if skip_empty:
            # A branch, not a select between new and old state: a select would read and write
            # all params and optimizer state once more on every step. ``count`` and the
            # finite flags are all-reduced, so every replica takes the same branch.
            new_state = lax.cond(count > 0, update_if_finite, lambda state: state, state)
        else:
            new_state = update_if_finite(state)
        statistics = statistics + stats
        if scaler is not None:  # the newest scale, not a sum
            statistics = statistics.at[_index(local_stats, LOSS_SCALE)].set(
                new_state.opt_state.dynamic_scale)
        return new_state, statistics

    return step


def make_multi_train_step(cfg: StepConfig) -> Callable:
    """``K`` train steps in one device call: ``lax.scan`` over ``[K, batch, ...]`` inputs."""
    single = make_train_step(cfg, skip_empty=True)

    def step(state: TrainState, statistics: jax.Array, batches: Batch):
        def body(carry, batch):
            return single(*carry, batch), None

        return lax.scan(body, (state, statistics), batches)[0]

    return step


def make_eval_step(cfg: StepConfig) -> Callable:
    """The per-replica evaluation step ``(state, statistics, batch) -> statistics``."""
    if cfg.hooks is not None and cfg.hooks.evaluate is not None:
        return cfg.hooks.evaluate(cfg)

    def step(state: TrainState, statistics: jax.Array, batch: Batch):
        y_pred, _, losses = cfg.adapter.apply_with_losses(
            state.params, state.model_state, batch.x, train=False, rng=state.rng
        )
        assert cfg.loss is not None  # compile requires a loss for the default steps
        per_example = input_checks.per_example_loss(cfg.loss, batch.y, y_pred)
        stats, _ = _flat(_statistics(cfg, batch.y, y_pred, per_example, batch,
                                     share_of_sum(losses, batch.mask)))
        return statistics + lax.psum(stats, BATCH_AXIS)

    return step


def make_predict_step(adapter: ModuleAdapter) -> Callable:
    """The per-replica prediction step ``(state, batch) -> y_pred`` (rows stay sharded)."""

    def step(state: TrainState, batch: Batch):
        y_pred, _ = adapter.apply(state.params, state.model_state, batch.x, train=False,
                                  rng=state.rng)
        return y_pred

    return step


def statistics_layout(cfg: StepConfig, state: TrainState, batch: Batch, kind: str = "train"
                      ) -> StatsLayout:
    """The layout of the statistics ``kind`` steps produce for batches like ``batch``."""
    if cfg.hooks is not None and cfg.hooks.statistics is not None:
        local = functools.partial(cfg.hooks.statistics, cfg, kind=kind)
        leaves, treedef = jax.tree.flatten(jax.eval_shape(local, state, batch))
        return StatsLayout(treedef, tuple(tuple(leaf.shape) for leaf in leaves))

    def local(state, batch):
        y_pred, _ = cfg.adapter.apply(
            state.params, state.model_state, batch.x, train=False, rng=state.rng
        )
        assert cfg.loss is not None  # compile requires a loss for the default steps
        per_example = input_checks.per_example_loss(cfg.loss, batch.y, y_pred)
        return _statistics(cfg, batch.y, y_pred, per_example, batch)

    leaves, treedef = jax.tree.flatten(jax.eval_shape(local, state, batch))
    return StatsLayout(treedef, tuple(tuple(leaf.shape) for leaf in leaves))
