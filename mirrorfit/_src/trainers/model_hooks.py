"""`Model`'s extension hooks, as Keras 3: ``compute_loss``, ``train_step``, ``test_step``.

A `Model` subclass overrides one of them and ``fit``/``evaluate`` run it inside their
compiled per-replica step, so the all-reduce, padding masks, the one compile, callbacks and
step-exact resume all stay. The hooks run **per replica**, traced, on this replica's shard
of the global batch, with `mirrorfit.get_replica_context` giving the collectives (its
``mask`` marks the real rows):

* ``compute_loss(x, y, y_pred, sample_weight, training)`` returns this replica's loss as a
  float32 scalar: the mean over a per-replica batch of ``global real rows / num_replicas``
  plus the sown losses (`ModelHooks.losses`). The gradient is averaged over replicas
  (``pmean``), so a term that is the same on every replica (an L2 penalty of the params)
  counts once, and the global loss equals the single-device loss.
* ``train_step(state, batch) -> (state, logs)`` replaces the whole update. It must
  all-reduce its gradients itself (`mirrorfit.apply_gradients` does it before an optax
  update). ``logs`` maps names to float scalars; fit shows, per epoch, their mean over real
  rows (a value the same on every replica is simply averaged over steps).
* ``test_step(state, batch) -> logs`` likewise for ``evaluate`` and validation.

`StepHooks` carries a model's overrides into the steps (``StepConfig.hooks``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import PartitionSpec as P

from mirrorfit._src.trainers import steps as steps_lib
from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.distribute.replica_context import (
    ReplicaContext,
    compute_average_loss,
    get_replica_context,
    replica_context,
)
from mirrorfit._src.distribute.run import compile_per_replica
from mirrorfit._src.modules.sown_losses import loss_values
from mirrorfit._src.trainers.state import TrainState, step_rng
from mirrorfit._src.distribute.values import ReduceOp

_HOOKS = ("compute_loss", "train_step", "test_step")


class StepHooks(NamedTuple):
    """A model's overridden hooks as step builders (see `mirrorfit._src.trainers.steps`)."""

    train: Callable[..., Callable]  # (cfg, skip_empty) -> per-replica train step
    evaluate: Callable[..., Callable]  # (cfg) -> per-replica eval step
    statistics: Callable[..., Any]  # (cfg, state, batch, kind=) -> local statistics
    results: Callable[..., dict[str, Any]]  # (cfg, stats, kind) -> logs


