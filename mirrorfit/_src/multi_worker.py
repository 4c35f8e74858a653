"""`MultiWorkerMirroredStrategy`: mirrored training over several processes (hosts).

This module owns everything that knows about the job's *processes*:

* joining the job: ``jax.distributed.initialize``, once per process, from explicit
  arguments, the ``MIRRORFIT_*`` environment variables, or JAX's cluster auto-detection
  (SLURM, Open MPI, Cloud TPU, Kubernetes), with bounded timeouts;
* gloo collectives on the CPU backend, so multi-process runs work without accelerators;
* the consistency check at the start of ``fit`` (`MultiWorkerMirroredStrategy.check_same`):
  every process must train with the same global batch, input shapes and model.

Everything else (the mesh over **all** processes' devices, placement, compiled steps) is
inherited from `MirroredStrategy`; `MirroredStrategy.shard_batch` passes each process's rows
of every global batch to ``jax.make_array_from_process_local_data``.

A process that dies is noticed by JAX's coordination service: the other processes stop
getting its heartbeat and terminate with "Terminating process because the JAX distributed
service detected fatal errors" after ``heartbeat_timeout`` seconds, so no process waits on
a collective forever.
"""

from __future__ import annotations

import inspect
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from mirrorfit._src.mesh import check_same_across_processes
from mirrorfit._src.strategy import MirroredStrategy

COORDINATOR_ENV = "MIRRORFIT_COORDINATOR"
NUM_PROCESSES_ENV = "MIRRORFIT_NUM_PROCESSES"
PROCESS_ID_ENV = "MIRRORFIT_PROCESS_ID"
INIT_TIMEOUT_ENV = "MIRRORFIT_INIT_TIMEOUT"
HEARTBEAT_TIMEOUT_ENV = "MIRRORFIT_HEARTBEAT_TIMEOUT"

