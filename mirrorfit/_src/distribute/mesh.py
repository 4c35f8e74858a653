"""The bottom layer: devices, the 1-D ``"batch"`` mesh, placement, compiling and dispatch.

`DeviceMesh` owns everything that knows about devices and processes:

* the mesh (one replica per device, axis `BATCH_AXIS`);
* placement: `DeviceMesh.replicate_arrays` (``P()``, mirrored on every device),
  `DeviceMesh.shard_batch` (``P("batch")``, each replica holds
  ``global_batch / num_replicas_in_sync`` rows) and `DeviceMesh.fetch` (back to NumPy);
* compiling a per-replica function: `DeviceMesh.compile_replica_fn` maps it over the mesh
  with ``jax.shard_map`` inside ``jax.jit`` (plain ``jax.jit`` when there is one replica);
* the cross-process consistency check (`check_same_across_processes`) and the chief's
  decisions shared with every process (`from_chief`).

`InFlight` is the one dispatch bound every loop uses: at most two device calls with
collectives are queued. This module imports nothing else from mirrorfit; every other layer
builds on it.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

# ``jax.Device`` for annotations: jaxlib ships no type stubs for it, so pyright rejects
# ``jax.Device`` in a type expression.
Device: TypeAlias = jax.Device  # pyright: ignore[reportInvalidTypeForm]

BATCH_AXIS = "batch"
"""Name of the mesh axis that replicas (and the global batch) are laid out along."""


class DeviceMesh:
    """A 1-D mesh with one replica per device, and placement on it.

    Args:
        devices: the ``jax.Device`` s, one replica each. ``None`` means every local device
            of the default backend (the CPU when there is no accelerator).
        shard_optimizer_state: split every optimizer-state leaf over the replicas (ZeRO-1/2,
            `mirrorfit._src.distribute.zero`) instead of mirroring it.
        shard_params: split the params too (ZeRO-3/FSDP, `mirrorfit._src.distribute.fsdp`);
            implies ``shard_optimizer_state``.

    Raises:
        TypeError: if ``devices`` is not a sequence of ``jax.Device``, or
            ``shard_optimizer_state`` or ``shard_params`` is not a bool.
        ValueError: if ``devices`` is empty, has duplicates, mixes platforms, or names a
            device that this process cannot address.
    """

    def __init__(self, devices: Sequence[Device] | None = None, *,
                 shard_optimizer_state: bool = False, shard_params: bool = False):
        if not isinstance(shard_optimizer_state, bool):
            raise TypeError("shard_optimizer_state must be a bool: True splits the optimizer "
                            "state over the replicas. Received: "
                            f"shard_optimizer_state={shard_optimizer_state!r}")
        if not isinstance(shard_params, bool):
            raise TypeError("shard_params must be a bool: True splits the params and the "
                            f"optimizer state. Received: shard_params={shard_params!r}")
        self._shard_params = shard_params
        self._shard_optimizer_state = shard_optimizer_state or shard_params
        self._devices = self._resolve_devices(devices)
        self._mesh = Mesh(np.asarray(self._devices, dtype=object), (BATCH_AXIS,))
        self._replicated = NamedSharding(self._mesh, P())
        self._batch_sharded = NamedSharding(self._mesh, P(BATCH_AXIS))
        self._single_replica = len(self._devices) == 1 and jax.process_count() == 1

    def _resolve_devices(self, devices: Sequence[Device] | None) -> tuple[Device, ...]:
        """The replicas' devices; `MultiWorkerMirroredStrategy` takes every process's."""
        return _validate_devices(devices)

    @property
    def num_replicas_in_sync(self) -> int:
        """Number of replicas (devices) that take part in every all-reduce."""
        return len(self._devices)

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices, one per replica, in mesh order."""
        return self._devices

    @property
    def single_replica(self) -> bool:
        """One device in one process: steps compile to plain ``jax.jit``
        (`compile_replica_fn`), and a step's call may take a host batch
        (`mirrorfit._src.distribute.batch.takes_host_batch`)."""
        return self._single_replica

    @property
    def shard_optimizer_state(self) -> bool:
        """Whether optimizer-state leaves are split over the replicas (ZeRO-1/2) rather than
        mirrored; the train step then reduce-scatters the gradients
        (`mirrorfit._src.distribute.zero`)."""
        return self._shard_optimizer_state

    @property
    def shard_params(self) -> bool:
        """Whether param leaves are split over the replicas too (ZeRO-3/FSDP, implying
        `shard_optimizer_state`): each step all-gathers them (`mirrorfit._src.distribute.fsdp`)."""
        return self._shard_params

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

    def replicate_arrays(self, tree: Any) -> Any:
        """Places a pytree of arrays mirrored (``P()``) on every replica; idempotent.

        Args:
            tree: pytree of NumPy or JAX arrays (or numbers), any shapes.

        Returns:
            The same pytree of ``jax.Array`` s with sharding `replicated_sharding`.

        Raises:
            TypeError: if a leaf is not an array or a number.
        """
        bad = [type(leaf).__name__ for leaf in jax.tree.leaves(tree)
               if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, bool))]
        if bad:
            raise TypeError("replicate needs a pytree of arrays or numbers. Received: tree with "
                            f"leaves of type {sorted(set(bad))}")
        return jax.device_put(tree, self._replicated)

    def placed_here(self, value: Any) -> Any:
        """A concrete ``value`` on other devices mirrored on this mesh's, now, also while a
        function is traced (a model created outside ``strategy.scope()``, read in the first
        trace of ``run``: an array of another mesh cannot enter this mesh's per-replica
        function); any other value as it is."""
        sharding = getattr(value, "sharding", None)
        if (not isinstance(value, jax.Array) or sharding is None
                or sharding.device_set == self._replicated.device_set):
            return value
        with jax.ensure_compile_time_eval():
            return jax.device_put(value, self._replicated)

    def _batch_sharding(self, leading_axes: int) -> NamedSharding:
        """``P("batch")`` on axis ``leading_axes``, after that many unsplit axes."""
        if not leading_axes:
            return self._batch_sharded
        return NamedSharding(self._mesh, P(*([None] * leading_axes), BATCH_AXIS))

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
        sharding = self._batch_sharding(leading_axes)
        if jax.process_count() == 1:  # one call for the whole tree: one batched transfer
            # (40-60 us per batch cheaper than make_array_from_process_local_data here)
            return jax.device_put(tree, sharding)

        def place(leaf):
            # Several processes: each holds the whole global batch and passes on only the
            # rows its own devices own.
            leaf = np.asarray(leaf)
            rows = _process_rows(sharding, leaf.shape, leading_axes)
            local = leaf[(slice(None),) * leading_axes + (rows,)]
            return jax.make_array_from_process_local_data(sharding, local, leaf.shape)

        return jax.tree.map(place, tree)

    def shard_local_batch(self, tree: Any, *, leading_axes: int = 0) -> Any:
        """Places this process's rows of a global batch (one input pipeline per process).

        Args:
            tree: pytree of NumPy arrays ``[local_rows, ...]`` (``[K, local_rows, ...]`` with
                ``leading_axes=1``); every process passes the same ``local_rows``, a multiple
                of its local replica count.
            leading_axes: number of unsplit axes before the batch axis, as in `shard_batch`.

        Returns:
            Global ``jax.Array`` s ``[local_rows * process_count, ...]`` sharded ``P("batch")``,
            process ``p`` contributing rows ``p * local_rows`` onwards.
        """
        count = jax.process_count()
        if count == 1:  # this process's rows are the global batch
            return self.shard_batch(tree, leading_axes=leading_axes)
        sharding = self._batch_sharding(leading_axes)

        def place(leaf):
            leaf = np.asarray(leaf)
            shape = list(leaf.shape)
            shape[leading_axes] *= count
            return jax.make_array_from_process_local_data(sharding, leaf, tuple(shape))

        return jax.tree.map(place, tree)

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
        ``lax.axis_index``) use the axis name ``"batch"``. With a single replica in a single
        process the program is ``fn`` under plain ``jax.jit`` (the axis bound by a size-1
        ``jax.vmap``): the same results, without ``shard_map``'s cost on one device.

        Args:
            fn: the per-replica function.
            in_specs: a pytree prefix of ``PartitionSpec`` s for ``fn``'s positional args.
            out_specs: a pytree prefix of ``PartitionSpec`` s for ``fn``'s outputs.
            donate_argnums: positional args whose buffers the call may reuse.

        Returns:
            The compiled callable. It is compiled on first call and again only when argument
            shapes or dtypes change.
        """
        if self._single_replica:
            return _one_replica(fn, self._mesh, out_specs, donate_argnums)
        mapped = jax.shard_map(
            fn, mesh=self._mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
        )
        return jax.jit(mapped, donate_argnums=donate_argnums)

    def check_same_across_processes(self, fields: Mapping[str, Any]) -> None:
        """Fails fast unless every process passes equal ``fields``; see the module function."""
        check_same_across_processes(fields)


class InFlight:
    """Keeps at most two device calls queued: after dispatching call ``k``, waits for ``k - 1``.

    On the CPU backend with several devices, XLA's in-process all-reduce deadlocks when many
    collective executions are queued ("Termination timeout for all reduce"). Every loop
    (``fit``, ``evaluate``, ``predict`` and ``strategy.run``) pushes each call's outputs here,
    which bounds the queue and still keeps dispatch asynchronous.

    Example:
        >>> bound = InFlight()
        >>> for x in [jnp.ones(3), jnp.zeros(3)]:
        ...     ready = bound.push(x * 2)  # the previous call's outputs, now computed
    """

    __slots__ = ("_previous",)

    def __init__(self):
        self._previous: Any = None

    def push(self, outputs: Any) -> Any:
        """Records the newest call's ``outputs`` and returns the previous call's, once ready.

        Args:
            outputs: a pytree whose ``jax.Array`` leaves (or objects with a ``values``
                array) are the newest call's results.

        Returns:
            The previous call's outputs (``None`` for the first call), computed.
        """
        previous, self._previous = self._previous, outputs
        for leaf in jax.tree.leaves(previous, is_leaf=_has_values):
            array = getattr(leaf, "values", leaf)
            if isinstance(array, jax.Array) and not array.is_deleted():
                array.block_until_ready()
        return previous


def _one_replica(fn: Callable[..., Any], mesh: Mesh, out_specs: Any,
                 donate_argnums: int | tuple[int, ...]) -> Callable[..., Any]:
    """The single-replica program: ``fn`` under plain ``jax.jit``, with no ``shard_map``.

    With one replica, the replica's shard is the whole global array, so ``fn`` takes every
    argument as it is. ``jax.vmap`` with ``axis_size=1`` binds the axis name ``"batch"`` so
    the collectives inside ``fn`` still trace (``psum`` and ``pmean`` of one replica are the
    value itself, ``axis_index`` is 0) and adds a leading axis of 1 to the outputs, taken off
    again here. XLA compiles what a hand-written single-device step compiles: ``shard_map``
    on a one-device mesh costs about 28 us per step on the CPU (``benchmarks/README.md``).
    The outputs keep the mesh's ``NamedSharding`` s, as the mapped program gives them.
    """
    bound = jax.vmap(fn, in_axes=None, out_axes=0, axis_name=BATCH_AXIS, axis_size=1)
    shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), out_specs,
                             is_leaf=lambda spec: isinstance(spec, P))

    @functools.wraps(fn)  # the program keeps fn's name (jax.log_compiles, profiles)
    def one_replica(*args):
        return jax.tree.map(lambda out: out[0], bound(*args))

    return jax.jit(one_replica, out_shardings=shardings, donate_argnums=donate_argnums)


def _has_values(leaf: Any) -> bool:
    return isinstance(getattr(leaf, "values", None), jax.Array)


def check_same_across_processes(fields: Mapping[str, Any]) -> None:
    """Fails fast unless every process passes equal ``fields`` (all processes call it).

    One small all-gather of a hash per field; a no-op in a single process.

    Args:
        fields: name -> a value with a stable ``repr`` (ints, shapes, strings).

    Raises:
        ValueError: naming each field that differs, with this process's value.
    """
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    names = list(fields)
    digests = np.array([_digest(fields[name]) for name in names], np.int32)
    gathered = np.asarray(multihost_utils.process_allgather(digests))  # [processes, fields]
    differ = [i for i in range(len(names)) if len(set(gathered[:, i].tolist())) > 1]
    if differ:
        me = jax.process_index()
        lines = []
        for i in differ:
            groups: dict[int, list[int]] = {}
            for process, digest in enumerate(gathered[:, i].tolist()):
                groups.setdefault(digest, []).append(process)
            same = groups[int(gathered[me, i])]
            lines.append(f"{names[i]}: this process ({me}) has {fields[names[i]]!r}, shared by "
                         f"processes {same}; processes "
                         f"{sorted(set(range(len(gathered))) - set(same))} have another value")
        raise ValueError(
            "All processes of a MultiWorkerMirroredStrategy job must train the same model on "
            "the same global batches, but they differ in:\n  " + "\n  ".join(lines) +
            "\nStart every process with the same script arguments. Received: the settings above")


def from_chief(value: int) -> int:
    """Process 0's ``value`` on every process (all processes call it); a no-op in a single
    process.

    One small broadcast, for a decision only the chief takes (a checkpoint number, whether
    to stop) that every process must follow.

    Args:
        value: an int that fits in int32 (a bool is passed as 0 or 1).
    """
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    return int(multihost_utils.broadcast_one_to_all(np.int32(value)))

def _digest(value: Any) -> int:
    return int.from_bytes(hashlib.sha256(repr(value).encode()).digest()[:4], "little",
                          signed=True)


def _process_rows(sharding: NamedSharding, shape: tuple[int, ...], axis: int) -> slice:
    """The contiguous rows of batch axis ``axis`` that this process's devices own."""
    owned = sorted({index[axis].indices(shape[axis])[:2]
                    for index in sharding.addressable_devices_indices_map(shape).values()
                    if index is not None})  # JAX's type allows None; a NamedSharding's never is
    start, stop = owned[0][0], owned[-1][1]
    if sum(b - a for a, b in owned) != stop - start:
        raise ValueError(f"This process's devices own non-contiguous rows {owned} of the batch; "
                         f"order the mesh devices by process. Received: sharding={sharding}")
    return slice(start, stop)


def _validate_devices(devices: Sequence[Device] | None) -> tuple[Device, ...]:
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
