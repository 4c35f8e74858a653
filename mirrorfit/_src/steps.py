"""Per-replica steps: pure functions that the strategy maps over the mesh.

Each step sees one replica's shard of the global batch and talks to the other replicas only
through collectives over the ``"batch"`` axis:

* ``train(state, acc, batch) -> (state, acc, snapshot)``: forward, loss, ``jax.grad``, an
  all-reduce of the gradients, one optax update (identical on every replica);
* ``evaluate(acc, state, batch) -> (acc, snapshot)``: forward in inference mode, statistics;
* ``predict(state, x) -> y_pred``: forward in inference mode, rows stay sharded.

Padding rows carry ``mask == 0``. Losses and metrics are sums over real rows, ``lax.psum``'d
across replicas and divided by the ``psum`` of real-row counts, so every result equals the
single-device value over the real examples. ``acc`` holds the running sums (sufficient
statistics) of the epoch as one float32 vector (`StatsLayout` says which entries are whose),
so a step adds them with one operation; ``snapshot`` is a copy of it that the next step does
not donate. Metric values are computed from a snapshot on the host, when they are read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from mirrorfit._src.data import HostBatch
from mirrorfit._src.modules import ModuleAdapter
from mirrorfit._src.state import TrainState, step_rng
from mirrorfit._src.strategy import BATCH_AXIS

NOT_PROBABILITIES = "_not_probabilities"
"""Accumulator key: count of examples whose outputs were not probabilities."""


class StepConfig(NamedTuple):
    """What a step needs besides its arguments; fixed at ``compile``."""

    adapter: ModuleAdapter
    loss: Callable[[Any, Any], jax.Array]  # (y_true, y_pred) -> per-example loss [batch]
    metrics: Sequence[Any]  # mirrorfit.metrics.Metric objects
    optimizer: optax.GradientTransformation


def _masked_sum(values: jax.Array, weight: jax.Array) -> jax.Array:
    # where, not multiply: a non-finite value on a padding row must not leak into the sum.
    return jnp.sum(jnp.where(weight != 0, values * weight, 0.0))


def _weight(batch: HostBatch) -> jax.Array:
    """Per-example weights ``[batch]``: the sample weights, or the mask when there are none."""
    return batch.mask if batch.weight is None else batch.weight


def _statistics(cfg: StepConfig, y, y_pred, per_example_loss, batch: HostBatch) -> dict:
    """Per-replica sums for the loss and every metric (not yet all-reduced)."""
    stats = {"loss": {"total": _masked_sum(per_example_loss, _weight(batch)),
                      "count": jnp.sum(batch.mask)}}
    for metric in cfg.metrics:
        stats[metric.name] = metric.update(y, y_pred, _weight(batch))
    check = getattr(cfg.loss, "not_probabilities", None)
    flags = check(y_pred) if check is not None else None
    if flags is not None:
        stats[NOT_PROBABILITIES] = _masked_sum(flags.astype(jnp.float32), batch.mask)
    return stats


def results(cfg: StepConfig, stats: dict) -> dict[str, Any]:
    """Metric values from accumulated statistics: ``loss`` first, then each metric by name."""
    loss = stats["loss"]
    logs = {"loss": loss["total"] / max(float(loss["count"]), 1.0)}
    for metric in cfg.metrics:
        logs[metric.name] = metric.result(stats[metric.name])
    return logs


def _flat(stats: dict) -> jax.Array:
    """The statistics as one float32 vector, in `StatsLayout` order."""
    return jnp.concatenate([jnp.ravel(leaf).astype(jnp.float32) for leaf in jax.tree.leaves(stats)])


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


def _mean_model_state(model_state):
    """Averages float collections (e.g. batch_stats) across replicas so they stay mirrored."""
    return jax.tree.map(
        lambda v: lax.pmean(v, BATCH_AXIS) if jnp.issubdtype(v.dtype, jnp.inexact) else v,
        model_state,
    )


def make_train_step(cfg: StepConfig, *, skip_empty: bool = False) -> Callable:
    """The per-replica train step ``(state, acc, batch) -> (state, acc, snapshot)``.

    The gradient is ``psum_r(grad sum_i w_i l_i) / psum_r(n_r)`` over replicas ``r`` (rows
    ``i``, real-row counts ``n_r``): the gradient of the global batch's mean loss, exactly as
    on one device with the whole batch. Gradients, counts and metric statistics travel in
    one all-reduce. With ``skip_empty``, a batch with no real rows (filler at the end of a
    ``steps_per_execution`` group) leaves the state unchanged.
    """

    def step(state: TrainState, acc: jax.Array, batch: HostBatch):
        rng = step_rng(state, lax.axis_index(BATCH_AXIS))

        def objective(params):
            y_pred, model_state = cfg.adapter.apply(
                params, state.model_state, batch.x, train=True, rng=rng
            )
            per_example = cfg.loss(batch.y, y_pred)
            return _masked_sum(per_example, _weight(batch)), (y_pred, per_example, model_state)

        local_grads, (y_pred, per_example, model_state) = jax.grad(objective, has_aux=True)(
            state.params
        )
        stats = _statistics(cfg, batch.y, y_pred, per_example, batch)
        grad_sum, stats = lax.psum((local_grads, stats), BATCH_AXIS)  # the all-reduce
        count = stats["loss"]["count"]
        grads = jax.tree.map(lambda g: g / jnp.maximum(count, 1.0), grad_sum)
        updates, opt_state = cfg.optimizer.update(grads, state.opt_state, state.params)
        new_state = TrainState(
            params=optax.apply_updates(state.params, updates),
            model_state=_mean_model_state(model_state),
            opt_state=opt_state,
            step=state.step + 1,
            rng=state.rng,
        )
        if skip_empty:
            new_state = jax.tree.map(lambda n, o: jnp.where(count > 0, n, o), new_state, state)
        acc = acc + _flat(stats)
        return new_state, acc, acc

    return step


def make_multi_train_step(cfg: StepConfig) -> Callable:
    """``K`` train steps in one device call: ``lax.scan`` over ``[K, batch, ...]`` inputs."""
    single = make_train_step(cfg, skip_empty=True)

    def step(state: TrainState, acc: jax.Array, batches: HostBatch):
        def body(carry, batch):
            state, acc, _ = single(*carry, batch)
            return (state, acc), None

        (state, acc), _ = lax.scan(body, (state, acc), batches)
        return state, acc, acc

    return step


def make_eval_step(cfg: StepConfig) -> Callable:
    """The per-replica evaluation step ``(acc, state, batch) -> (acc, snapshot)``."""

    def step(acc: jax.Array, state: TrainState, batch: HostBatch):
        y_pred, _ = cfg.adapter.apply(
            state.params, state.model_state, batch.x, train=False, rng=state.rng
        )
        stats = _statistics(cfg, batch.y, y_pred, cfg.loss(batch.y, y_pred), batch)
        acc = acc + _flat(lax.psum(stats, BATCH_AXIS))
        return acc, acc

    return step


def make_predict_step(adapter: ModuleAdapter) -> Callable:
    """The per-replica prediction step ``(state, x) -> y_pred`` (rows stay sharded)."""

    def step(state: TrainState, x):
        y_pred, _ = adapter.apply(state.params, state.model_state, x, train=False, rng=state.rng)
        return y_pred

    return step


def statistics_layout(cfg: StepConfig, state: TrainState, batch: HostBatch) -> StatsLayout:
    """The layout of the statistics `_statistics` produces for batches like ``batch``."""

    def local(state, batch):
        y_pred, _ = cfg.adapter.apply(
            state.params, state.model_state, batch.x, train=False, rng=state.rng
        )
        return _statistics(cfg, batch.y, y_pred, cfg.loss(batch.y, y_pred), batch)

    leaves, treedef = jax.tree.flatten(jax.eval_shape(local, state, batch))
    return StatsLayout(treedef, tuple(tuple(leaf.shape) for leaf in leaves))
