"""`MultiWorkerMirroredStrategy`: mirrored training over several processes (hosts).

This module owns joining the job and what the strategy knows about the job's *processes*:

* joining: the configuration (`mirrorfit._src.distribute.multi_worker.cluster`: arguments, ``MIRRORFIT_*``,
  ``TF_CONFIG``, SLURM / Open MPI / Kubernetes / Cloud TPU, else one local process), the
  roll call that names missing processes (`mirrorfit._src.distribute.multi_worker.rendezvous`), then
  ``jax.distributed.initialize`` once per process with gloo collectives on the CPU backend;
* failing fast (`mirrorfit._src.distribute.multi_worker.failfast`): an uncaught exception on one process ends every
  process within seconds; gloo's connection lines are hidden (`mirrorfit._src.distribute.multi_worker.worker_output`);
* the stuck-rank watchdog (`mirrorfit._src.distribute.multi_worker.watchdog`): a job whose
  steps stop for ``step_timeout`` seconds ends, naming the process behind;
* the consistency check at the start of ``fit`` (`MultiWorkerMirroredStrategy.check_same`):
  every process must train with the same global batch, input shapes and model.

Everything else (the mesh over **all** processes' devices, placement, compiled steps) is
inherited from `MirroredStrategy`; `MirroredStrategy.shard_batch` passes each process's rows
of every global batch to ``jax.make_array_from_process_local_data``.

A process killed outright (no Python exception) makes the others' next gloo collective
fail at once on the CPU backend; otherwise JAX's coordination service notices the missing
heartbeat and terminates the others after ``heartbeat_timeout`` seconds (at once when the
dead process is process 0, which hosts the service).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from mirrorfit._src.distribute.mesh import Device, check_same_across_processes
from mirrorfit._src.distribute.multi_worker import (
    cluster,
    failfast,
    rendezvous,
    watchdog,
    worker_output,
)
from mirrorfit._src.distribute.multi_worker.cluster import ClusterConfig, ClusterResolver
from mirrorfit._src.distribute.strategy import MirroredStrategy

_NO_CLUSTER = ("MultiWorkerMirroredStrategy: no cluster configuration found (no "
               "coordinator_address, MIRRORFIT_COORDINATOR, TF_CONFIG, or SLURM / Open MPI / "
               "Kubernetes / Cloud TPU job), so this process runs as the only worker.")
_joined: ClusterConfig | None = None  # this process's multi-process job, once joined


class MultiWorkerMirroredStrategy(MirroredStrategy):
    """Synchronous data parallelism over the devices of several processes (hosts).

    The counterpart of ``tf.distribute.MultiWorkerMirroredStrategy``, on JAX's
    multi-controller runtime (``jax.distributed``). Run the same program once per process;
    each process drives its local devices, and the 1-D ``"batch"`` mesh spans every device
    of every process, so ``num_replicas_in_sync`` is global.

    ``batch_size`` stays the **global** batch: each process places
    ``batch_size / num_processes`` rows of it on its devices (every process holds the same
    NumPy arrays and visits the batches in the same order), and each replica gets
    ``batch_size / num_replicas_in_sync`` rows. Metrics, history and ``predict`` outputs are
    global and identical on every process; only the chief (process 0) prints progress and
    writes logs.

    Where the processes find each other, first match wins: the arguments; the
    ``MIRRORFIT_*`` environment variables (``python -m mirrorfit.launch`` sets them);
    ``TF_CONFIG`` (``cluster.chief`` or else ``cluster.worker[0]`` is process 0 and hosts the
    coordinator, ``task.index`` gives the process id); JAX's detection of SLURM, Open MPI,
    Kubernetes and Cloud TPU jobs. With none of them the strategy runs as one process on its
    local devices and prints one line saying so, as TF falls back to a local worker.

    An uncaught exception on any process ends every process of the job within a few
    seconds: the failing one exits with code 1 after its traceback, the others with
    `PEER_FAILED_EXIT_CODE` (75) after one line naming it. A job whose steps stop without
    an exception (a process hangs while alive) ends after ``step_timeout`` seconds: every
    process prints its Python stacks and a line naming the process(es) behind, and exits
    with `STUCK_EXIT_CODE` (124).

    Args:
        coordinator_address: ``"host:port"`` of process 0's coordination service. Default:
            ``$MIRRORFIT_COORDINATOR``, else ``TF_CONFIG``, else JAX's cluster detection.
        num_processes: processes in the job. Default: ``$MIRRORFIT_NUM_PROCESSES``.
        process_id: this process's index in ``[0, num_processes)``. Default:
            ``$MIRRORFIT_PROCESS_ID``.
        local_device_ids: the local devices this process uses (default: all).
        initialization_timeout: seconds to wait for all processes to join. Default:
            ``$MIRRORFIT_INIT_TIMEOUT``, else 300.
        heartbeat_timeout: seconds after which a silent process (e.g. on a machine that
            vanished) makes the others terminate. Default: ``$MIRRORFIT_HEARTBEAT_TIMEOUT``, else 100.
        shard_optimizer_state: split the optimizer state over all replicas of the job
            (ZeRO-1/2), as `MirroredStrategy`'s argument of that name.
        shard_params: split the params too, over all replicas of the job (ZeRO-3/FSDP), as
            `MirroredStrategy`'s argument of that name.
        step_timeout: seconds without a completed ``fit``/``evaluate``/``predict`` step
            (on any process, while such a loop runs) after which the job counts as stuck
            and ends; ``0`` turns the watchdog off. Default: ``$MIRRORFIT_STEP_TIMEOUT``,
            else 1800 (30 minutes), and off in an interactive session (IPython, Jupyter).

    Attributes:
        cluster_resolver: this process's `ClusterResolver` (``task_type``, ``task_id``,
            ``cluster_spec()``), as in tf.distribute.

    Raises:
        ValueError: for a malformed or inconsistent argument or environment variable
            (naming it), raised before JAX is touched.
        TimeoutError: when some process does not join within ``initialization_timeout``
            (naming the missing process ids) or process 0 is unreachable.
        RuntimeError: if JAX already started its backends in this process without
            ``jax.distributed``.

    Example:
        >>> # Needs a cluster (or mf.launch): the processes join jax.distributed first.
        >>> strategy = mf.MultiWorkerMirroredStrategy()  # doctest: +SKIP
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = mf.Sequential([nn.Dense(10)], input_shape=(784,))
        >>> batch_size = 32 * strategy.num_replicas_in_sync  # doctest: +SKIP
    """

    PEER_FAILED_EXIT_CODE: int = failfast.PEER_FAILED_EXIT_CODE
    """Exit code of a process stopped because another process of the job failed."""
    STUCK_EXIT_CODE: int = watchdog.STUCK_EXIT_CODE
    """Exit code of every process of a job that made no progress for ``step_timeout`` s."""

    def __init__(self, coordinator_address: str | None = None, num_processes: int | None = None,
                 process_id: int | None = None,
                 local_device_ids: int | Sequence[int] | None = None, *,
                 initialization_timeout: int | None = None,
                 heartbeat_timeout: int | None = None, step_timeout: float | None = None,
                 shard_optimizer_state: bool = False, shard_params: bool = False):
        timeout = watchdog.resolve_timeout(step_timeout)  # checked before JAX starts
        config = initialize(coordinator_address, num_processes, process_id, local_device_ids,
                            initialization_timeout=initialization_timeout,
                            heartbeat_timeout=heartbeat_timeout)
        if config.coordinator_address is not None:
            from jax._src import distributed

            watchdog.install(distributed.global_state.client, config.process_id,
                             config.num_processes, timeout)
        self.cluster_resolver = ClusterResolver(config)
        super().__init__(shard_optimizer_state=shard_optimizer_state, shard_params=shard_params)

    def _resolve_devices(self, devices: Sequence[Device] | None) -> tuple[Device, ...]:
        # Every device of every process, ordered by process: each process's rows of a
        # global batch are one contiguous block.
        return tuple(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))

    @property
    def num_processes(self) -> int:
        """Processes in the job (one input pipeline each)."""
        return jax.process_count()

    @property
    def process_id(self) -> int:
        """This process's index in ``[0, num_processes)``."""
        return jax.process_index()

    @property
    def is_chief(self) -> bool:
        """Whether this is process 0, which prints progress and writes logs."""
        return jax.process_index() == 0

    def check_same(self, fields: Mapping[str, Any]) -> None:
        """Fails fast unless every process passes equal ``fields`` (all processes call it).

        One small all-gather of a hash per field.

        Args:
            fields: name -> a value with a stable ``repr`` (ints, shapes, strings).

        Raises:
            ValueError: naming each field that differs, with this process's value.
        """
        check_same_across_processes(fields)


