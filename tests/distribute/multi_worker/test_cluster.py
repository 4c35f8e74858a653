"""Cluster configuration, its checks, and the roll call: all before JAX is touched.

These run in the test process: `mirrorfit._src.distribute.multi_worker.cluster.resolve` and
`mirrorfit._src.distribute.multi_worker.rendezvous.roll_call` raise before ``jax.distributed`` starts. The jobs that
do start are in tests/distribute/multi_worker/test_multi_worker.py.
"""

import json
import os
import threading

import jax
import pytest

import mirrorfit as mf
from mirrorfit._src.distribute.multi_worker import launch
from mirrorfit._src.distribute.multi_worker import cluster, rendezvous


@pytest.fixture(autouse=True)
def no_cluster_env(monkeypatch):
    """Removes every variable that describes a cluster, so each test sets its own."""
    for name in list(os.environ):
        if name.startswith(("MIRRORFIT_", "SLURM_", "OMPI_", "TF_CONFIG", "JAX_COORDINATOR",
                            "KUBERNETES_", "TPU_", "CLOUD_TPU")):
            monkeypatch.delenv(name)


def _tf_config(cluster_def, task_type, index):
    return json.dumps({"cluster": cluster_def, "task": {"type": task_type, "index": index}})


def test_no_configuration_runs_one_process_and_says_so_once(capfd):
    strategy = mf.MultiWorkerMirroredStrategy()
    _, err = capfd.readouterr()
    assert err.count("no cluster configuration found") == 1
    assert err.count("\n") == 1
    assert strategy.num_processes == 1 and strategy.process_id == 0 and strategy.is_chief
    assert strategy.num_replicas_in_sync == jax.local_device_count()
    assert (strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id) == (
        "worker", 0)


@pytest.mark.parametrize("cluster_def, task_type, index, expected", [
    ({"worker": ["h0:1000", "h1:1001", "h2:1002"]}, "worker", 2,
     ("h0:1000", 3, 2, "worker", 2)),
    ({"chief": ["c:900"], "worker": ["h0:1000", "h1:1001"]}, "worker", 0,
     ("c:900", 3, 1, "worker", 0)),
    ({"chief": ["c:900"], "worker": ["h0:1000"]}, "chief", 0, ("c:900", 2, 0, "chief", 0)),
])
def test_tf_config_maps_first_task_to_coordinator_and_index_to_process_id(
        monkeypatch, cluster_def, task_type, index, expected):
    monkeypatch.setenv("TF_CONFIG", _tf_config(cluster_def, task_type, index))
    config = cluster.resolve()
    assert (config.coordinator_address, config.num_processes, config.process_id,
            config.task_type, config.task_id) == expected
    resolver = cluster.ClusterResolver(config)
    assert resolver.cluster_spec() == cluster_def
    assert (resolver.task_type, resolver.task_id) == expected[3:]


@pytest.mark.parametrize("tf_config", ["", "{}", '{"cluster": {}, "task": {}}'])
def test_tf_config_without_cluster_means_one_local_worker(monkeypatch, tf_config):
    monkeypatch.setenv("TF_CONFIG", tf_config)
    config = cluster.resolve()
    assert (config.coordinator_address, config.num_processes, config.process_id) == (
        None, 1, 0)


def test_mirrorfit_variables_win_over_tf_config(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _tf_config({"worker": ["h0:1", "h1:2"]}, "worker", 1))
    monkeypatch.setenv("MIRRORFIT_COORDINATOR", "10.0.0.1:1234")
    monkeypatch.setenv("MIRRORFIT_NUM_PROCESSES", "4")
    monkeypatch.setenv("MIRRORFIT_PROCESS_ID", "3")
    config = cluster.resolve()
    assert (config.coordinator_address, config.num_processes, config.process_id) == (
        "10.0.0.1:1234", 4, 3)


