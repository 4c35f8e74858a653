"""`MirroredStrategy`: the tf.distribute-style front end over the device mesh.

`mirrorfit._src.distribute.mesh.DeviceMesh` owns devices, the mesh, placement and compiling; this
module adds what ``tf.distribute.MirroredStrategy`` users call:

* the scope stack (`MirroredStrategy.scope`, `get_strategy`): "created inside
  ``strategy.scope()``" decides where a model's variables are mirrored;
* `MirroredStrategy.replicate`, which returns `Mirrored` values;
* custom loops: ``run``, ``reduce``, ``gather`` and ``experimental_local_results``
  (`mirrorfit._src.distribute.run`), ``experimental_distribute_dataset`` and
  ``distribute_datasets_from_function`` (`mirrorfit._src.distribute.distributed_input`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.core

from mirrorfit._src.distribute import distributed_input
from mirrorfit._src.distribute.mesh import Device, DeviceMesh
from mirrorfit._src.distribute.run import Runner
from mirrorfit._src.distribute.values import Mirrored, unwrap_mirrored
from mirrorfit._src.utils.checks import MirrorfitWarning
from mirrorfit._src.variables import placement

_scope_stack = threading.local()
_warned_outside_scope = False

OUTSIDE_SCOPE_WARNING = (
    "This model was created outside any strategy.scope() while {n} devices are available, so "
    "it trains on one device only. To mirror it on all of them, create it inside "
    "`with mf.MirroredStrategy().scope():`."
)


class MirroredStrategy(DeviceMesh):
    """Synchronous data parallelism: one replica per device, variables mirrored on all of them.

    The counterpart of ``tf.distribute.MirroredStrategy``. Params and optimizer state are
    replicated (``NamedSharding(mesh, P())``); every global batch is split along its leading
    dimension into ``num_replicas_in_sync`` equal per-replica shards
    (``NamedSharding(mesh, P("batch"))``); gradients are all-reduced across replicas before a
    single optimizer update, so every replica stays identical.

    With ``shard_optimizer_state=True`` (ZeRO-1/2 over the same replicas), each replica
    holds only its block of every optimizer-state leaf: ``fit`` reduce-scatters the
    gradients instead of all-reducing them, updates its block of the params and all-gathers
    them, so the params stay mirrored and the results equal the mirrored run's (see
    ``docs/guides/sharded_optimizer_state.md``).

    With ``shard_params=True`` (ZeRO-3/FSDP, a departure from tf.distribute, which has no
    such option) the params are split too: each replica holds its block of every param
    leaf, the step all-gathers them for the forward and backward passes (not kept from one
    to the other), reduce-scatters the gradients and updates only its blocks; the results
    equal the mirrored run's (see ``docs/guides/sharded_params.md``).

    Args:
        devices: the ``jax.Device`` s to mirror over, one replica each. ``None`` means every
            local device of the default backend (the CPU when there is no accelerator).
        shard_optimizer_state: split the optimizer state over the replicas (each leaf along
            its first axis that divides by ``num_replicas_in_sync``; others stay
            mirrored) instead of mirroring it. For ``fit``/``train_on_batch`` with the
            built-in train step, and an optimizer object's ``apply_gradients`` inside
            ``run`` (built there); ``model.opt_state`` keeps its full shapes, and
            checkpoints hold the full state.
        shard_params: split the params over the replicas too, each leaf along the axis the
            optimizer state uses (leaves with none stay mirrored, and are named once in a
            log line and in ``model.summary()``); implies ``shard_optimizer_state``.
            ``model.params``, ``get_weights``, checkpoints and saved models hold the full
            params.

    Raises:
        TypeError: if ``devices`` is not a sequence of ``jax.Device``, or
            ``shard_optimizer_state`` or ``shard_params`` is not a bool.
        ValueError: if ``devices`` is empty, has duplicates, mixes platforms, or names a
            device that this process cannot address.

    Example:
        >>> strategy = MirroredStrategy()
        >>> with strategy.scope():
        ...     model = mf.Sequential([nn.Dense(10)], input_shape=(784,))
        >>> batch_size = 32 * strategy.num_replicas_in_sync  # the global batch
    """

    def __init__(self, devices: Sequence[Device] | None = None, *,
                 shard_optimizer_state: bool = False, shard_params: bool = False):
        super().__init__(devices, shard_optimizer_state=shard_optimizer_state,
                         shard_params=shard_params)
        self._runner = Runner(self)

    def __repr__(self) -> str:
        sharded = (", shard_params=True" if self.shard_params else
                   ", shard_optimizer_state=True" if self.shard_optimizer_state else "")
        return (
            f"{type(self).__name__}(num_replicas_in_sync={self.num_replicas_in_sync}, "
            f"platform={self.devices[0].platform!r}{sharded})"
        )

    @contextlib.contextmanager
    def scope(self) -> Iterator[MirroredStrategy]:
        """Makes this the current strategy: models and `mirrorfit.Variable` s created inside
        are mirrored on its devices."""
        stack = _stack()
        stack.append(self)
        try:
            with placement.placing(self._place_variable):
                yield self
        finally:
            stack.pop()

    def _place_variable(self, value: Any) -> Any:
        if isinstance(value, jax.core.Tracer):
            return value
        return self.replicate_arrays(value)

    def replicate(self, tree: Any) -> Any:
        """Places a pytree of arrays mirrored on every replica; idempotent.

        The functional counterpart of "variables created in ``scope()`` are mirrored".

        Args:
            tree: pytree of NumPy or JAX arrays (or numbers), any shapes.

        Returns:
            The same pytree with every leaf a `mirrorfit.Mirrored`: a ``jax.Array`` with
            sharding ``NamedSharding(mesh, P())`` that prints as ``Mirrored(float32[3], on 8
            devices)`` and otherwise behaves as the array.

        Raises:
            TypeError: if a leaf is not an array or a number.
            ValueError: if ``tree`` is ``None`` (e.g. the params of a model that is not built
                yet).
        """
        if tree is None:
            raise ValueError(
                "replicate needs a pytree of arrays, not None (an unbuilt model's params?). Build the model first: model.build(input_shape), or call it on a "
                f"batch. Received: tree={tree!r}")
        return jax.tree.map(Mirrored, self.replicate_arrays(unwrap_mirrored(tree)))

    # -- custom training loops (tf.distribute API); implemented in run.py and distributed_input.py

    def run(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None) -> Any:
        """Runs ``fn`` once per replica, as ``tf.distribute.Strategy.run``.

        Distributed batches and `PerReplica` values arrive as the replica's own shard
        (``[global_batch / num_replicas_in_sync, ...]``); replicated arrays, NumPy arrays and
        Python constants arrive whole. Inside ``fn``, `mirrorfit.get_replica_context` gives
        the collectives. Compiled once per (fn, argument structure, shapes, constants).

        Returns:
            ``fn``'s output structure with every leaf a `PerReplica` (a global array
            ``[num_replicas_in_sync, ...]`` sharded over the mesh). Outputs whose second axis
            is the per-replica batch of a padded batch carry its mask.
            A pytree ``fn`` returns wrapped in ``mf.Mirrored`` (a value every replica
            computes identically, e.g. params after `mirrorfit.apply_gradients`) comes back
            with `Mirrored` leaves instead; ``MIRRORFIT_CHECK_MIRRORED=1`` verifies that they
            agree across replicas (`mirrorfit._src.distribute.mirrored_outputs`).

        Raises:
            TypeError: if ``fn`` is not callable or ``args`` is not a tuple.
            ValueError: with ``MIRRORFIT_CHECK_MIRRORED=1``, naming a `Mirrored` output leaf
                whose replicas differ.
        """
        return self._runner.run(fn, args, kwargs)

    def reduce(self, reduce_op: Any, value: Any, axis: int | None = None) -> Any:
        """Combines per-replica values, as ``tf.distribute.Strategy.reduce``.

        Args:
            reduce_op: ``mf.ReduceOp.SUM``/``MEAN`` or its name.
            value: a pytree of `PerReplica` (a non-distributed value counts as mirrored).
            axis: ``None`` reduces across replicas only; an int also reduces that axis of
                each replica's value. With ``axis=0`` over a padded batch, padding rows are
                dropped and MEAN divides by the number of real rows.

        Returns:
            Replicated ``jax.Array`` (s).

        Raises:
            ValueError: for an unknown op, an axis outside the value's rank, or SUM of a
                non-distributed value.
        """
        return self._runner.reduce(reduce_op, value, axis)

    def gather(self, value: Any, axis: int = 0) -> Any:
        """Concatenates per-replica values along ``axis``, dropping padding rows (axis 0)."""
        return self._runner.gather(value, axis)

    def experimental_local_results(self, value: Any) -> tuple:
        """This process's per-replica components of ``value``, in replica order."""
        return self._runner.local_results(value)

    def experimental_distribute_dataset(self, dataset: Any) -> Any:
        """Distributes an iterable of global batches over the replicas.

        Args:
            dataset: any iterable of global batches (pytrees of arrays ``[global_batch, ...]``).

        Returns:
            An iterable of pytrees of global ``jax.Array`` s sharded ``P("batch")``, each
            replica holding ``global_batch / num_replicas_in_sync`` rows. A batch that does not
            divide is padded; `mirrorfit.batch_mask` returns which rows are real. The next
            batch is transferred while the current one is used.
        """
        return distributed_input.experimental_distribute_dataset(self, dataset)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any]) -> Any:
        """Builds one input pipeline per process with ``dataset_fn(mf.InputContext)``.

        ``dataset_fn`` returns an iterable of per-replica batches; each step takes one per
        local replica, as in TF. Returns the same kind of iterable as
        `experimental_distribute_dataset`.
        """
        return distributed_input.distribute_datasets_from_function(self, dataset_fn)


def get_strategy() -> MirroredStrategy:
    """Returns the innermost active strategy, or a default single-device strategy."""
    stack = _stack()
    return stack[-1] if stack else _default_strategy()


def in_scope() -> bool:
    """Whether any ``strategy.scope()`` is active in this thread."""
    return bool(_stack())


def warn_if_outside_scope() -> None:
    """Warns once per process when a model is created outside every scope on several devices."""
    global _warned_outside_scope
    n = jax.local_device_count()
    if not in_scope() and n > 1 and not _warned_outside_scope:
        _warned_outside_scope = True
        warnings.warn(OUTSIDE_SCOPE_WARNING.format(n=n), MirrorfitWarning, stacklevel=4)


def _stack() -> list[MirroredStrategy]:
    if not hasattr(_scope_stack, "strategies"):
        _scope_stack.strategies = []
    return _scope_stack.strategies


@functools.cache
def _default_strategy() -> MirroredStrategy:
    return MirroredStrategy(jax.local_devices()[:1])
