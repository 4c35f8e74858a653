"""The built-in steps: the `StepFamily` of a model that overrides no training hook.

Each step sees one replica's shard of the global batch (`mirrorfit._src.trainers.step_family`):

* ``train(state, statistics, batch) -> (state, statistics)``: forward, loss, ``jax.grad``,
  an all-reduce of the gradients, one optax update (identical on every replica);
* ``evaluate(state, statistics, batch) -> statistics``: forward in inference mode;
* ``predict(state, batch) -> y_pred``: forward in inference mode, rows stay sharded (the
  same for every family).

Every step takes a `Batch`. Losses and metrics are sums over real rows
(`mirrorfit._src.trainers.statistics`), ``lax.psum``'d across replicas and divided by the
``psum`` of real-row counts when read (under a model output's Keras mask, the loss sums
unmasked element losses and counts unmasked elements: `input_checks.masked_loss`).
``statistics`` is not donated: each step's ``statistics`` is a new array that later steps
leave alone, so the host can read it while they run.

Every operation in a step runs once per replica, and on XLA:CPU each costs microseconds
however small its arrays, so the steps keep the compiled program short: one all-reduce with
one operand per gradient leaf plus one for all statistics, multiplies rather than divides
where XLA should fuse them into their consumers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.distribute import fsdp, zero
from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.distribute.replica_context import get_replica_context
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.sown_losses import share_of_sum
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer, at_floor
from mirrorfit._src.optimizers.update import apply_reduced, reduce_gradients
from mirrorfit._src.trainers import input_checks
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.state import TrainState, step_rng
from mirrorfit._src.trainers.step_family import (
    StepConfig,
    StepFamily,
    mean_non_param_collections,
)


def _compiled_loss(cfg: StepConfig) -> Callable[[Any, Any], jax.Array]:
    """``compile``'s loss: the built-in steps always have one (``loss=None`` is only
    accepted for a model with its own ``train_step``, whose steps are `HookedSteps`)."""
    assert cfg.loss is not None
    return cfg.loss


class BuiltinSteps(StepFamily):
    """The steps of the loss and metrics given to ``compile`` (`BUILTIN`)."""

    takes_param_blocks = True  # its train step gathers sharded params itself

    def train_step(self, cfg: StepConfig) -> Callable:
        """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``.

        The gradient is ``psum_r(grad sum_i w_i l_i) / psum_r(n_r)`` over replicas ``r``
        (rows ``i``, real-row counts ``n_r``): the gradient of the global batch's mean loss,
        exactly as on one device with the whole batch (under an output mask, ``l_i`` sums
        row ``i``'s unmasked element losses and ``n_r`` counts those elements in real rows:
        Keras' masked mean, global over replicas). Gradients, counts and metric
        statistics travel in one all-reduce (`reduce_gradients`; the update is
        `apply_reduced`: together `mirrorfit._src.optimizers.update.apply_update`, the one
        update every form of step runs). Values the module sows into ``"losses"`` are added
        once (`share_of_sum`).

        With a `LossScaleOptimizer`, the differentiated sum is multiplied by the loss scale
        over the global batch size (so the scale means what it means in Keras, which scales
        the mean loss). If any replica had a non-finite gradient, every replica skips the
        update: params, other collections and the inner optimizer state stay as they were,
        the scale halves (`LossScaleOptimizer.handle_non_finite_grads`, not below its
        floor) and ``step`` advances; a step skipped with the scale already at its floor is
        counted (`stats_lib.SKIPPED_AT_FLOOR`, warned about once per fit).

        With ``cfg.check_numerics`` (``fit`` with TerminateOnNaN, no loss scaling), a step
        whose gradients are not all finite on some replica, and every later step of the
        epoch, leaves the state as it was but for ``step``, which advances as for a skipped
        loss-scaling step: ``fit`` reads the count (`stats_lib.NON_FINITE`) after the step
        and stops training there.

        The one update decides the rest from the replica context and the optimizer state:
        under ``shard_optimizer_state`` (ZeRO-1/2) the gradients of split leaves are
        reduce-scattered, the optimizer updates this replica's blocks and the new blocks are
        all-gathered; with per-replica accumulators (``gradient_accumulation_steps=k``) only
        the statistics are all-reduced each step and the gradients once per applied update.

        With ``shard_params`` (ZeRO-3/FSDP; the replica context's ``param_axes``), the step
        receives this replica's blocks of the params and differentiates with respect to
        them, through their all-gather (`zero.gather_along`) inside ``jax.checkpoint`` with
        `fsdp.remat_policy`: the gathered weights are not kept for the backward pass, which
        all-gathers them again, and the transpose of each all-gather reduce-scatters its
        gradient, so only the whole leaves' gradients (and the statistics) are all-reduced.
        The optimizer updates the blocks, which the step returns.
        """
        scaler = cfg.optimizer if isinstance(cfg.optimizer, LossScaleOptimizer) else None

        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            context = get_replica_context()
            axes = context.param_axes  # set under shard_params: the params are blocks
            objective = _objective(cfg, state, batch, scaler)
            if axes is not None:
                objective = _through_gather(objective, axes)
            local_grads, (y_pred, per_example, counts, out_mask, model_state, extra) = jax.grad(
                objective, has_aux=True)(state.params)
            local_stats = stats_lib.compiled_statistics(
                cfg, batch.y, y_pred, per_example, batch, extra,
                None if counts is None else stats_lib.loss_counts(batch, counts), out_mask)
            check = scaler is not None or cfg.check_numerics
            if check:  # set below from the update's flag; here for the layout
                local_stats[stats_lib.NON_FINITE] = jnp.zeros((), jnp.float32)
            stats, unflatten = stats_lib.flatten(local_stats)
            # Keras scales the mean loss over the global batch (its rows, padding included).
            global_rows = batch.mask.shape[0] * lax.axis_size(BATCH_AXIS)
            # Gradients, counts and statistics in one collective; a multiply by the inverse
            # count, which XLA fuses into each consumer (the moment updates).
            reduced = reduce_gradients(
                cfg.optimizer, local_grads, state.opt_state, state.params, carry=stats,
                rescale=lambda s: (1.0 if scaler is None else global_rows) / jnp.maximum(
                    unflatten(s)["loss"]["count"], 1.0), param_axes=axes)
            stats = reduced.carried
            model_state = mean_non_param_collections(model_state)

            def update(state: TrainState) -> TrainState:
                applied = apply_reduced(cfg.optimizer, reduced, state.opt_state, state.params,
                                        constrain=cfg.constrain)
                finite = applied.finite
                kept = model_state if finite is None else jax.tree.map(
                    lambda new, old: jnp.where(finite, new, old), model_state,
                    state.model_state)  # a skipped step changes no statistic either
                params = (applied.params if axes is None
                          else context._kept_params(applied.params, axes))
                return state._replace(params=params, model_state=kept,
                                      opt_state=applied.opt_state, step=state.step + 1)

            body = update
            if check and scaler is None:  # TerminateOnNaN: no update after a non-finite one
                seen = statistics[stats_lib.flat_offset(local_stats, stats_lib.NON_FINITE)]
                body = lambda state: lax.cond(
                    seen == 0, update, lambda state: state._replace(step=state.step + 1), state)
            new_state = body(state)
            statistics = statistics + stats
            if check:
                statistics = statistics.at[stats_lib.flat_offset(
                    local_stats, stats_lib.NON_FINITE)].add(
                        1.0 - jnp.asarray(reduced.finite, jnp.float32))
            if scaler is not None:
                statistics = _loss_scale_statistics(statistics, local_stats, state, new_state,
                                                    reduced.finite)
            return new_state, statistics

        return step

    def eval_step(self, cfg: StepConfig) -> Callable:
        """The per-replica evaluation step ``(state, statistics, batch) -> statistics``."""

        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            y_pred, _, losses, out_mask = cfg.adapter.apply_with_mask(
                state.params, state.model_state, batch.x, train=False, rng=state.rng
            )
            assert cfg.loss is not None  # compile requires a loss for the default steps
            per_example, counts = input_checks.masked_loss(_compiled_loss(cfg), batch.y, y_pred,
                                                           out_mask, batch.mask)
            counted = stats_lib.loss_counts(batch, counts)
            stats, _ = stats_lib.flatten(stats_lib.compiled_statistics(
                cfg, batch.y, y_pred, per_example, batch, share_of_sum(losses, counted),
                None if counts is None else counted, out_mask))
            return statistics + lax.psum(stats, BATCH_AXIS)

        return step

    def statistics_shapes(self, cfg: StepConfig, state: TrainState, batch: Batch,
                          kind: str) -> Any:
        """The shapes of `compiled_statistics`: the same for train and eval steps."""
        del kind

        def local(state, batch):
            y_pred, _, _, out_mask = cfg.adapter.apply_with_mask(
                state.params, state.model_state, batch.x, train=False, rng=state.rng
            )
            # The loss as the steps take it (a plain function may return element losses
            # under a mask), without the real rows: no sums over replicas for shapes.
            per_example, _ = input_checks.masked_loss(_compiled_loss(cfg), batch.y, y_pred,
                                                      out_mask)
            return stats_lib.compiled_statistics(cfg, batch.y, y_pred, per_example, batch,
                                                 output_mask=out_mask, over_replicas=False)

        return jax.eval_shape(local, state, batch)

    def results(self, cfg: StepConfig, stats: dict, kind: str) -> dict[str, Any]:
        """`compiled_results`: the compiled loss and metrics, for train and eval alike."""
        del kind
        return stats_lib.compiled_results(cfg, stats)


def _objective(cfg: StepConfig, state: TrainState, batch: Batch,
               scaler: LossScaleOptimizer | None) -> Callable:
    """``params -> (this replica's weighted loss sum, aux)``: what the built-in train step
    differentiates (scaled as Keras scales its mean loss under loss scaling)."""
    rng = step_rng(state, lax.axis_index(BATCH_AXIS))
    global_rows = batch.mask.shape[0] * lax.axis_size(BATCH_AXIS)

    def objective(params):
        y_pred, model_state, losses, out_mask = cfg.adapter.apply_with_mask(
            params, state.model_state, batch.x, train=True, rng=rng)
        per_example, counts = input_checks.masked_loss(_compiled_loss(cfg), batch.y, y_pred,
                                                       out_mask, batch.mask)
        extra = share_of_sum(losses, stats_lib.loss_counts(batch, counts))
        total = stats_lib.masked_sum(per_example, stats_lib.example_weights(batch))
        if extra is not None:
            total = total + extra
        if scaler is not None:
            total = scaler.scale_loss(total * (1.0 / global_rows), state.opt_state)
        return total, (y_pred, per_example, counts, out_mask, model_state, extra)

    return objective


def _through_gather(objective: Callable, axes: Any) -> Callable:
    """``objective`` of the whole params as a function of this replica's blocks (split
    along ``axes``): all-gathered inside it, under ``jax.checkpoint`` with
    `fsdp.remat_policy` (sharded params: the gathered weights are gathered again for the
    backward pass rather than kept)."""
    return fsdp.rematerialized(lambda blocks: objective(zero.gather_along(blocks, axes)))


def _loss_scale_statistics(statistics: jax.Array, local_stats: dict, state: TrainState,
                           new_state: TrainState, finite: Any) -> jax.Array:
    """``statistics`` with the newest loss scale (not a sum) and, for a step skipped with
    the scale already at its floor, one more `stats_lib.SKIPPED_AT_FLOOR`."""
    statistics = statistics.at[stats_lib.flat_offset(local_stats, stats_lib.LOSS_SCALE)].set(
        new_state.opt_state.dynamic_scale)
    skipped_at_floor = jnp.logical_and(jnp.logical_not(finite), at_floor(state.opt_state))
    return statistics.at[stats_lib.flat_offset(local_stats, stats_lib.SKIPPED_AT_FLOOR)].add(
        skipped_at_floor.astype(jnp.float32))


BUILTIN = BuiltinSteps()
"""The built-in step family (it holds no state: one instance serves every model)."""


def make_predict_step(adapter: ModuleAdapter) -> Callable:
    """The per-replica prediction step ``(state, batch) -> y_pred`` (rows stay sharded)."""

    def step(state: TrainState, batch: Batch):
        y_pred, _ = adapter.apply(state.params, state.model_state, batch.x, train=False,
                                  rng=state.rng)
        return y_pred

    return step
