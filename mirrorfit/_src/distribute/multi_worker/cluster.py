"""Where a multi-process job's processes find each other: the cluster configuration.

This module owns reading and checking the job's description, before JAX is touched:

* explicit arguments of `MultiWorkerMirroredStrategy`;
* the ``MIRRORFIT_*`` environment variables (set by ``python -m mirrorfit.launch``);
* ``TF_CONFIG``, the JSON that ``tf.distribute`` users already write per worker;
* JAX's cluster auto-detection (SLURM, Open MPI, Kubernetes, Cloud TPU);
* otherwise a single local worker, as ``tf.distribute.MultiWorkerMirroredStrategy`` does.

Every setting is checked here and a bad one raises a ``ValueError`` naming the argument or
environment variable, so nothing malformed reaches JAX's C++ runtime (which aborts the
process). It also defines `ClusterResolver`, the ``strategy.cluster_resolver`` that tf.distribute
users read ``task_type`` and ``task_id`` from.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

COORDINATOR_ENV = "MIRRORFIT_COORDINATOR"
NUM_PROCESSES_ENV = "MIRRORFIT_NUM_PROCESSES"
PROCESS_ID_ENV = "MIRRORFIT_PROCESS_ID"
INIT_TIMEOUT_ENV = "MIRRORFIT_INIT_TIMEOUT"
HEARTBEAT_TIMEOUT_ENV = "MIRRORFIT_HEARTBEAT_TIMEOUT"
GLOO_LOGS_ENV = "MIRRORFIT_GLOO_LOGS"
TF_CONFIG_ENV = "TF_CONFIG"
# Read by JAX's SLURM detection (`jax._src.clusters.SlurmCluster`); checked here first.
SLURM_INT_ENVS = ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
JAX_COORDINATOR_PORT_ENV = "JAX_COORDINATOR_PORT"
SLURM_NODE_LIST_ENV = "SLURM_STEP_NODELIST"  # JAX takes process 0's host from its first name
SLURM_NODE_LIST_ERROR = (
    "SLURM_STEP_NODELIST must name the nodes of this job step (e.g. 'node[001-004]'; srun "
    "sets it): SLURM_NTASKS={tasks} says the step has {tasks} tasks, but without a usable "
    "node list the coordinator (process 0's host) is unknown, and each task would wait for "
    "it until the initialization timeout or train alone. Start the tasks with srun, or set "
    f"{COORDINATOR_ENV}, {NUM_PROCESSES_ENV} and {PROCESS_ID_ENV} (or TF_CONFIG), or pass "
    "num_processes=1 to train as one process. Received: SLURM_STEP_NODELIST={node_list!r}")

DEFAULT_INIT_TIMEOUT = 300  # seconds to wait for every process to join
DEFAULT_HEARTBEAT_TIMEOUT = 100  # seconds without a heartbeat before a process counts as dead


class ClusterConfig(NamedTuple):
    """A resolved job description; ``coordinator_address`` is None for a single process."""
    coordinator_address: str | None  # "host:port" of process 0's coordination service
    num_processes: int  # processes in the job
    process_id: int  # this process's index in [0, num_processes)
    initialization_timeout: int  # seconds to wait for every process to join
    heartbeat_timeout: int  # seconds without a heartbeat before a process counts as dead
    source: str  # where it came from: "arguments", "MIRRORFIT_*", "TF_CONFIG", "slurm", ...
    task_type: str  # as tf.distribute: "worker" (or "chief" from TF_CONFIG)
    task_id: int  # index within task_type
    cluster: Mapping[str, Sequence[str]]  # task type -> worker addresses ("" if unknown)


class ClusterResolver:
    """This process's place in the job, as ``tf.distribute.cluster_resolver.ClusterResolver``.

    Attributes:
        task_type: ``"worker"``, or ``"chief"`` when ``TF_CONFIG`` names a chief task.
        task_id: the index of this process among the tasks of ``task_type``.
        num_processes: processes in the job (TF's number of workers, chief included).
        process_id: this process's index in ``[0, num_processes)``; process 0 coordinates.
    """

    def __init__(self, config: ClusterConfig):
        self._config = config
        self.task_type = config.task_type
        self.task_id = config.task_id
        self.num_processes = config.num_processes
        self.process_id = config.process_id

    def cluster_spec(self) -> dict[str, list[str]]:
        """Task type -> the addresses of its tasks, like ``ClusterSpec.as_dict()``.

        Addresses come from ``TF_CONFIG``. For other sources only process 0's coordinator
        address is known; the other entries are ``""``.
        """
        return {task_type: list(addresses) for task_type, addresses in
                self._config.cluster.items()}

    def __repr__(self) -> str:
        return (f"ClusterResolver(task_type={self.task_type!r}, task_id={self.task_id}, "
                f"num_processes={self.num_processes}, source={self._config.source!r})")


# -- checking single values ----------------------------------------------------------------


def _int(value: Any, name: str, *, minimum: int, what: str) -> int:
    """``value`` (an int argument, or an environment string) as an int >= ``minimum``."""
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            number = None
    elif isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        number = None
    else:
        number = int(value)
    if number is None or number < minimum:
        bound = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} must be {bound} ({what}). Received: {name}={value!r}")
    return number


def check_address(address: Any, name: str) -> str:
    """Checks ``"host:port"`` with a non-empty host and a port in [1, 65535]."""
    host, sep, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    valid = bool(sep and host.strip("[]")) and port.isdigit() and 1 <= int(port) <= 65535
    if not valid:
        raise ValueError(f"{name} must be 'host:port' of process 0, with a port in [1, 65535] "
                         f"(e.g. '10.0.0.1:1234'). Received: {name}={address!r}")
    return address


def _env(name: str) -> str | None:
    """The variable's value; None if unset or blank (or ``TF_CONFIG`` without a cluster)."""
    value = os.environ.get(name)
    if value is None or not value.strip():
        return None
    if name == TF_CONFIG_ENV:
        try:
            config = json.loads(value)
        except json.JSONDecodeError:
            return value  # _parse_tf_config says what is wrong
        if isinstance(config, dict) and not config.get("cluster"):
            return None  # as in TF: no cluster means a single local worker
    return value


def check_environment() -> None:
    """Checks every environment variable this module reads; raises ValueError naming one."""
    if (value := _env(COORDINATOR_ENV)) is not None:
        check_address(value, COORDINATOR_ENV)
    if (value := _env(NUM_PROCESSES_ENV)) is not None:
        _int(value, NUM_PROCESSES_ENV, minimum=1, what="the processes in the job")
    if (value := _env(PROCESS_ID_ENV)) is not None:
        _int(value, PROCESS_ID_ENV, minimum=0, what="this process's index, 0 for the chief")
    if (value := _env(INIT_TIMEOUT_ENV)) is not None:
        _int(value, INIT_TIMEOUT_ENV, minimum=1, what="seconds to wait for all processes")
    if (value := _env(HEARTBEAT_TIMEOUT_ENV)) is not None:
        _int(value, HEARTBEAT_TIMEOUT_ENV, minimum=1,
             what="seconds without a heartbeat before a process counts as dead")
    if (value := _env(GLOO_LOGS_ENV)) is not None and value.strip() not in ("0", "1"):
        raise ValueError(f"{GLOO_LOGS_ENV} must be 0 (hide gloo's connection lines, the "
                         f"default) or 1 (show them). Received: {GLOO_LOGS_ENV}={value!r}")
    if (value := _env(JAX_COORDINATOR_PORT_ENV)) is not None:
        port = _int(value, JAX_COORDINATOR_PORT_ENV, minimum=1, what="the coordinator port")
        check_address(f"host:{port}", JAX_COORDINATOR_PORT_ENV)
    if all(name in os.environ for name in SLURM_INT_ENVS):
        for name in SLURM_INT_ENVS:
            _int(os.environ[name], name, minimum=0, what="set by SLURM's srun")
    if (value := _env(TF_CONFIG_ENV)) is not None:
        _parse_tf_config(value)


def check_slurm_node_list() -> None:
    """Checks that a SLURM step of several tasks names its nodes, before JAX waits on them.

    JAX's SLURM detection takes the coordinator's host from the first name in
    ``SLURM_STEP_NODELIST``: blank, it waits for ``:port`` until the initialization timeout;
    unset, it ignores SLURM and each task would train alone as one process.

    Raises:
        ValueError: if ``SLURM_JOB_ID`` is set and ``SLURM_NTASKS`` is above 1 while
            ``SLURM_STEP_NODELIST`` is unset, blank, or starts with no host name.
    """
    if "SLURM_JOB_ID" not in os.environ or (ntasks := _env("SLURM_NTASKS")) is None:
        return
    tasks = _int(ntasks, "SLURM_NTASKS", minimum=0, what="set by SLURM's srun")
    node_list = os.environ.get(SLURM_NODE_LIST_ENV)
    if tasks > 1 and (node_list is None or node_list.strip()[:1] in ("", ",", "[")):
        raise ValueError(SLURM_NODE_LIST_ERROR.format(tasks=tasks, node_list=node_list))


def gloo_logs_shown() -> bool:
    """Whether ``MIRRORFIT_GLOO_LOGS=1`` asks to keep gloo's connection lines."""
    return (_env(GLOO_LOGS_ENV) or "0").strip() == "1"


# -- TF_CONFIG -----------------------------------------------------------------------------

_TF_CONFIG_HELP = ("Write it as in tf.distribute, e.g. TF_CONFIG='{\"cluster\": {\"worker\": "
                   "[\"host1:1234\", \"host2:1234\"]}, \"task\": {\"type\": \"worker\", "
                   "\"index\": 0}}'")


def _parse_tf_config(text: str) -> tuple[dict[str, list[str]], str, int, int]:
    """``TF_CONFIG`` -> (cluster, task type, task index, process id).

    Processes are ordered chief first, then workers, so the chief (or ``worker[0]``)
    is process 0 and hosts the coordinator.
    """
    def bad(what: str) -> ValueError:
        return ValueError(f"{TF_CONFIG_ENV} {what}. {_TF_CONFIG_HELP}. "
                          f"Received: {TF_CONFIG_ENV}={text!r}")

    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise bad(f"must be JSON ({err})") from None
    if not isinstance(config, dict) or not isinstance(config.get("cluster"), dict):
        raise bad("must be a JSON object with a 'cluster' object")
    cluster = config["cluster"]
    unsupported = sorted(set(cluster) - {"chief", "worker"})
    if unsupported:
        raise bad(f"may only list 'chief' and 'worker' tasks for MultiWorkerMirroredStrategy "
                  f"(no parameter servers or evaluators); found {unsupported}")
    for task_type in cluster:
        tasks = cluster[task_type]
        if not isinstance(tasks, list) or not tasks:
            raise bad(f"cluster.{task_type} must be a non-empty list of 'host:port' strings")
        for address in tasks:
            check_address(address, f"{TF_CONFIG_ENV} cluster.{task_type} entry")
    if len(cluster.get("chief", [])) > 1:
        raise bad("may list at most one chief")
    if "worker" not in cluster and "chief" not in cluster:
        raise bad("cluster must list at least one worker")
    task = config.get("task")
    if not isinstance(task, dict) or task.get("type") not in cluster:
        raise bad(f"needs a 'task' object whose 'type' is one of {sorted(cluster)}")
    index = task.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not (
            0 <= index < len(cluster[task["type"]])):
        raise bad(f"task.index must be an int in [0, {len(cluster[task['type']])}), this "
                  f"task's position in cluster.{task['type']}")
    offset = len(cluster.get("chief", [])) if task["type"] == "worker" else 0
    return ({k: list(v) for k, v in cluster.items()}, task["type"], index, offset + index)


# -- the whole configuration ---------------------------------------------------------------


def _unknown_cluster(address: str, num_processes: int) -> dict[str, list[str]]:
    return {"worker": [address] + [""] * (num_processes - 1)}


def _auto_detect(init_timeout: int) -> tuple[str | None, int | None, int | None, str]:
    """JAX's cluster auto-detection (SLURM, Open MPI, Kubernetes, Cloud TPU)."""
    from jax._src import clusters

    for env in clusters.ClusterEnv._cluster_types:
        if not env.opt_in_only_method and env.is_env_present():
            address = env.get_coordinator_address(
                timeout_secs=init_timeout,
                override_coordinator_port=os.environ.get(JAX_COORDINATOR_PORT_ENV))
            return address, env.get_process_count(), env.get_process_id(), env.name
    return None, None, None, ""


def _seconds(value: int | None, name: str, env: str, default: int) -> int:
    """A timeout: the argument if given, else the (checked) environment variable, else default."""
    if value is not None:
        return _int(value, name, minimum=1, what="a timeout in seconds")
    raw = _env(env)
    return default if raw is None else int(raw)


def resolve(coordinator_address: str | None = None, num_processes: int | None = None,
            process_id: int | None = None, *, initialization_timeout: int | None = None,
            heartbeat_timeout: int | None = None) -> ClusterConfig:
    """The job's configuration from arguments, environment, ``TF_CONFIG`` or auto-detection.

    Arguments win over ``MIRRORFIT_*`` variables, which win over ``TF_CONFIG``, which wins
    over JAX's cluster auto-detection. With none of them, the job is this one process.

    Args:
        coordinator_address: ``"host:port"`` of process 0, or None to look further.
        num_processes: processes in the job, or None.
        process_id: this process's index in ``[0, num_processes)``, or None.
        initialization_timeout: seconds to wait for all processes (default 300).
        heartbeat_timeout: seconds without a heartbeat before a process is dead (default 100).

    Returns:
        The `ClusterConfig`; its ``coordinator_address`` is None for a single process.

    Raises:
        ValueError: naming the argument or environment variable that is malformed or
            inconsistent with the others.
    """
    check_environment()
    if coordinator_address is not None:
        check_address(coordinator_address, "coordinator_address")
    if num_processes is not None:
        num_processes = _int(num_processes, "num_processes", minimum=1,
                             what="the processes in the job")
    if process_id is not None:
        process_id = _int(process_id, "process_id", minimum=0,
                          what="this process's index, 0 for the chief")
    init_timeout = _seconds(initialization_timeout, "initialization_timeout",
                            INIT_TIMEOUT_ENV, DEFAULT_INIT_TIMEOUT)
    heartbeat = _seconds(heartbeat_timeout, "heartbeat_timeout", HEARTBEAT_TIMEOUT_ENV,
                         DEFAULT_HEARTBEAT_TIMEOUT)

    source = "arguments"
    address = coordinator_address
    if address is None and (raw := _env(COORDINATOR_ENV)) is not None:
        address, source = raw, "MIRRORFIT_* variables"
    if num_processes is None and (raw := _env(NUM_PROCESSES_ENV)) is not None:
        num_processes = int(raw)
    if process_id is None and (raw := _env(PROCESS_ID_ENV)) is not None:
        process_id = int(raw)
    task_type, task_id, spec = "worker", process_id, None
    if address is None and (raw := _env(TF_CONFIG_ENV)) is not None:
        spec, task_type, task_id, tf_process_id = _parse_tf_config(raw)
        address = (spec.get("chief") or spec["worker"])[0]
        num_processes = sum(len(v) for v in spec.values())
        process_id, source = tf_process_id, TF_CONFIG_ENV
    if address is None and num_processes != 1:
        check_slurm_node_list()
    if address is None:
        detected, count, index, name = _auto_detect(init_timeout)
        if detected is not None:
            address, source = detected, name
            num_processes = count if num_processes is None else num_processes
            process_id = index if process_id is None else process_id
            task_id = process_id
    if address is None:
        if num_processes not in (None, 1) or process_id not in (None, 0):
            raise ValueError(
                "num_processes and process_id need a coordinator: give coordinator_address "
                f"(or {COORDINATOR_ENV}, or TF_CONFIG) too, or start under SLURM or "
                f"python -m mirrorfit.launch. Received: num_processes={num_processes}, "
                f"process_id={process_id}")
        return ClusterConfig(None, 1, 0, init_timeout, heartbeat, "none", "worker", 0,
                             {"worker": [""]})
    if num_processes is None or process_id is None:
        raise ValueError(
            f"With a coordinator_address, give num_processes and process_id too (or "
            f"{NUM_PROCESSES_ENV} and {PROCESS_ID_ENV}). Received: coordinator_address="
            f"{address!r}, num_processes={num_processes}, process_id={process_id}")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id must be in [0, num_processes={num_processes}): one "
                         f"index per process, 0 for the chief. Received: "
                         f"process_id={process_id}")
    return ClusterConfig(address, num_processes, process_id, init_timeout, heartbeat, source,
                         task_type, process_id if task_id is None else task_id,
                         spec or _unknown_cluster(address, num_processes))
