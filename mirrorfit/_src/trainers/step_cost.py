"""What one train step costs: its global batch and XLA's estimate of its FLOPs.

`Trainer.train_step_cost` answers `mirrorfit._src.callbacks.contract.StepCost` from here.
The trainer records the shapes and shardings of the train call's arguments (`shapes_of`)
each epoch; `step_cost` turns them into a cost without running anything:

* one step per call: the executable ``fit`` runs, from JAX's compile cache (``lower`` and
  ``compile`` with the shapes it was called with find it there: nothing compiles again),
  and that executable's ``cost_analysis()``;
* ``steps_per_execution = K > 1``: the call is a ``lax.scan`` of ``K`` steps, and XLA's
  cost analysis counts a loop body once whatever its trip count, so the cost is read from
  one step lowered alone with one step's shapes (``Lowered.cost_analysis()``, on the HLO
  before XLA's optimizations; traced, never compiled).

Both analyses see the per-replica program (each device runs one), so its FLOPs times the
replica count are the step's FLOPs over all replicas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from mirrorfit._src.callbacks.contract import StepCost
from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.distribute.run import compile_per_replica, specs_like
from mirrorfit._src.trainers.resident import ResidentBatch, accepting_indices


def shapes_of(args: Any) -> Any:
    """``jax.ShapeDtypeStruct`` s (with their shardings) of a call's argument pytree; NumPy
    leaves get no sharding, as ``jit`` takes them."""
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(
        a.shape, a.dtype, sharding=getattr(a, "sharding", None)), args)


def _one_of_stack(struct: jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """The shape of one step's leaf from a ``[K, ...]`` stacked one (the ``K`` axis is not
    split over replicas: its spec entry is ``None``)."""
    sharding = struct.sharding
    if isinstance(sharding, NamedSharding):
        sharding = NamedSharding(sharding.mesh, P(*sharding.spec[1:]))
    return jax.ShapeDtypeStruct(struct.shape[1:], struct.dtype, sharding=sharding)


def _flops(analysis: Any) -> float | None:
    """The ``"flops"`` entry of a cost analysis (a dict; a list of one dict in older JAX)."""
    if isinstance(analysis, (list, tuple)):
        analysis = analysis[0] if analysis else None
    flops = analysis.get("flops") if isinstance(analysis, dict) else None
    return float(flops) if flops is not None and flops > 0 else None


def step_cost(mesh: DeviceMesh, train_fn: Any, shapes: tuple[Any, Any, Batch],
              single_step: Callable | None = None) -> StepCost:
    """The `StepCost` of one train step.

    Args:
        mesh: the strategy the step runs on.
        train_fn: the train call ``fit`` runs (a ``jax.jit`` function, already called with
            arguments of ``shapes``).
        shapes: `shapes_of` ``(state, statistics, batch)`` as ``train_fn`` was called (the
            batch may be a device-resident data set's `ResidentBatch`).
        single_step: ``None`` when ``train_fn`` runs one step; with ``steps_per_execution >
            1``, the per-replica single train step, ``(state, statistics, batch) -> (state,
            statistics)``, and the batch in ``shapes`` is stacked ``[K, global_batch, ...]``.

    Returns:
        The padded global batch of one step and its FLOPs over all replicas (``None`` where
        the backend has no cost analysis).
    """
    state, statistics, batch = shapes
    if single_step is None:
        analysis = train_fn.lower(*shapes).compile().cost_analysis()
    else:
        if isinstance(batch, ResidentBatch):  # the data set is whole; one step's indices
            batch = batch._replace(index=_one_of_stack(batch.index),
                                   mask=_one_of_stack(batch.mask))
            single_step = accepting_indices(single_step)
        else:
            batch = jax.tree.map(_one_of_stack, batch)
        args = (state, statistics, batch)
        one = compile_per_replica(mesh, single_step, specs_like(mesh, args), (P(), P()))
        analysis = one.lower(*args).cost_analysis()  # type: ignore[attr-defined]
    flops = _flops(analysis)
    return StepCost(int(batch.mask.shape[0]),
                    None if flops is None else flops * mesh.num_replicas_in_sync)
