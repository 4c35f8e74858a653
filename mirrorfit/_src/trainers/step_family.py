"""Which steps a compiled model runs, and the pieces every step family shares.

``compile`` chooses one `StepFamily` for a model, once (`model_hooks.step_family_for`): the
built-in steps (`mirrorfit._src.trainers.steps.BuiltinSteps`), or the steps of a `Model`
subclass that overrides ``compute_loss``, ``train_step`` or ``test_step``
(`mirrorfit._src.trainers.model_hooks.HookedSteps`). `StepConfig` carries it with the loss,
metrics and optimizer, and the trainer builds every step through it, so no step asks which
family it belongs to.

What a train step of either family must do alike is written here once:

* `mean_non_param_collections`: after an update, the float leaves of the non-param
  collections (BatchNorm's moving statistics) are averaged across replicas, so they stay
  mirrored;
* `StepFamily.multi_train_step`: ``K`` train steps in one device call.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.distribute.replica_context import get_replica_context
from mirrorfit._src.distribute.values import ReduceOp
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.trainers.state import TrainState


class StepConfig(NamedTuple):
    """What a step needs besides its arguments; fixed at ``compile``."""

    adapter: ModuleAdapter
    # (y_true, y_pred) -> per-example loss [batch]; None for a model with its own train_step
    loss: Callable[[Any, Any], jax.Array] | None
    metrics: Sequence[Any]  # mirrorfit.metrics.Metric objects, weighted by the mask only
    optimizer: optax.GradientTransformation
    weighted_metrics: Sequence[Any]  # metrics weighted by sample_weight (and the mask)
    family: StepFamily  # the steps this model runs (`model_hooks.step_family_for`)
    # Whether the built-in train step checks its gradients for NaN/inf and skips the update
    # of a non-finite step and of every later one in the epoch (``fit`` with TerminateOnNaN).
    check_numerics: bool = False
    # params -> params with the Keras-style weights' ``constraint`` s applied after each
    # update, as Keras does (`mirrorfit._src.layers.graph.model_info.weight_constraints`).
    constrain: Callable[[Any], Any] | None = None
    # Whether the optimizer state is split over the replicas (the strategy's
    # ``shard_optimizer_state``): the built-in train step reduce-scatters the gradients and
    # updates blocks of the params (`mirrorfit._src.distribute.zero`).
    shard_optimizer_state: bool = False
    # Whether the built-in train step accumulates each replica's own gradients and
    # all-reduces them once per applied update (``gradient_accumulation_steps``;
    # `mirrorfit._src.trainers.sharded_state`).
    local_accumulation: bool = False


class StepFamily(abc.ABC):
    """Builds the per-replica steps of one kind of model, and reads their statistics.

    A step is a pure per-replica function that the strategy maps over the mesh; it sees this
    replica's shard of the global batch and talks to the other replicas only through
    collectives over the ``"batch"`` axis. Statistics are the running sums of one epoch as
    one float32 vector (`mirrorfit._src.trainers.statistics`); ``kind`` (``"train"`` or
    ``"eval"``) says which step produced them.
    """

    runs_objects = False
    """Whether the steps run the model's own hooks on its objects (`ObjectStep`), whose
    other variables ``fit`` finds by a first trace (`Trainer.symbolic_build`)."""

    takes_param_blocks = False
    """Whether the train step takes the params as this replica's blocks under
    ``shard_params`` and all-gathers them itself (``param_axes`` of the replica context);
    every other step gets them whole (`mirrorfit._src.trainers.sharded_state.on_param_blocks`)."""

    @abc.abstractmethod
    def train_step(self, cfg: StepConfig) -> Callable:
        """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``
        of a batch with real rows (`multi_train_step` runs no filler).

        Args:
            cfg: the compiled configuration.
        """

    @abc.abstractmethod
    def eval_step(self, cfg: StepConfig) -> Callable:
        """The per-replica evaluation step ``(state, statistics, batch) -> statistics``."""

    @abc.abstractmethod
    def statistics_shapes(self, cfg: StepConfig, state: TrainState, batch: Batch,
                          kind: str) -> Any:
        """The pytree of ``jax.ShapeDtypeStruct`` s of one step's statistics (not flat).

        Args:
            cfg: the compiled configuration.
            state: the mirrored `TrainState` (or its shapes).
            batch: a global `Batch` of one step (not stacked), or its shapes.
            kind: ``"train"`` or ``"eval"``.
        """

    @abc.abstractmethod
    def results(self, cfg: StepConfig, stats: Any, kind: str) -> dict[str, Any]:
        """Logs (metric name -> value) from accumulated, unflattened host statistics."""

    def initial_statistics(self, cfg: StepConfig, layout: Any, kind: str) -> np.ndarray:
        """The statistics vector (float32 ``[layout.size]``, host) an epoch or ``evaluate``
        starts from: zeros, as sums start empty.

        Args:
            cfg: the compiled configuration.
            layout: the statistics' `mirrorfit._src.trainers.statistics.StatsLayout`.
            kind: ``"train"`` or ``"eval"``.
        """
        del cfg, kind
        return np.zeros(layout.size, np.float32)

    def multi_train_step(self, cfg: StepConfig) -> Callable:
        """``K`` train steps in one device call, over ``[K, batch, ...]`` inputs.

        A group ends in filler batches (no real rows) when the epoch's steps do not divide
        by ``K``: the loop runs only the steps before them (a trip count all-reduced once
        per group, so every replica runs as many), rather than a branch per step, which
        cost XLA:CPU a copy of the carried state every step (9% of the step at batch 256).
        """
        single = self.train_step(cfg)

        def step(state: TrainState, statistics: jax.Array, batches: Batch):
            real_rows = lax.psum(jnp.sum(batches.mask, axis=1, dtype=jnp.int32), BATCH_AXIS)
            steps = jnp.sum(real_rows > 0)  # the fillers are last

            def body(index, carry):
                batch = jax.tree.map(
                    lambda a: lax.dynamic_index_in_dim(a, index, keepdims=False), batches)
                return single(*carry, batch)

            return lax.fori_loop(0, steps, body, (state, statistics))

        return step


def non_finite_updates(context: Any) -> jax.Array:
    """float32 ``[]``: how many optimizer updates inside the replica ``context`` (a hooked
    step's) skipped non-finite gradients (each noted by
    `mirrorfit._src.optimizers.update.apply_reduced`); what ``fit`` with TerminateOnNaN
    reads."""
    flags = [1.0 - jnp.asarray(finite, jnp.float32) for finite in context.updates_finite]
    return sum(flags, jnp.zeros((), jnp.float32))


def mean_non_param_collections(model_state: Any) -> Any:
    """``model_state`` with every float leaf averaged across replicas (``lax.pmean``).

    The non-param collections a forward pass in training mode returns (BatchNorm's moving
    mean and variance) differ per replica, since each replica sees its own shard of the
    batch; averaged, they stay mirrored. Leaves that are not floats (counters, RNG keys)
    are kept as they are. One all-reduce per float leaf; outside a replica function (one
    replica) the average is the value itself.

    Args:
        model_state: this replica's non-param collections after a training forward pass
            (a pytree, ``{}`` when there are none).

    Returns:
        A pytree like ``model_state``, identical on every replica.
    """
    context = get_replica_context()
    return jax.tree.map(
        lambda v: context.all_reduce(ReduceOp.MEAN, v) if jnp.issubdtype(v.dtype, jnp.inexact)
        else v, model_state)