# -- joining the job -----------------------------------------------------------------------


def _config_from_jax() -> ClusterConfig:
    """The job of a process whose user called ``jax.distributed.initialize`` directly."""
    from jax._src import distributed

    state = distributed.global_state
    return ClusterConfig(state.coordinator_address, state.num_processes, state.process_id,
                         cluster.DEFAULT_INIT_TIMEOUT, cluster.DEFAULT_HEARTBEAT_TIMEOUT,
                         "jax.distributed", "worker", state.process_id,
                         {"worker": [state.coordinator_address or ""] +
                          [""] * (state.num_processes - 1)})


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None,
               local_device_ids: int | Sequence[int] | None = None, *,
               initialization_timeout: int | None = None,
               heartbeat_timeout: int | None = None) -> ClusterConfig:
    """Joins this process to the job, once per process; returns the job's configuration.

    Resolves the configuration (`mirrorfit._src.distribute.multi_worker.cluster.resolve`), holds the roll call
    (`mirrorfit._src.distribute.multi_worker.rendezvous.roll_call`), then calls ``jax.distributed.initialize`` and
    installs the fail-fast hooks. With no configuration, prints one line and joins nothing.
    Once joined, a later call (e.g. a second strategy) returns the joined configuration.

    Raises:
        ValueError: for bad settings, naming the argument or environment variable.
        TimeoutError: naming the process ids that did not join in time.
        RuntimeError: if JAX's backends started before this call.
    """
    from jax._src import distributed, xla_bridge

    global _joined
    if _joined is not None:
        return _joined
    if distributed.global_state.client is not None:  # the user called it already
        _joined = _config_from_jax()
        _install_hooks(_joined)
        return _joined
    config = cluster.resolve(coordinator_address, num_processes, process_id,
                             initialization_timeout=initialization_timeout,
                             heartbeat_timeout=heartbeat_timeout)
    if config.coordinator_address is None:  # not remembered: a later call may find a job
        print(_NO_CLUSTER, file=sys.stderr, flush=True)
        return config
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            "MultiWorkerMirroredStrategy must be created before any JAX computation in the "
            "process (jax.distributed must start before JAX's backends): create it first "
            f"thing in the script. Received: a job of {config.num_processes} processes "
            f"from {config.source}, after JAX started")
    rendezvous.roll_call(config.coordinator_address, config.num_processes, config.process_id,
                         config.initialization_timeout)
    # gloo gives the CPU backend cross-process collectives; it must be set before the
    # backends start, and affects no other backend.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        config.coordinator_address, config.num_processes, config.process_id,
        local_device_ids, initialization_timeout=config.initialization_timeout,
        heartbeat_timeout_seconds=config.heartbeat_timeout,
        shutdown_timeout_seconds=config.heartbeat_timeout)
    _joined = config
    _install_hooks(config)
    return config


def _install_hooks(config: ClusterConfig) -> None:
    """Hides gloo's connection lines (CPU backend) and makes failures end the job fast."""
    from jax._src import distributed

    if jax.default_backend() == "cpu" and not cluster.gloo_logs_shown():
        worker_output.hide_gloo_lines()
    failfast.install(distributed.global_state.client, config.process_id,
                     config.num_processes, exit_timeout=config.heartbeat_timeout,
                     before_exit=worker_output.flush)
