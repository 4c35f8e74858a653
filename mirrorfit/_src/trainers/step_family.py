"""Which steps a compiled model runs, and the pieces every step family shares.

``compile`` chooses one `StepFamily` for a model, once (`model_hooks.step_family_for`): the
built-in steps (`mirrorfit._src.trainers.steps.BuiltinSteps`), or the steps of a `Model`
subclass that overrides ``compute_loss``, ``train_step`` or ``test_step``
(`mirrorfit._src.trainers.model_hooks.HookedSteps`). `StepConfig` carries it with the loss,
metrics and optimizer, and the trainer builds every step through it, so no step asks which
family it belongs to.

What a train step of either family must do alike is written here once:

* `skip_filler`: a global batch with no real rows (the filler that completes the last
  ``steps_per_execution`` group) leaves the carried state unchanged, by a ``lax.cond``;
* `mean_non_param_collections`: after an update, the float leaves of the non-param
  collections (BatchNorm's moving statistics) are averaged across replicas, so they stay
  mirrored;
* `StepFamily.multi_train_step`: ``K`` train steps in one device call.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

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

Carry = TypeVar("Carry")


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
    # update, as Keras does (`mirrorfit._src.layers.model_info.weight_constraints`).
    constrain: Callable[[Any], Any] | None = None
    # Whether the optimizer state is split over the replicas (the strategy's
    # ``shard_optimizer_state``): the built-in train step reduce-scatters the gradients and
    # updates blocks of the params (`mirrorfit._src.distribute.zero`).
    shard_optimizer_state: bool = False
    # Whether the built-in train step accumulates each replica's own gradients and
    # all-reduces them once per applied update (``gradient_accumulation_steps``;
    # `mirrorfit._src.trainers.accumulation`).
    local_accumulation: bool = False


class StepFamily(abc.ABC):
    """Builds the per-replica steps of one kind of model, and reads their statistics.

    A step is a pure per-replica function that the strategy maps over the mesh; it sees this
    replica's shard of the global batch and talks to the other replicas only through
    collectives over the ``"batch"`` axis. Statistics are the running sums of one epoch as
    one float32 vector (`mirrorfit._src.trainers.statistics`); ``kind`` (``"train"`` or
    ``"eval"``) says which step produced them.
    """

    @abc.abstractmethod
    def train_step(self, cfg: StepConfig, *, skip_empty: bool = False) -> Callable:
        """The per-replica train step ``(state, statistics, batch) -> (state, statistics)``.

        Args:
            cfg: the compiled configuration.
            skip_empty: whether a batch with no real rows leaves the state and statistics
                unchanged (`skip_filler`); ``True`` inside `multi_train_step`.
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
        """``K`` train steps in one device call: ``lax.scan`` over ``[K, batch, ...]`` inputs.

        A filler batch at the end of the group (no real rows) changes nothing.
        """
        single = self.train_step(cfg, skip_empty=True)

        def step(state: TrainState, statistics: jax.Array, batches: Batch):
            def body(carry, batch):
                return single(*carry, batch), None

            return lax.scan(body, (state, statistics), batches)[0]

        return step


def skip_filler(global_real_rows: jax.Array, update: Callable[[Carry], Carry],
                carry: Carry) -> Carry:
    """``update(carry)``, or ``carry`` unchanged when the global batch has no real rows.

    A branch (``lax.cond``), not a select between the new and the old carry: a select would
    read and write all params and optimizer state once more on every step, and would run
    the whole update on a filler. ``global_real_rows`` must be all-reduced (the same on
    every replica), so every replica takes the same branch and the collectives inside
    ``update`` stay matched.

    Args:
        global_real_rows: float32 ``[]``, real rows of the global batch (summed over replicas).
        update: the step's update, ``carry -> carry`` of the same structure.
        carry: what a filler leaves as it is: the `TrainState`, or ``(state, statistics)``.

    Returns:
        The updated ``carry``, or ``carry`` itself for a filler.
    """
    return lax.cond(global_real_rows > 0, update, lambda carry: carry, carry)


def update_batch(batch: Batch, update: Callable[[Carry], Carry], carry: Carry, *,
                 skip_empty: bool) -> Carry:
    """``update(carry)``; with ``skip_empty``, `skip_filler` on ``batch`` 's real rows
    (all-reduced here), for the steps whose update is a hook's (custom and Keras steps)."""
    if not skip_empty:
        return update(carry)
    real_rows = lax.psum(jnp.sum(batch.mask, dtype=jnp.float32), BATCH_AXIS)
    return skip_filler(real_rows, update, carry)


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
