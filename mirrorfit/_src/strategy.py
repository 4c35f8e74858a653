"""The distribution strategy: devices, the 1-D ``"batch"`` mesh, placement and per-replica calls.

`MirroredStrategy` owns everything that knows about devices:

* the mesh (one replica per device, axis ``"batch"``);
* placement: `replicate` (``P()``, mirrored on every device) and `shard_batch`
  (``P("batch")``, each replica holds ``global_batch / num_replicas_in_sync`` rows);
* compiled per-replica functions: `compile_replica_fn` maps a per-replica
  function over the mesh with ``jax.shard_map`` inside ``jax.jit``.

The scope stack (`scope`, `get_strategy`) lives here too, because "created inside
``strategy.scope()``" is what decides where a model's variables are mirrored.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

BATCH_AXIS = "batch"
"""Name of the mesh axis that replicas (and the global batch) are laid out along."""

_scope_stack = threading.local()


class MirroredStrategy:
    """Synchronous data parallelism: one replica per device, variables mirrored on all of them.

    The counterpart of ``tf.distribute.MirroredStrategy``. Params and optimizer state are
    replicated (``NamedSharding(mesh, P())``); every global batch is split along its leading
    dimension into ``num_replicas_in_sync`` equal per-replica shards
    (``NamedSharding(mesh, P("batch"))``); gradients are all-reduced across replicas before a
    single optimizer update, so every replica stays identical.

    Args:
        devices: the ``jax.Device`` s to mirror over, one replica each. ``None`` means every
            local device of the default backend (the CPU when there is no accelerator).

    Raises:
        TypeError: if ``devices`` is not a sequence of ``jax.Device``.
        ValueError: if ``devices`` is empty, has duplicates, mixes platforms, or names a
            device that this process cannot address.

    Example:
        >>> strategy = MirroredStrategy()
        >>> with strategy.scope():
        ...     model = mf.Sequential([nn.Dense(10)], input_shape=(784,))
        >>> batch_size = 32 * strategy.num_replicas_in_sync  # the global batch
    """

    def __init__(self, devices: Sequence[jax.Device] | None = None):
        self._devices = self._resolve_devices(devices)
        self._mesh = Mesh(np.asarray(self._devices, dtype=object), (BATCH_AXIS,))
        self._replicated = NamedSharding(self._mesh, P())
        self._batch_sharded = NamedSharding(self._mesh, P(BATCH_AXIS))
        self._run_cache: dict[Any, Callable[..., Any]] = {}  # compiled fns of `run`
        self._in_flight: Any = None  # outputs of the newest run/reduce/gather dispatch

    def _resolve_devices(self, devices: Sequence[jax.Device] | None) -> tuple[jax.Device, ...]:
        """The replicas' devices; `MultiWorkerMirroredStrategy` takes every process's."""
        return _validate_devices(devices)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_replicas_in_sync={self.num_replicas_in_sync}, "
            f"platform={self._devices[0].platform!r})"
        )

    @property
    def num_replicas_in_sync(self) -> int:
        """Number of replicas (devices) that take part in every all-reduce."""
        return len(self._devices)

    @property
    def devices(self) -> tuple[jax.Device, ...]:
        """The devices, one per replica, in mesh order."""
        return self._devices

    @property
    def mesh(self) -> Mesh:
        """The 1-D ``jax.sharding.Mesh`` over `devices`, with axis name ``"batch"``."""
        return self._mesh

    @property
    def replicated_sharding(self) -> NamedSharding:
        """``NamedSharding(mesh, P())``: a full copy on every replica."""
        return self._replicated

    @property
    def batch_sharding(self) -> NamedSharding:
        """``NamedSharding(mesh, P("batch"))``: leading dimension split across replicas."""
        return self._batch_sharded

    @contextlib.contextmanager
    def scope(self) -> Iterator[MirroredStrategy]:
        """Makes this the current strategy: models created inside are mirrored on its devices."""
        stack = _stack()
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()

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
        """
        from mirrorfit._src.values import Mirrored, unwrap_mirrored

        return jax.tree.map(Mirrored, self.replicate_arrays(unwrap_mirrored(tree)))

    def replicate_arrays(self, tree: Any) -> Any:
        """`replicate` without the `Mirrored` wrappers: a pytree of plain ``jax.Array`` s."""
        bad = [type(leaf).__name__ for leaf in jax.tree.leaves(tree)
               if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, bool))]
        if bad:
            raise TypeError("replicate needs a pytree of arrays or numbers. Received: tree with "
                            f"leaves of type {sorted(set(bad))}")
        return jax.device_put(tree, self._replicated)

    # -- custom training loops (tf.distribute API); implemented in run.py and input.py ------

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

        Raises:
            TypeError: if ``fn`` is not callable or ``args`` is not a tuple.
        """
        from mirrorfit._src import run as run_lib

        return run_lib.run(self, fn, args, kwargs)

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
        from mirrorfit._src import run as run_lib

        return run_lib.reduce(self, reduce_op, value, axis)

    def gather(self, value: Any, axis: int = 0) -> Any:
        """Concatenates per-replica values along ``axis``, dropping padding rows (axis 0)."""
        from mirrorfit._src import run as run_lib

        return run_lib.gather(self, value, axis)

    def experimental_local_results(self, value: Any) -> tuple:
        """This process's per-replica components of ``value``, in replica order."""
        from mirrorfit._src import run as run_lib

        return run_lib.local_results(self, value)

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
        from mirrorfit._src import input as input_lib

        return input_lib.experimental_distribute_dataset(self, dataset)

    def distribute_datasets_from_function(self, dataset_fn: Callable[..., Any]) -> Any:
        """Builds one input pipeline per process with ``dataset_fn(mf.InputContext)``.

        ``dataset_fn`` returns an iterable of per-replica batches; each step takes one per
        local replica, as in TF. Returns the same kind of iterable as
        `experimental_distribute_dataset`.
        """
        from mirrorfit._src import input as input_lib

        return input_lib.distribute_datasets_from_function(self, dataset_fn)

    def shard_batch(self, tree: Any, *, leading_axes: int = 0) -> Any:
        """Places a pytree of host arrays as global arrays split over replicas.

        Args:
            tree: pytree of NumPy arrays. Axis ``leading_axes`` of every leaf is the global
                batch dimension and must divide by `num_replicas_in_sync`.
            leading_axes: number of unsplit axes before the batch axis (1 for a stack of
                ``K`` global batches ``[K, global_batch, ...]``).

        Returns:
            The same pytree of ``jax.Array`` s, each replica holding
            ``global_batch / num_replicas_in_sync`` rows.
        """
        sharding = self._batch_sharded
        if leading_axes:
            sharding = NamedSharding(self._mesh, P(*([None] * leading_axes), BATCH_AXIS))
        if jax.process_count() == 1:  # one call for the whole tree: one batched transfer
            return jax.make_array_from_process_local_data(sharding, tree)

        def place(leaf):
            # Several processes: each holds the whole global batch and passes on only the
            # rows its own devices own.
            leaf = np.asarray(leaf)
            rows = _process_rows(sharding, leaf.shape, leading_axes)
            local = leaf[(slice(None),) * leading_axes + (rows,)]
            return jax.make_array_from_process_local_data(sharding, local, leaf.shape)

        return jax.tree.map(place, tree)

    def shard_local_batch(self, tree: Any) -> Any:
        """Places this process's rows of a global batch (one input pipeline per process).

        Args:
            tree: pytree of NumPy arrays ``[local_rows, ...]``; every process passes the same
                ``local_rows``, a multiple of its local replica count.

        Returns:
            Global ``jax.Array`` s ``[local_rows * process_count, ...]`` sharded ``P("batch")``,
            process ``p`` contributing rows ``p * local_rows`` onwards.
        """
        count = jax.process_count()
        return jax.tree.map(
            lambda leaf: jax.make_array_from_process_local_data(
                self._batch_sharded, leaf, (leaf.shape[0] * count, *leaf.shape[1:])), tree)

    def fetch(self, tree: Any) -> Any:
        """Copies a pytree of global arrays to the host as NumPy, on every process.

        Arrays split over the replicas of several processes are all-gathered first, so every
        process calls this at the same point. Mirrored arrays are read from a local copy.

        Args:
            tree: pytree of ``jax.Array`` s (any sharding on this mesh) or NumPy arrays.

        Returns:
            The same pytree of NumPy arrays with the arrays' global shapes.
        """

        def one(leaf):
            if not isinstance(leaf, jax.Array) or leaf.is_fully_addressable:
                return np.asarray(leaf)
            if leaf.is_fully_replicated:
                return np.asarray(leaf.addressable_data(0))
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))

        return jax.tree.map(one, tree)

    def compile_replica_fn(
        self,
        fn: Callable[..., Any],
        in_specs: Any,
        out_specs: Any,
        *,
        donate_argnums: int | tuple[int, ...] = (),
    ) -> Callable[..., Any]:
        """Maps a per-replica function over the mesh: ``jax.jit(jax.shard_map(fn, ...))``.

        Inside ``fn``, arrays whose spec is ``P("batch")`` arrive as this replica's shard,
        arrays with spec ``P()`` arrive whole, and collectives (``lax.psum``, ``lax.pmean``,
        ``lax.axis_index``) use the axis name ``"batch"``.

        Args:
            fn: the per-replica function.
            in_specs: a pytree prefix of ``PartitionSpec`` s for ``fn``'s positional args.
            out_specs: a pytree prefix of ``PartitionSpec`` s for ``fn``'s outputs.
            donate_argnums: positional args whose buffers the call may reuse.

        Returns:
            The compiled callable. It is compiled on first call and again only when argument
            shapes or dtypes change.
        """
        mapped = jax.shard_map(
            fn, mesh=self._mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
        )
        return jax.jit(mapped, donate_argnums=donate_argnums)