def test_slurm_variables_are_detected_through_jax(monkeypatch):
    for name, value in {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
                        "SLURM_LOCALID": "1", "SLURM_STEP_NODELIST": "node[007-008]",
                        "JAX_COORDINATOR_PORT": "4321"}.items():
        monkeypatch.setenv(name, value)
    config = cluster.resolve()
    assert (config.coordinator_address, config.num_processes, config.process_id,
            config.source) == ("node007:4321", 2, 1, "slurm")


_SLURM_STEP = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "4", "SLURM_PROCID": "1",
               "SLURM_LOCALID": "1"}


@pytest.mark.parametrize("node_list", ["", "  ", None, "[001-004]"])
def test_slurm_step_of_several_tasks_without_a_node_list_fails_before_jax_starts(
        monkeypatch, node_list):
    # Blank, JAX would wait for ':port' until the 300 s timeout; unset, JAX ignores SLURM
    # and each of the 4 tasks would train alone.
    for name, value in _SLURM_STEP.items():
        monkeypatch.setenv(name, value)
    if node_list is not None:
        monkeypatch.setenv("SLURM_STEP_NODELIST", node_list)
    monkeypatch.setenv("MIRRORFIT_INIT_TIMEOUT", "1")
    from jax._src import distributed

    with pytest.raises(ValueError, match=r"SLURM_STEP_NODELIST must name the nodes.*"
                       r"SLURM_NTASKS=4.*srun.*Received: SLURM_STEP_NODELIST="):
        mf.MultiWorkerMirroredStrategy()
    assert distributed.global_state.client is None  # JAX was not touched


def test_slurm_without_a_node_list_still_runs_one_task_or_an_explicit_single_process(
        monkeypatch):
    for name, value in {**_SLURM_STEP, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(name, value)
    assert cluster.resolve().num_processes == 1  # one task: nothing to coordinate
    monkeypatch.setenv("SLURM_NTASKS", "4")
    assert cluster.resolve(num_processes=1, process_id=0).num_processes == 1


_BAD_ENV = [
    ("MIRRORFIT_INIT_TIMEOUT", "-5"),
    ("MIRRORFIT_INIT_TIMEOUT", "soon"),
    ("MIRRORFIT_HEARTBEAT_TIMEOUT", "0"),
    ("MIRRORFIT_HEARTBEAT_TIMEOUT", "1.5"),
    ("MIRRORFIT_COORDINATOR", "127.0.0.1:notaport"),
    ("MIRRORFIT_COORDINATOR", "127.0.0.1"),
    ("MIRRORFIT_COORDINATOR", ":1234"),
    ("MIRRORFIT_COORDINATOR", "127.0.0.1:70000"),
    ("MIRRORFIT_NUM_PROCESSES", "0"),
    ("MIRRORFIT_NUM_PROCESSES", "two"),
    ("MIRRORFIT_PROCESS_ID", "-1"),
    ("MIRRORFIT_GLOO_LOGS", "yes"),
    ("JAX_COORDINATOR_PORT", "http"),
    ("TF_CONFIG", "{not json"),
    ("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:1"]}})),
    ("TF_CONFIG", _tf_config({"worker": ["h:1"], "ps": ["p:2"]}, "worker", 0)),
    ("TF_CONFIG", _tf_config({"worker": ["h:1"]}, "worker", 1)),
    ("TF_CONFIG", _tf_config({"worker": ["h:port"]}, "worker", 0)),
    ("TF_CONFIG", _tf_config({"worker": []}, "worker", 0)),
    ("SLURM_NTASKS", "many"),
]


@pytest.mark.parametrize("name, value", _BAD_ENV)
def test_bad_environment_value_raises_value_error_naming_it(monkeypatch, name, value):
    if name.startswith("SLURM_"):  # JAX reads SLURM's variables only when all are set
        for other, ok in {"SLURM_JOB_ID": "1", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
                          "SLURM_STEP_NODELIST": "n1"}.items():
            monkeypatch.setenv(other, ok)
    monkeypatch.setenv(name, value)
    from jax._src import distributed

    with pytest.raises(ValueError, match=rf"{name}.*Received: {name}"):
        mf.MultiWorkerMirroredStrategy()
    assert distributed.global_state.client is None  # JAX was not touched


