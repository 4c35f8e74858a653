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
import optax
from jax import lax

from mirrorfit._src.distribute import zero
from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.modules.sown_losses import share_of_sum
from mirrorfit._src.optimizers import accumulation, blocks
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer, all_finite, at_floor
from mirrorfit._src.trainers import input_checks
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.state import TrainState, step_rng
from mirrorfit._src.trainers.step_family import (
    StepConfig,
    StepFamily,
    mean_non_param_collections,
    skip_filler,
)


def _compiled_loss(cfg: StepConfig) -> Callable[[Any, Any], jax.Array]:
    """``compile``'s loss: the built-in steps always have one (``loss=None`` is only
    accepted for a model with its own ``train_step``, whose steps are `HookedSteps`)."""
    assert cfg.loss is not None
    return cfg.loss


class BuiltinSteps(StepFamily):
    """The steps of the loss and metrics given to ``compile`` (`BUILTIN`)."""

    def train_step(self, cfg: StepConfig, *, skip_empty: bool = False) -> Callable:
        """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``.

        The gradient is ``psum_r(grad sum_i w_i l_i) / psum_r(n_r)`` over replicas ``r``
        (rows ``i``, real-row counts ``n_r``): the gradient of the global batch's mean loss,
        exactly as on one device with the whole batch (under an output mask, ``l_i`` sums
        row ``i``'s unmasked element losses and ``n_r`` counts those elements in real rows:
        Keras' masked mean, global over replicas). Gradients, counts and metric
        statistics travel in one all-reduce. With ``skip_empty``, a batch with no real rows
        (filler at the end of a ``steps_per_execution`` group) leaves the state unchanged
        (`skip_filler`). Values the module sows into ``"losses"`` are added once
        (`share_of_sum`).

        With a `LossScaleOptimizer`, the differentiated sum is multiplied by the loss scale
        over the global batch size (so the scale means what it means in Keras, which scales
        the mean loss), and each replica's "gradients not all finite" flag travels in the
        same all-reduce (one statistics entry). If any replica had a non-finite gradient,
        every replica skips the update: params, other collections and the inner optimizer
        state stay as they were, the scale halves
        (`LossScaleOptimizer.handle_non_finite_grads`, not below its floor) and ``step``
        advances; a step skipped with the scale already at its floor is counted
        (`stats_lib.SKIPPED_AT_FLOOR`, warned about once per fit).

        With ``cfg.check_numerics`` (and no loss scaling), the same flag is computed and
        all-reduced, and a step whose gradients are not all finite on some replica, and every
        later step of the epoch, leaves the state as it was but for ``step``, which advances
        as for a skipped loss-scaling step: ``fit`` reads the flag after the step and stops
        training there.

        With ``cfg.shard_optimizer_state`` (ZeRO-1/2), the gradients of split leaves are
        reduce-scattered instead (`zero.reduce_gradients`), the optimizer updates this
        replica's blocks of the params and of its state (`blocks.block_update`, so clipping
        norms add every block), and the new blocks are all-gathered (`zero.gather_blocks`):
        the same new params as the all-reduce, to rounding.

        With ``cfg.local_accumulation`` (``gradient_accumulation_steps=k``), only the
        statistics are all-reduced every step: each replica scales its own gradient sum by
        the step's global ``1 / psum_r(n_r)`` and adds it to its own accumulator slot, and
        the update step all-reduces the accumulated sums once (`accumulation.local_gradients`),
        so a collective over the gradients runs once per ``k`` steps. The mean the optimizer
        sees is today's ``sum_k psum_r(...) / k``, summed in another order.
        """
        scaler = cfg.optimizer if isinstance(cfg.optimizer, LossScaleOptimizer) else None

        def step(state: TrainState, statistics: jax.Array, batch: Batch):
            rng = step_rng(state, lax.axis_index(BATCH_AXIS))
            # Keras scales the mean loss over the global batch (its rows, padding included).
            global_rows = batch.mask.shape[0] * lax.axis_size(BATCH_AXIS)

            def objective(params):
                y_pred, model_state, losses, out_mask = cfg.adapter.apply_with_mask(
                    params, state.model_state, batch.x, train=True, rng=rng
                )
                per_example, counts = input_checks.masked_loss(_compiled_loss(cfg), batch.y,
                                                               y_pred, out_mask, batch.mask)
                extra = share_of_sum(losses, stats_lib.loss_counts(batch, counts))
                total = stats_lib.masked_sum(per_example, stats_lib.example_weights(batch))
                if extra is not None:
                    total = total + extra
                if scaler is not None:
                    total = scaler.scale_loss(total * (1.0 / global_rows), state.opt_state)
                return total, (y_pred, per_example, counts, out_mask, model_state, extra)

            local_grads, (y_pred, per_example, counts, out_mask, model_state, extra) = jax.grad(
                objective, has_aux=True)(state.params)
            local_stats = stats_lib.compiled_statistics(
                cfg, batch.y, y_pred, per_example, batch, extra,
                None if counts is None else stats_lib.loss_counts(batch, counts), out_mask)
            if scaler is not None or cfg.check_numerics:
                local_stats[stats_lib.NON_FINITE] = 1.0 - all_finite(local_grads).astype(
                    jnp.float32)
            stats, unflatten = stats_lib.flatten(local_stats)
            if cfg.shard_optimizer_state:
                grad_sum, stats = zero.reduce_gradients(local_grads, stats)
            elif cfg.local_accumulation:  # the gradients' all-reduce runs in the update
                grad_sum, stats = local_grads, lax.psum(stats, BATCH_AXIS)
            else:
                grad_sum, stats = lax.psum((local_grads, stats), BATCH_AXIS)  # the all-reduce
            count = unflatten(stats)["loss"]["count"]
            model_state = mean_non_param_collections(model_state)

            def update(state: TrainState) -> TrainState:
                # A multiply, not a divide: XLA duplicates it into each consumer (the moment
                # updates), where a divide would be one more kernel per gradient leaf.
                scale = (1.0 if scaler is None else global_rows) / jnp.maximum(count, 1.0)
                grads = jax.tree.map(lambda g: g * scale, grad_sum)
                update_fn = cfg.optimizer.update if scaler is None else scaler.handle_finite_grads
                if cfg.shard_optimizer_state:
                    own = zero.blocks_of(state.params)
                    with blocks.block_update(BATCH_AXIS, zero.split_flags(state.params)):
                        updates, opt_state = update_fn(grads, state.opt_state, own)
                    params = zero.gather_blocks(optax.apply_updates(own, updates), state.params)
                elif cfg.local_accumulation:  # ``grads``: this replica's share of the mean
                    with accumulation.local_gradients(BATCH_AXIS):
                        updates, opt_state = update_fn(grads, state.opt_state, state.params)
                    params = optax.apply_updates(state.params, updates)
                else:
                    updates, opt_state = update_fn(grads, state.opt_state, state.params)
                    params = optax.apply_updates(state.params, updates)
                return TrainState(
                    params=params if cfg.constrain is None else cfg.constrain(params),
                    model_state=model_state,
                    opt_state=opt_state,
                    step=state.step + 1,
                    rng=state.rng,
                )

            def skip(state: TrainState) -> TrainState:  # a non-finite gradient on some replica
                assert scaler is not None  # only taken with a LossScaleOptimizer
                return state._replace(opt_state=scaler.handle_non_finite_grads(state.opt_state),
                                      step=state.step + 1)

            def update_if_finite(state: TrainState) -> TrainState:
                if scaler is None and cfg.check_numerics:
                    # Non-finite now or earlier in the epoch: keep the state as it was.
                    seen = statistics[stats_lib.flat_offset(local_stats, stats_lib.NON_FINITE)]
                    finite = seen + unflatten(stats)[stats_lib.NON_FINITE] == 0
                    return lax.cond(finite, update,
                                    lambda state: state._replace(step=state.step + 1), state)
                if scaler is None:
                    return update(state)
                return lax.cond(unflatten(stats)[stats_lib.NON_FINITE] == 0, update, skip, state)

            # ``count`` and the finite flags are all-reduced: every replica takes one branch.
            new_state = (skip_filler(count, update_if_finite, state) if skip_empty
                         else update_if_finite(state))
            statistics = statistics + stats
            if scaler is not None:  # the newest scale, not a sum
                statistics = statistics.at[stats_lib.flat_offset(
                    local_stats, stats_lib.LOSS_SCALE)].set(new_state.opt_state.dynamic_scale)
                skipped_at_floor = jnp.logical_and(unflatten(stats)[stats_lib.NON_FINITE] > 0,
                                                   at_floor(state.opt_state))
                statistics = statistics.at[stats_lib.flat_offset(
                    local_stats, stats_lib.SKIPPED_AT_FLOOR)].add(
                        skipped_at_floor.astype(jnp.float32))
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


BUILTIN = BuiltinSteps()
"""The built-in step family (it holds no state: one instance serves every model)."""


def make_predict_step(adapter: ModuleAdapter) -> Callable:
    """The per-replica prediction step ``(state, batch) -> y_pred`` (rows stay sharded)."""

    def step(state: TrainState, batch: Batch):
        y_pred, _ = adapter.apply(state.params, state.model_state, batch.x, train=False,
                                  rng=state.rng)
        return y_pred

    return step