DEFAULT_INIT_TIMEOUT = 300  # seconds to wait for every process to join
DEFAULT_HEARTBEAT_TIMEOUT = 100  # seconds without a heartbeat before a process counts as dead


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

    Args:
        coordinator_address: ``"host:port"`` of process 0's coordination service. Default:
            ``$MIRRORFIT_COORDINATOR``, else JAX's cluster auto-detection.
        num_processes: processes in the job. Default: ``$MIRRORFIT_NUM_PROCESSES``.
        process_id: this process's index in ``[0, num_processes)``. Default:
            ``$MIRRORFIT_PROCESS_ID``.
        local_device_ids: the local devices this process uses (default: all).
        initialization_timeout: seconds to wait for all processes to join. Default:
            ``$MIRRORFIT_INIT_TIMEOUT``, else 300.
        heartbeat_timeout: seconds after which a silent (dead) process makes the others
            terminate. Default: ``$MIRRORFIT_HEARTBEAT_TIMEOUT``, else 100.

    Raises:
        ValueError: for a malformed or inconsistent setting (naming it), or when the
            coordinator cannot be reached within ``initialization_timeout`` (naming
            ``coordinator_address``).
        RuntimeError: if JAX already started its backends in this process without
            ``jax.distributed``.

    Example:
        >>> # Needs a cluster (or mf.launch): the processes join jax.distributed first.
        >>> strategy = mf.MultiWorkerMirroredStrategy()  # doctest: +SKIP
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = mf.Sequential([nn.Dense(10)], input_shape=(784,))
        >>> batch_size = 32 * strategy.num_replicas_in_sync  # doctest: +SKIP
    """

    def __init__(self, coordinator_address: str | None = None, num_processes: int | None = None,
                 process_id: int | None = None,
                 local_device_ids: int | Sequence[int] | None = None, *,
                 initialization_timeout: int | None = None,
                 heartbeat_timeout: int | None = None):
        initialize(coordinator_address, num_processes, process_id, local_device_ids,
                   initialization_timeout=initialization_timeout,
                   heartbeat_timeout=heartbeat_timeout)
        super().__init__()

    def _resolve_devices(self, devices: Sequence[jax.Device] | None) -> tuple[jax.Device, ...]:
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


def _env_int(name: str, value: Any, env: str) -> int | None:
    if value is None:
        value = os.environ.get(env)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"{env} must be an int ({name}). Received: {env}={value!r}"
                             ) from None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int. Received: {name}={value!r}")
    return int(value)


def _check_settings(address, num_processes, process_id) -> None:
    if address is not None and (not isinstance(address, str) or ":" not in address):
        raise ValueError("coordinator_address must be 'host:port' of process 0 (e.g. "
                         f"'10.0.0.1:1234'). Received: coordinator_address={address!r}")
    if num_processes is not None and num_processes < 1:
        raise ValueError("num_processes must be a positive int, the processes in the job. "
                         f"Received: num_processes={num_processes}")
    if process_id is not None and num_processes is not None and not (
            0 <= process_id < num_processes):
        raise ValueError(f"process_id must be in [0, num_processes={num_processes}): one "
                         "index per process, 0 for the chief. Received: "
                         f"process_id={process_id}")
    if address is not None and (num_processes is None or process_id is None):
        raise ValueError("With a coordinator_address, give num_processes and process_id too "
                         f"(or {NUM_PROCESSES_ENV} and {PROCESS_ID_ENV}). Received: "
                         f"num_processes={num_processes}, process_id={process_id}")


def _wait_for_coordinator(address: str, timeout: float, process_id, num_processes) -> None:
    """Waits until process 0's coordinator accepts connections, or raises after ``timeout``.

    JAX aborts the whole process when it cannot register with the coordinator, so this
    check runs first and turns an unreachable address into an error that names it.
    """
    host, _, port = address.rpartition(":")
    try:
        port_number = int(port)
    except ValueError:
        raise ValueError("coordinator_address must be 'host:port' with an int port. "
                         f"Received: coordinator_address={address!r}") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host.strip("[]"), port_number), timeout=1.0):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise ValueError(
                    f"coordinator_address={address!r} is unreachable: no coordinator accepted "
                    f"a connection within initialization_timeout={timeout} s (this process: "
                    f"process_id={process_id} of num_processes={num_processes}). Check that "
                    f"process 0 runs and that host and port are right (set "
                    f"{COORDINATOR_ENV} or coordinator_address). Received: {err}") from None
            time.sleep(0.2)


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None,
               local_device_ids: int | Sequence[int] | None = None, *,
               initialization_timeout: int | None = None,
               heartbeat_timeout: int | None = None) -> None:
    """Joins this process to the job with ``jax.distributed.initialize``, once per process.

    Arguments default to the ``MIRRORFIT_*`` environment variables, then to JAX's cluster
    auto-detection. A second call (e.g. a second strategy) reuses the first connection.

    Raises:
        ValueError: for bad settings, or an unreachable coordinator (naming the address).
        RuntimeError: if JAX's backends started before this call.

    JAX itself terminates the process (with "the JAX distributed service detected fatal
    errors") when the job cannot form within ``initialization_timeout`` or a peer stops
    sending heartbeats for ``heartbeat_timeout`` seconds.
    """
    from jax._src import distributed

    if distributed.global_state.client is not None:
        return
    address = coordinator_address or os.environ.get(COORDINATOR_ENV)
    num_processes = _env_int("num_processes", num_processes, NUM_PROCESSES_ENV)
    process_id = _env_int("process_id", process_id, PROCESS_ID_ENV)
    _check_settings(address, num_processes, process_id)
    init_timeout = _env_int("initialization_timeout", initialization_timeout, INIT_TIMEOUT_ENV)
    heartbeat = _env_int("heartbeat_timeout", heartbeat_timeout, HEARTBEAT_TIMEOUT_ENV)
    init_timeout = DEFAULT_INIT_TIMEOUT if init_timeout is None else init_timeout
    heartbeat = DEFAULT_HEARTBEAT_TIMEOUT if heartbeat is None else heartbeat
    if address is not None and process_id != 0:
        _wait_for_coordinator(address, init_timeout, process_id, num_processes)
    # gloo gives the CPU backend cross-process collectives; it must be set before the
    # backends start, and affects no other backend.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    supported = inspect.signature(jax.distributed.initialize).parameters
    timeouts = {"initialization_timeout": init_timeout, "heartbeat_timeout_seconds": heartbeat,
                "shutdown_timeout_seconds": heartbeat}
    kwargs = {k: v for k, v in timeouts.items() if k in supported}
    try:
        jax.distributed.initialize(address, num_processes, process_id, local_device_ids,
                                   **kwargs)
    except RuntimeError as err:
        if "before any JAX" not in str(err):
            raise
        raise RuntimeError(
            "MultiWorkerMirroredStrategy must be created before any JAX computation in the "
            "process (jax.distributed must start before JAX's backends): create it first "
            f"thing in the script. Received: {err}") from err