class ModelHooks:
    """The hooks' default implementations; mixed into `mirrorfit.Model`."""

    _trainer: Any  # set by `mirrorfit.Model`, which this class is mixed into
    _sown: list[Any] | None = None  # values sown into "losses" by the newest forward pass
    _traced_params: Any = None  # the params being differentiated, inside compute_loss

    @property
    def params(self) -> Any:
        """The Flax ``"params"`` pytree (mirrored ``jax.Array`` s).

        Inside ``compute_loss`` it is the params being differentiated (traced), as Keras'
        ``trainable_variables`` in a stateless scope, so a penalty of ``self.params`` there
        gets its gradient.
        """
        if self._traced_params is not None:
            return self._traced_params
        return super().params  # type: ignore[misc]

    @property
    def losses(self) -> list[jax.Array]:
        """Scalars the module sowed into ``"losses"`` in the newest forward pass.

        Inside ``compute_loss`` these are the current step's (traced) values; outside, those
        of the newest ``model(x)``/``predict_on_batch`` call. ``[]`` when nothing was sown.
        """
        return list(self._sown or [])

    @contextlib.contextmanager
    def _forward_losses(self, losses: Any, params: Any = None) -> Iterator[None]:
        previous = self._sown, self._traced_params
        self._sown, self._traced_params = loss_values(losses), params
        try:
            yield
        finally:
            self._sown, self._traced_params = previous

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None,
                     sample_weight: jax.Array | None = None, training: bool = True
                     ) -> jax.Array:
        """This replica's loss (float32 scalar), as ``keras.Model.compute_loss``.

        The default: ``num_replicas * compute_average_loss(loss(y, y_pred), sample_weight)``
        (the weighted loss sum over global real rows per replica) plus ``sum(self.losses)``.

        Args:
            x: this replica's inputs ``[per_replica_batch, ...]``.
            y: targets ``[per_replica_batch, ...]``.
            y_pred: the module's outputs ``[per_replica_batch, ...]``.
            sample_weight: float32 ``[per_replica_batch]``, 0 on padding rows.
            training: ``True`` in fit, ``False`` in evaluate.
        """
        del x, training
        if self._trainer.config.loss is None:
            raise ValueError("compute_loss needs the loss given to compile (or override "
                             "compute_loss, train_step and test_step). Received: loss=None")
        context = get_replica_context()
        per_example = self._trainer.config.loss(y, y_pred)
        loss = context.num_replicas_in_sync * compute_average_loss(per_example, sample_weight)
        return sum(self.losses, loss)

    def train_step(self, state: TrainState, batch: Batch) -> tuple[TrainState, dict[str, Any]]:
        """One per-replica update: forward, `compute_loss`, gradient all-reduce, optax update.

        Args:
            state: the mirrored `TrainState`.
            batch: this replica's shard: ``x``/``y`` ``[per_replica_batch, ...]``,
                ``sample_weight`` float32 ``[per_replica_batch]`` (0 on padding rows) and
                ``mask`` (True for real rows).

        Returns:
            ``(new_state, logs)``; fit sets ``new_state.step`` to ``state.step + 1``.
        """
        new_state, loss, _ = _update(self, state, batch)
        return new_state, {"loss": get_replica_context().all_reduce(ReduceOp.MEAN, loss)}

    def test_step(self, state: TrainState, batch: Batch) -> dict[str, Any]:
        """Per-replica evaluation logs (``{"loss": ...}`` by default); see `train_step`."""
        loss, _ = _forward(self, state.params, state, batch, False)
        return {"loss": get_replica_context().all_reduce(ReduceOp.MEAN, loss)}


def overridden(model: Any, name: str) -> bool:
    """Whether ``type(model)`` overrides hook ``name`` of `ModelHooks`."""
    return getattr(type(model), name) is not getattr(ModelHooks, name)


def step_hooks(model: Any) -> StepHooks | None:
    """The `StepHooks` of ``model``, or ``None`` when it overrides no hook."""
    if not any(overridden(model, name) for name in _HOOKS):
        return None
    custom = {"train": overridden(model, "train_step"), "eval": overridden(model, "test_step")}

    def local(cfg, state: TrainState, batch: Batch, kind: str):
        return _local_step(model, cfg, state, batch, kind, custom[kind])

    def train(cfg, skip_empty: bool) -> Callable:
        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            with _masked_context(batch.mask):
                new_state, stats = local(cfg, state, batch, "train")
            assert new_state is not None  # a train step returns its new state
            flat, _ = steps_lib._flat(stats)
            flat = lax.psum(flat, BATCH_AXIS)
            new_state = new_state._replace(step=state.step + 1, rng=state.rng)
            if skip_empty:
                real = lax.psum(jnp.sum(batch.mask), BATCH_AXIS) > 0
                new_state = jax.tree.map(lambda a, b: jnp.where(real, a, b), new_state, state)
            return new_state, statistics + flat
        return step

    def evaluate(cfg) -> Callable:
        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            with _masked_context(batch.mask):
                stats = local(cfg, state, batch, "eval")[1]
            return statistics + lax.psum(steps_lib._flat(stats)[0], BATCH_AXIS)
        return step

    def statistics(cfg, state: TrainState, batch: Batch, *, kind: str) -> dict:
        def per_replica(state, batch):
            with _masked_context(batch.mask):
                return local(cfg, state, batch, kind)[1]
        batch_specs = jax.tree.map(lambda _: P(BATCH_AXIS), batch)
        mapped = compile_per_replica(model.strategy, per_replica, (P(), batch_specs), P())
        return mapped(state, batch)

    def results(cfg, stats: dict, kind: str) -> dict[str, Any]:
        if custom[kind]:
            return {name: s["total"] / max(float(s["count"]), 1.0) for name, s in stats.items()}
        return steps_lib.results(cfg._replace(hooks=None), stats)

    return StepHooks(train, evaluate, statistics, results)