@pytest.mark.parametrize("kwargs, name", [
    ({"initialization_timeout": -5}, "initialization_timeout"),
    ({"heartbeat_timeout": 0}, "heartbeat_timeout"),
    ({"coordinator_address": "127.0.0.1:notaport"}, "coordinator_address"),
    ({"num_processes": 2.0, "coordinator_address": "h:1", "process_id": 0}, "num_processes"),
    ({"num_processes": 2, "process_id": 1}, "coordinator_address"),
    ({"coordinator_address": "h:1", "num_processes": 2}, "process_id"),
])
def test_bad_argument_raises_value_error_naming_it(kwargs, name):
    with pytest.raises(ValueError, match=name):
        mf.MultiWorkerMirroredStrategy(**kwargs)


@pytest.mark.parametrize("process_id", [2, -1])
def test_process_id_out_of_range_names_the_setting(process_id):
    with pytest.raises(ValueError, match=r"process_id must be"):
        mf.MultiWorkerMirroredStrategy("127.0.0.1:1234", num_processes=2,
                                       process_id=process_id)


def _roll_calls(address, num_processes, process_ids, timeout):
    """Runs roll_call for ``process_ids`` in threads; returns process id -> exception."""
    errors = {}

    def call(process_id):
        try:
            rendezvous.roll_call(address, num_processes, process_id, timeout)
        except Exception as err:  # noqa: BLE001 - recorded for the test
            errors[process_id] = err

    threads = [threading.Thread(target=call, args=(i,)) for i in process_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout + 15)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def test_roll_call_all_present_returns_on_every_process():
    assert _roll_calls(f"127.0.0.1:{launch.free_port()}", 3, [0, 1, 2], 10) == {}


def test_missing_process_times_out_naming_its_id_on_every_process():
    errors = _roll_calls(f"127.0.0.1:{launch.free_port()}", 4, [0, 2], 1)
    assert set(errors) == {0, 2}
    for err in errors.values():
        assert isinstance(err, TimeoutError)
        assert "process ids [1, 3] of num_processes=4 did not join" in str(err)


def test_duplicate_process_id_is_an_error_naming_it():
    errors = _roll_calls(f"127.0.0.1:{launch.free_port()}", 3, [0, 1, 1], 5)
    assert set(errors) == {0, 1}
    assert "Two processes claim process_id=1" in str(errors[0])


def test_unreachable_coordinator_times_out_naming_it():
    address = f"127.0.0.1:{launch.free_port()}"  # nothing listens there
    errors = _roll_calls(address, 2, [1], 1)
    assert isinstance(errors[1], TimeoutError)
    assert f"process 0 (the coordinator at {address}) did not accept a connection" in str(
        errors[1])


class _FakeProcess:
    """A `subprocess.Popen` stand-in for the launcher's supervisor: ``poll`` returns
    ``returncode`` (None: running until ``kill``, then -9)."""

    def __init__(self, returncode):
        self.returncode = returncode

    def poll(self):
        return self.returncode

    def kill(self):
        self.returncode = -9


def test_launcher_names_the_sigkilled_worker_even_when_process_0_is_seen_exiting_first():
    # Worker 1 is SIGKILLed; process 0 loses its peer and exits with code 1 within the same
    # 50 ms poll, so both are seen at once, rank 0 first: the job must blame worker 1.
    assert launch._supervise([_FakeProcess(1), _FakeProcess(-9)]) == (137, 1)


def test_launcher_does_not_blame_a_process_it_killed_itself(monkeypatch):
    monkeypatch.setattr(launch, "GRACE_SECONDS", 0.0)
    assert launch._supervise([_FakeProcess(1), _FakeProcess(None)]) == (1, 0)