def get_strategy() -> MirroredStrategy:
    """Returns the innermost active strategy, or a default single-device strategy."""
    stack = _stack()
    return stack[-1] if stack else _default_strategy()


def in_scope() -> bool:
    """Whether any ``strategy.scope()`` is active in this thread."""
    return bool(_stack())


def _stack() -> list[MirroredStrategy]:
    if not hasattr(_scope_stack, "strategies"):
        _scope_stack.strategies = []
    return _scope_stack.strategies


@functools.cache
def _default_strategy() -> MirroredStrategy:
    return MirroredStrategy(jax.local_devices()[:1])


def _process_rows(sharding: NamedSharding, shape: tuple[int, ...], axis: int) -> slice:
    """The contiguous rows of batch axis ``axis`` that this process's devices own."""
    owned = sorted({index[axis].indices(shape[axis])[:2]
                    for index in sharding.addressable_devices_indices_map(shape).values()})
    start, stop = owned[0][0], owned[-1][1]
    if sum(b - a for a, b in owned) != stop - start:
        raise ValueError(f"This process's devices own non-contiguous rows {owned} of the batch; "
                         f"order the mesh devices by process. Received: sharding={sharding}")
    return slice(start, stop)


def _validate_devices(devices: Sequence[jax.Device] | None) -> tuple[jax.Device, ...]:
    if devices is None:
        return tuple(jax.local_devices())
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence):
        raise TypeError(
            "devices must be a list of jax.Device (e.g. jax.local_devices()[:2]) or None for "
            f"all local devices. Received: devices={devices!r}"
        )
    devices = tuple(devices)
    if not devices:
        raise ValueError(
            "devices must name at least one device; pass None to use every local device. "
            "Received: devices=[]"
        )
    bad = [d for d in devices if not isinstance(d, jax.Device)]
    if bad:
        raise TypeError(
            "devices must contain jax.Device objects, as returned by jax.devices(). "
            f"Received: devices={list(devices)!r} (not devices: {bad!r})"
        )
    duplicates = sorted({str(d) for d in devices if devices.count(d) > 1})
    if duplicates:
        raise ValueError(
            "devices must not repeat a device: each device holds exactly one replica. "
            f"Received: devices={list(devices)!r} (repeated: {duplicates})"
        )
    platforms = sorted({d.platform for d in devices})
    if len(platforms) > 1:
        raise ValueError(
            "devices must all be on one platform; a mirrored all-reduce cannot span "
            f"{' and '.join(platforms)}. Received: devices={list(devices)!r}"
        )
    local = set(jax.local_devices(backend=platforms[0]))
    missing = [d for d in devices if d not in local]
    if missing:
        raise ValueError(
            "devices must be addressable by this process; available devices are "
            f"{jax.local_devices(backend=platforms[0])}. Received: devices={list(devices)!r} "
            f"(not available: {missing})"
        )
    return devices