def _local_step(model, cfg, state: TrainState, batch: Batch, kind: str, custom: bool):
    """One hooked step on this replica: ``(new_state or None, local statistics)``.

    Statistics are not yet all-reduced. The default steps report the loss as
    ``loss * global_real_rows / num_replicas`` per replica (its sum is the global loss sum)
    next to the compiled metrics; custom steps report their logs (`_logs_statistics`).
    """
    count = jnp.sum(batch.mask, dtype=jnp.float32)
    batch = batch._replace(sample_weight=steps_lib._weight(batch) * batch.mask)
    if custom and kind == "train":
        new_state, logs = model.train_step(state, batch)
        if type(new_state) is not TrainState:
            raise TypeError("train_step must return (state, logs) with state a TrainState, "
                            "e.g. state._replace(params=..., opt_state=...). Received: state "
                            f"of type {type(new_state).__name__}")
        return new_state, _logs_statistics(logs, count)
    if custom:
        return None, _logs_statistics(model.test_step(state, batch), count)
    if kind == "train":
        new_state, loss, y_pred = _update(model, state, batch)
    else:
        new_state, (loss, (y_pred, _)) = None, _forward(model, state.params, state, batch, False)
    global_count = lax.psum(count, BATCH_AXIS)
    # A batch with no real rows (filler in a steps_per_execution group) has a 0/0 loss.
    share = jnp.where(global_count > 0, loss * global_count, 0.0) / get_replica_context(
        ).num_replicas_in_sync
    return new_state, steps_lib._statistics(
        cfg, batch.y, y_pred, jnp.zeros_like(batch.sample_weight), batch, share)


def _logs_statistics(logs: Any, count: jax.Array) -> dict:
    """``{name: {"total": value * count, "count": count}}`` for scalar logs."""
    if not isinstance(logs, dict):
        raise TypeError("train_step/test_step must return logs as a dict of float scalars, "
                        f"e.g. {{'loss': loss}}. Received: logs={logs!r}")
    stats = {}
    for name, value in logs.items():
        value = jnp.asarray(value, jnp.float32)
        if value.ndim != 0:
            raise ValueError(f"Each log of train_step/test_step must be a scalar. Received: "
                             f"logs[{name!r}] with shape {value.shape}")
        stats[name] = {"total": jnp.where(count > 0, value * count, 0.0), "count": count}
    return stats


@contextlib.contextmanager
def _masked_context(mask: jax.Array) -> Iterator[None]:
    """The replica context of a hooked step: the step's padding mask for the loss helpers."""
    outer = get_replica_context()
    with replica_context(ReplicaContext(outer.num_replicas_in_sync, mask, in_run=True)):
        yield


def _forward(model, params, state: TrainState, batch: Batch, training: bool):
    rng = step_rng(state, get_replica_context().replica_id_in_sync_group)
    y_pred, model_state, losses = model._adapter.apply_with_losses(
        params, state.model_state, batch.x, train=training, rng=rng)
    with model._forward_losses(losses, params):
        loss = model.compute_loss(batch.x, batch.y, y_pred, batch.sample_weight, training)
    return jnp.asarray(loss, jnp.float32), (y_pred, model_state)


def _update(model, state: TrainState, batch: Batch):
    """Forward, `compute_loss`, gradient ``pmean`` and one optax update: the default step."""
    context = get_replica_context()
    (loss, (y_pred, model_state)), grads = jax.value_and_grad(
        lambda params: _forward(model, params, state, batch, True), has_aux=True)(state.params)
    grads = context.all_reduce(ReduceOp.MEAN, grads) if jax.tree.leaves(grads) else grads
    tx = model.trainer.config.optimizer
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    floats = [v for v in jax.tree.leaves(model_state) if jnp.issubdtype(v.dtype, jnp.inexact)]
    if floats:  # e.g. BatchNorm statistics: averaged so they stay mirrored
        model_state = jax.tree.map(
            lambda v: context.all_reduce(ReduceOp.MEAN, v)
            if jnp.issubdtype(v.dtype, jnp.inexact) else v, model_state)
    new_state = state._replace(params=optax.apply_updates(state.params, updates),
                               model_state=model_state, opt_state=opt_state)
    return new_state, loss, y_pred
