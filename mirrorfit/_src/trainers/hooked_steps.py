"""The steps of a `Model` whose own hooks (``compute_loss``, ``train_step``,
``test_step``) replace the built-in ones: `HookedSteps`, chosen at ``compile`` by
`mirrorfit._src.trainers.model_hooks.step_family_for`.

Each step runs the model's hooks per replica inside a replica context that carries the
step's padding mask (`keras_steps.masked_context`). A Keras-form hook (``train_step(self,
data)``, or Keras 3's stateless ``train_step(self, state, data)``) runs on the model's
objects through `mirrorfit._src.trainers.keras_steps`; mirrorfit's pure ``train_step(self,
state, batch)``, and the default update around an overridden ``compute_loss`` (`update`,
`forward_step`), run here on the `TrainState`. Every update goes through the one optimizer
update (`mirrorfit._src.optimizers.update.apply_update`).
"""


from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.distribute.replica_context import (
    get_replica_context,
)
from mirrorfit._src.distribute.run import compile_per_replica, specs_like
from mirrorfit._src.distribute.values import ReduceOp
from mirrorfit._src.optimizers.update import apply_update
from mirrorfit._src.trainers import keras_steps
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.keras_steps import JAX, KERAS, PURE, hook_form, masked_context
from mirrorfit._src.trainers.object_step import ObjectStep
from mirrorfit._src.trainers.state import TrainState, step_rng
from mirrorfit._src.trainers.step_family import (
    StepConfig,
    StepFamily,
    mean_non_param_collections,
    non_finite_updates,
)
from mirrorfit._src.variables.autodiff import value_and_grad


class HookedSteps(StepFamily):
    """The steps of a `Model` subclass that overrides ``compute_loss``, ``train_step`` or
    ``test_step``: each runs the model's hooks inside a replica context that carries the
    step's padding mask.

    A Keras-form ``train_step(self, data)``/``test_step(self, data)`` runs through
    `mirrorfit._src.trainers.keras_steps` (its logs and metric trackers are its
    statistics); a pure one, or the default update around ``compute_loss``, here. A
    subclassed model's default update runs on its objects (`ObjectStep`), so
    ``compute_loss`` may call the model's layers and models (a distiller's teacher).

    Args:
        model: the `Model` whose hooks the steps call (traced, per replica).
    """

    runs_objects = True

    def __init__(self, model: Any, base: Any):
        self._model = model
        self._forms = {"train": hook_form(model, "train_step", base),
                       "eval": hook_form(model, "test_step", base)}
        self._keras = keras_steps.KerasHooks(model, self._forms)

    def _local(self, cfg: StepConfig, state: TrainState, batch: Batch, kind: str):
        with masked_context(batch.mask) as context:
            new_state, stats = _local_step(self._model, cfg, state, batch, kind,
                                           self._forms[kind] == PURE)
        if kind == "train" and cfg.check_numerics:
            stats[stats_lib.NON_FINITE] = non_finite_updates(context)
        return new_state, stats

    def train_step(self, cfg: StepConfig) -> Callable:
        """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``.

        It runs the model's ``train_step`` (or the default update around its
        ``compute_loss``), sets ``step`` to ``state.step + 1`` and all-reduces the step's
        statistics.
        """
        if self._forms["train"] in (KERAS, JAX):
            return self._keras.train_step(cfg)

        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            new_state, stats = self._local(cfg, state, batch, "train")
            assert new_state is not None  # a train step returns its new state
            new_state = new_state._replace(step=state.step + 1, rng=state.rng)
            return new_state, statistics + lax.psum(stats_lib.flatten(stats)[0], BATCH_AXIS)
        return step

    def eval_step(self, cfg: StepConfig) -> Callable:
        """The per-replica evaluation step ``(state, statistics, batch) -> statistics``."""
        if self._forms["eval"] in (KERAS, JAX):
            return self._keras.eval_step(cfg)

        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            stats = self._local(cfg, state, batch, "eval")[1]
            return statistics + lax.psum(stats_lib.flatten(stats)[0], BATCH_AXIS)
        return step

    def statistics_shapes(self, cfg: StepConfig, state: TrainState, batch: Batch,
                          kind: str) -> Any:
        """The shapes of the hooked step's statistics, traced over the mesh (the hooks may
        use collectives): a Keras step's trackers and logs, a pure step's logs, else the
        compiled loss and metrics."""
        if self._forms[kind] in (KERAS, JAX):
            return self._keras.statistics_shapes(cfg, state, batch, kind)

        def per_replica(state, batch):
            return self._local(cfg, state, batch, kind)[1]
        batch_specs = jax.tree.map(lambda _: P(BATCH_AXIS), batch)
        strategy = self._model.strategy  # the state as placed: split leaves as blocks
        mapped = compile_per_replica(strategy, per_replica,
                                     (specs_like(strategy, (state,))[0], batch_specs), P())
        return jax.eval_shape(mapped, state, batch)

    def initial_statistics(self, cfg: StepConfig, layout: stats_lib.StatsLayout,
                           kind: str) -> np.ndarray:
        """A Keras step's first statistics (its trackers reset); zeros otherwise."""
        if self._forms[kind] in (KERAS, JAX):
            return self._keras.initial_statistics(layout)
        return super().initial_statistics(cfg, layout, kind)

    def results(self, cfg: StepConfig, stats: Any, kind: str) -> dict[str, Any]:
        """A Keras step's newest logs; a pure step's logs averaged over real rows; else the
        compiled loss and metrics."""
        if self._forms[kind] in (KERAS, JAX):
            return self._keras.results(stats, kind)
        if self._forms[kind] == PURE:
            return {name: s["total"] / max(float(s["count"]), 1.0) for name, s in stats.items()}
        return stats_lib.compiled_results(cfg, stats)


