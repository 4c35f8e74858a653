"""MultiWorkerMirroredStrategy over several local processes (loopback, gloo on the CPU).

Every job runs `tests/distribute/multi_worker/multi_worker_script.py` in subprocesses, each with
its own XLA_FLAGS (set by ``mirrorfit.launch``). Jobs are shared between tests through module fixtures, since
starting processes is the slow part.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.distribute.multi_worker import launch
from tests.helpers import REPO_ROOT as ROOT

pytestmark = pytest.mark.slow  # Every job starts several processes.

SCRIPT = str(Path(__file__).with_name("multi_worker_script.py"))
FAILURE_SCRIPT = str(Path(__file__).with_name("multi_worker_failure_script.py"))
KILL_AT_STEP = 10  # global step; the last backup (save_freq=4) is at step 9
HEARTBEAT_TIMEOUT = 5  # seconds, passed as MIRRORFIT_HEARTBEAT_TIMEOUT


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIRRORFIT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["JAX_PLATFORMS"] = "cpu"
    env.update(extra)
    return env


def _launch(out, *args, timeout=120):
    """Runs the script as 2 processes x 2 CPU devices; returns (exit code, output, seconds)."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mirrorfit.launch", "--nproc", "2", "--cpu-devices", "2",
         SCRIPT, str(out), *args], env=_env(), capture_output=True, text=True,
        timeout=timeout, cwd=ROOT, check=False)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def _results(out):
    return [dict(np.load(out / f"result-{rank}.npz")) for rank in range(2)]