def _local_step(model, cfg, state: TrainState, batch: Batch, kind: str, custom: bool):
    """One hooked step on this replica: ``(new_state or None, local statistics)``.

    Statistics are not yet all-reduced. The default steps report the loss as
    ``loss * global_real_rows / num_replicas`` per replica (its sum is the global loss sum)
    next to the compiled metrics; custom steps report their logs (`_logs_statistics`).
    """
    count = jnp.sum(batch.mask, dtype=jnp.float32)
    batch = batch._replace(sample_weight=stats_lib.example_weights(batch) * batch.mask)
    if custom and kind == "train":
        new_state, logs = model.train_step(state, batch)
        if type(new_state) is not TrainState:
            raise TypeError("train_step must return (state, logs) with state a TrainState, "
                            "e.g. state._replace(params=..., opt_state=...). Received: state "
                            f"of type {type(new_state).__name__}")
        return new_state, _logs_statistics(logs, count)
    if custom:
        return None, _logs_statistics(model.test_step(state, batch), count)
    new_state, loss, y_pred = forward_step(model, state, batch, kind == "train")
    # Never a filler (no real rows, a 0/0 loss): `multi_train_step` runs none.
    share = loss * lax.psum(count, BATCH_AXIS) / get_replica_context().num_replicas_in_sync
    return new_state, stats_lib.compiled_statistics(
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


def forward_step(model, state: TrainState, batch: Batch, training: bool):
    """The default hooks on one replica's ``batch``: ``(new state or None, loss, y_pred)``.

    Training runs forward, `compute_loss`, the gradient ``pmean`` and one optax update.
    """
    if model.is_subclassed:
        return _object_step(model, state, batch, training)
    if not training:
        loss, (y_pred, _) = _forward(model, state.params, state, batch, False)
        return None, loss, y_pred
    return update(model, state, batch)


def _object_step(model, state: TrainState, batch: Batch, training: bool):
    """`_forward_step` of a subclassed model, on its objects (`ObjectStep`): ``compute_loss``
    runs in the same scope as the forward pass, so it may call the model's layers."""
    step = ObjectStep(model, state, [], [], model.trainer.config.optimizer if training else None)
    rng = step_rng(state, get_replica_context().replica_id_in_sync_group)
    with step.running(rng):
        def forward():
            y_pred = model(batch.x, training=training)
            loss = keras_steps.call_compute_loss(model, batch.x, batch.y, y_pred,
                                                 batch.sample_weight, training)
            loss = jnp.asarray(loss, jnp.float32)
            return model.optimizer.scale_loss(loss), (loss, y_pred)

        if not training:
            _, (loss, y_pred) = forward()
            return None, loss, y_pred
        (_, (loss, y_pred)), grads = value_and_grad(forward, model.trainable_variables,
                                                    has_aux=True)()
        step.apply(grads, None)
    return step.new_state(), loss, y_pred


def _forward(model, params, state: TrainState, batch: Batch, training: bool):
    rng = step_rng(state, get_replica_context().replica_id_in_sync_group)
    y_pred, model_state, losses = model._adapter.apply_with_losses(
        params, state.model_state, batch.x, train=training, rng=rng)
    with model._forward_losses(losses, params):
        loss = keras_steps.call_compute_loss(model, batch.x, batch.y, y_pred,
                                             batch.sample_weight, training)
    return jnp.asarray(loss, jnp.float32), (y_pred, model_state)


def update(model, state: TrainState, batch: Batch):
    """Forward, `compute_loss`, gradient ``pmean`` and one optax update: the default step."""
    (loss, (y_pred, model_state)), grads = jax.value_and_grad(
        lambda params: _forward(model, params, state, batch, True), has_aux=True)(state.params)
    config = model.trainer.config
    applied = apply_update(config.optimizer, grads, state.opt_state, state.params,
                           reduce_op=ReduceOp.MEAN, constrain=config.constrain)
    new_state = state._replace(params=applied.params, opt_state=applied.opt_state,
                               model_state=mean_non_param_collections(model_state))
    return new_state, loss, y_pred