def _weights(result):
    return [result[f"arr_{i}"] for i in range(4)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same training in 1 process over 4 CPU devices (MirroredStrategy)."""
    out = tmp_path_factory.mktemp("reference")
    subprocess.run([sys.executable, SCRIPT, str(out)], check=True, timeout=120, cwd=ROOT,
                   env=_env(XLA_FLAGS="--xla_force_host_platform_device_count=4"),
                   capture_output=True)
    return dict(np.load(out / "result-0.npz"))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """An uninterrupted 2-process x 2-device job with BackupAndRestore and a CSVLogger."""
    out = tmp_path_factory.mktemp("job")
    code, output, _ = _launch(out, "--backup")
    assert code == 0, output
    return out, output, _results(out)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """The same job, with process 1 SIGKILLed after step 10; process 0 left to notice."""
    out = tmp_path_factory.mktemp("killed")
    port = launch.free_port()
    procs = []
    for rank in range(2):
        env = _env(**launch._env(rank, 2, port, 2))
        env["MIRRORFIT_HEARTBEAT_TIMEOUT"] = str(HEARTBEAT_TIMEOUT)
        procs.append(subprocess.Popen(
            [sys.executable, SCRIPT, str(out), "--backup", "--kill-rank", "1",
             "--kill-at-step", str(KILL_AT_STEP)], env=env, cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    procs[1].communicate(timeout=120)
    died = time.monotonic()
    try:
        output, _ = procs[0].communicate(timeout=60)
    finally:
        procs[0].kill()
    return out, procs[1].returncode, procs[0].returncode, time.monotonic() - died, output


def test_parity_two_processes_match_one_process_four_devices(job, reference, allclose):
    _, _, results = job
    for result in results:
        assert int(result["processes"]) == 2 and int(result["replicas"]) == 4
        allclose(_weights(result), _weights(reference), rtol=1e-5, atol=1e-7)
        for key in ("history_loss", "history_accuracy", "history_val_loss", "evaluate_loss",
                    "evaluate_accuracy"):
            np.testing.assert_allclose(result[key], reference[key], rtol=1e-5)


def test_shard_params_over_both_processes_matches_mirrored_one_process(tmp_path, reference,
                                                                     allclose):
    # MultiWorkerMirroredStrategy(shard_params=True): the params and optimizer state split
    # over the 4 replicas of both processes (BackupAndRestore writing them whole), equal to
    # the mirrored single process to float32 rounding; weights read whole on every process.
    code, output, _ = _launch(tmp_path, "--backup", "--shard-params")
    assert code == 0, output
    assert "sharded over 4 replicas (ZeRO-3)" in output
    for result in _results(tmp_path):
        allclose(_weights(result), _weights(reference), rtol=1e-5, atol=1e-7)
        for key in ("history_loss", "evaluate_loss", "pp_weights", "predicted"):
            np.testing.assert_allclose(result[key], reference[key], rtol=1e-5, atol=1e-7,
                                       err_msg=key)


def test_predict_returns_all_rows_in_order_on_every_process(job, reference):
    _, _, results = job
    for result in results:
        assert result["predicted"].shape == (50, 3)  # 50 rows in batches of 12: padded
        np.testing.assert_allclose(result["predicted"], reference["predicted"], rtol=1e-5,
                                   atol=1e-7)


def test_datasets_from_function_assemble_global_batches_across_processes(job, reference):
    # One input pipeline per process, each yielding its rows as per-replica batches; the
    # gathered global batches (the last one partial and padded) give back the rows in order.
    x = np.random.default_rng(0).normal(size=(128, 8)).astype(np.float32)[:44]
    np.testing.assert_array_equal(reference["from_function"], x)
    for result in job[2]:
        np.testing.assert_array_equal(result["from_function"], x)


def test_fit_on_one_grain_pipeline_per_process_matches_arrays_in_one_process(job, reference):
    # model.fit(strategy.distribute_datasets_from_function(fn)): each process's grain
    # pipeline (ShardByJaxProcess) gives half of every global batch, the last one partial;
    # the reference fits, evaluates and predicts the same global batches as arrays.
    pp_keys = [k for k in reference if k.startswith(("pp_history_", "pp_evaluate_"))]
    assert {"pp_history_loss", "pp_history_accuracy", "pp_evaluate_loss"} <= set(pp_keys)
    for result in job[2]:
        np.testing.assert_allclose(result["pp_weights"], reference["pp_weights"], rtol=1e-5,
                                   atol=1e-7)
        for key in pp_keys:
            np.testing.assert_allclose(result[key], reference[key], rtol=1e-5, err_msg=key)
        assert result["pp_predicted"].shape == (40, 3)
        np.testing.assert_allclose(result["pp_predicted"], reference["pp_predicted"],
                                   rtol=1e-5, atol=1e-7)
        # Without a length, the processes must be told the steps per epoch.
        assert "steps_per_epoch is required" in str(result["pp_steps_error"])


def test_metrics_history_and_weights_identical_on_every_process(job):
    _, _, (first, second) = job
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_only_chief_prints_and_writes_logs_launcher_prefixes_ranks(job):
    out, output, _ = job
    assert (out / "log-0.csv").read_text().count("\n") == 1 + 3  # header, 3 epochs
    assert not (out / "log-1.csv").exists()
    epochs = re.findall(r"^\[(\d)\] Epoch \d/3", output, flags=re.MULTILINE)
    assert epochs == ["0"] * 3
    assert re.search(r"^\[1\] process 1 done$", output, flags=re.MULTILINE)
    assert "Gloo" not in output and "is connected to" not in output
    assert not (out / "backup").exists()  # BackupAndRestore deletes it after success


def test_worker_killed_others_exit_with_clear_error_in_bounded_time(killed):
    _, killed_code, survivor_code, seconds, output = killed
    assert killed_code == -9
    assert survivor_code == 1
    assert seconds < 10  # its next all-reduce fails at once, on loopback
    assert "mirrorfit: process 0 lost its connection to another process" in output, output


def test_restart_after_worker_killed_resumes_and_matches_uninterrupted(killed, job):
    out = killed[0]
    code, output, _ = _launch(out, "--backup")
    assert code == 0, output
    for resumed, uninterrupted in zip(_results(out), job[2]):
        assert int(resumed["first_step"]) == KILL_AT_STEP - 1  # the last backup
        for key in uninterrupted:
            if key != "first_step":
                np.testing.assert_array_equal(resumed[key], uninterrupted[key], err_msg=key)


def test_sigterm_to_one_worker_both_save_same_step_launcher_restarts_and_matches(tmp_path, job):
    # Process 1 gets SIGTERM after global step 4; JAX's preemption sync manager has both
    # processes save at the same later step and exit with 76; --max-restarts 1 starts the job
    # again, which resumes from that backup and ends as the uninterrupted job, bit for bit.
    done = subprocess.run(
        [sys.executable, "-m", "mirrorfit.launch", "--nproc", "2", "--cpu-devices", "2",
         "--max-restarts", "1", SCRIPT, str(tmp_path), "--backup", "--term-rank", "1",
         "--term-at-step", "4"], env=_env(), capture_output=True, text=True, timeout=240,
        cwd=ROOT, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert output.count("[launch] restarting the job (1 of --max-restarts=1)") == 1, output
    assert f"exited with code {mf.callbacks.PREEMPTED_EXIT_CODE}" in output
    saved = [json.loads((tmp_path / f"preempted-{rank}.json").read_text()) for rank in (0, 1)]
    assert saved[0] == saved[1], saved  # the same step on both processes
    assert saved[0]["global_step"] > 4
    assert saved[0]["global_step"] == saved[0]["epoch"] * 8 + saved[0]["step"]
    for resumed, uninterrupted in zip(_results(tmp_path), job[2]):
        assert int(resumed["first_step"]) == saved[0]["global_step"]
        for key in uninterrupted:
            if key != "first_step":
                np.testing.assert_array_equal(resumed[key], uninterrupted[key], err_msg=key)
    assert not (tmp_path / "backup").exists()


def test_mismatched_batch_size_and_model_fail_fast_naming_them(tmp_path):
    code, output, seconds = _launch(tmp_path, "--batch", "16,32", "--hidden", "16,8",
                                    "--data-seed", "0,1")
    assert code == 1
    assert seconds < 60
    assert "differ in" in output
    assert "global batch_size: this process" in output
    assert "param shapes: this process" in output
    assert "input x: this process" in output  # the input fingerprint differs too
    assert not list(tmp_path.glob("result-*.npz"))


def _start(out, envs, *args):
    """Starts one process of FAILURE_SCRIPT per env, without the launcher."""
    return [subprocess.Popen([sys.executable, FAILURE_SCRIPT, str(out), *args], cwd=ROOT,
                             env={**_env(), "XLA_FLAGS": "", **env},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for env in envs]


def _wait_all(procs, timeout=120):
    """(exit codes, outputs, exit times) of ``procs``; kills them all after ``timeout``."""
    deadline, ended = time.monotonic() + timeout, {}
    try:
        while len(ended) < len(procs) and time.monotonic() < deadline:
            for i, proc in enumerate(procs):
                if i not in ended and proc.poll() is not None:
                    ended[i] = time.time()
            time.sleep(0.05)
    finally:
        for proc in procs:
            proc.kill()
    outputs = [proc.communicate()[0] for proc in procs]
    return [proc.returncode for proc in procs], outputs, [ended.get(i) for i in range(len(procs))]


def test_worker_exception_under_launcher_ends_job_within_10s_with_one_traceback(tmp_path):
    # The TF tutorial's save pattern: worker 1 removes a temp dir it never wrote, while the
    # chief has finished and waits at exit for the others.
    done = subprocess.run(
        [sys.executable, "-m", "mirrorfit.launch", "--nproc", "2", "--cpu-devices", "1",
         FAILURE_SCRIPT, str(tmp_path), "--fail-rank", "1"], env=_env(), capture_output=True,
        text=True, timeout=120, cwd=ROOT, check=False)
    ended = time.time()
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert ended - float((tmp_path / "raised-1").read_text()) < 10, output
    assert output.count("Traceback") == 1
    assert re.search(r"^\[1\] FileNotFoundError: .*workertemp_1", output, flags=re.MULTILINE)
    assert re.search(r"^\[0\] mirrorfit: process 1 of the job failed with exit code 1",
                     output, flags=re.MULTILINE)
    assert "[launch] process 1 failed with exit code 1" in output
    assert "Check failure" not in output and "[Gloo] Rank" not in output
    assert (tmp_path / "done-0").exists() and not (tmp_path / "done-1").exists()


def test_rank_stuck_in_a_step_ends_job_with_stacks_naming_it(tmp_path):
    # Worker 1 hangs (alive) in a callback; MIRRORFIT_STEP_TIMEOUT=3 s.
    done = subprocess.run(
        [sys.executable, "-m", "mirrorfit.launch", "--nproc", "2", "--cpu-devices", "1",
         FAILURE_SCRIPT, str(tmp_path), "--stuck-rank", "1"],
        env=_env(MIRRORFIT_STEP_TIMEOUT="3"), capture_output=True, text=True, timeout=120,
        cwd=ROOT, check=False)
    ended = time.time()
    output = done.stdout + done.stderr
    assert done.returncode == mf.MultiWorkerMirroredStrategy.STUCK_EXIT_CODE == 124, output
    assert ended - float((tmp_path / "stuck-1").read_text()) < 20, output  # 3 s + polls
    for rank in (0, 1):  # every process: its stacks, then the verdict naming worker 1
        assert re.search(rf"^\[{rank}\] mirrorfit: watchdog: the job made no progress for 3 s",
                         output, flags=re.MULTILINE), output
        assert re.search(rf"^\[{rank}\] mirrorfit: the job is stuck: .* Behind: process 1 ",
                         output, flags=re.MULTILINE), output
    assert re.search(r"^\[1\]\s+File .*multi_worker_failure_script.py.* in on_train_batch_end",
                     output, flags=re.MULTILINE), output  # where it hangs
    assert "Traceback" not in output and not (tmp_path / "done-0").exists()


def test_chief_exception_without_launcher_ends_every_process_within_10s(tmp_path):
    # Started from TF_CONFIG (a chief and one worker); the worker waits in a collective.
    ports = [launch.free_port(), launch.free_port()]
    spec = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"]}
    envs = [{"TF_CONFIG": json.dumps({"cluster": spec, "task": task})}
            for task in ({"type": "chief", "index": 0}, {"type": "worker", "index": 0})]
    codes, outputs, ended = _wait_all(_start(tmp_path, envs, "--fail-rank", "0",
                                             "--evaluate-after"))
    raised = float((tmp_path / "raised-0").read_text())
    assert codes == [1, mf.MultiWorkerMirroredStrategy.PEER_FAILED_EXIT_CODE], outputs
    assert all(t - raised < 10 for t in ended), (ended, raised)
    assert outputs[0].count("Traceback") == 1 and "FileNotFoundError" in outputs[0]
    assert "Traceback" not in outputs[1]
    assert "mirrorfit: process 0 of the job failed with exit code 1" in outputs[1]
    assert "Check failure" not in "".join(outputs)
    assert [(tmp_path / f"resolver-{rank}").read_text() for rank in range(2)] == [
        "chief 0", "worker 0"]


def test_job_starts_from_slurm_variables(tmp_path):
    port = launch.free_port()  # what srun sets for 2 tasks on one node; JAX reads it
    envs = [{"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "SLURM_PROCID": str(rank),
             "SLURM_LOCALID": str(rank), "SLURM_STEP_NODELIST": "127.0.0.1",
             "SLURM_STEP_NUM_NODES": "1", "JAX_COORDINATOR_PORT": str(port)}
            for rank in range(2)]
    codes, outputs, _ = _wait_all(_start(tmp_path, envs, "--evaluate-after"))
    assert codes == [0, 0], outputs
    assert [(tmp_path / f"resolver-{rank}").read_text() for rank in range(2)] == [
        "worker 0", "worker 1"]
    assert (tmp_path / "done-0").exists() and (tmp_path / "done-1").exists()
    assert "no cluster configuration" not in "".join(outputs)


def test_peer_never_arriving_raises_timeout_naming_it():
    done = subprocess.run(
        [sys.executable, "-c", ("import mirrorfit as mf; mf.MultiWorkerMirroredStrategy("
                                f"'127.0.0.1:{launch.free_port()}', 3, 0, "
                                "initialization_timeout=1)")],
        env=_env(), capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 1
    assert ("TimeoutError: The job did not form: process ids [1, 2] of num_processes=3 did "
            "not join") in done.stderr
    assert "Terminating process" not in done.stderr


def test_launcher_prefixes_every_line_and_every_redrawn_line(tmp_path):
    script = tmp_path / "bar.py"
    script.write_text("import sys\n"
                      "sys.stderr.write('\\r 10%|#  |\\r 50%|## |\\r100%|###|\\n')\n"
                      "print('a\\r\\nb', end='')\n")
    done = subprocess.run([sys.executable, "-m", "mirrorfit.launch", "--nproc", "2",
                           str(script)], env=_env(), capture_output=True, timeout=60, cwd=ROOT,
                          check=False)
    assert done.returncode == 0
    for rank in (0, 1):
        assert (f"\r[{rank}]  10%|#  |\r[{rank}]  50%|## |\r[{rank}] 100%|###|\n".encode()
                in done.stdout)
        assert f"[{rank}] a\r\n".encode() in done.stdout
        assert f"[{rank}] b\n".encode() in done.stdout  # the unfinished last line, ended


def test_launcher_kills_all_and_returns_first_nonzero_exit_code(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['MIRRORFIT_PROCESS_ID'] == '1': sys.exit(3)\n"
                      "time.sleep(60)\n")
    start = time.monotonic()
    assert launch.launch(str(script), nproc=2) == 3
    assert time.monotonic() - start < 30


def test_gloo_connection_lines_are_dropped_even_when_interleaved():
    from mirrorfit._src.distribute.multi_worker.worker_output import _without_gloo

    message = b"is connected to 3 peer ranks. Expected number of connected peer ranks is : 3"
    assert _without_gloo(b"[Gloo] Rank 0 " + message) == b""
    assert _without_gloo(b"[Gloo] Rank [Gloo] Rank 2 " + message) == b""  # two threads
    assert _without_gloo(b"3 " + message) == b""  # the rest of the second thread's line
    assert _without_gloo(b"0 is connected to ") == b""  # a message split over two lines
    assert _without_gloo(b"3 peer ranks. Expected number of connected peer ranks is : 3") == b""
    assert _without_gloo(b"1303 peer ranks.Expected number of connected peer ranks is : 33") \
        == b""  # pieces of two messages, with the numbers interleaved
    assert _without_gloo(b"Epoch 1/3 - loss: 0.5") == b"Epoch 1/3 - loss: 0.5\n"
    assert _without_gloo(b"db is connected to 10.0.0.1") == b"db is connected to 10.0.0.1\n"
