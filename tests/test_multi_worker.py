"""MultiWorkerMirroredStrategy over several local processes (loopback, gloo on the CPU).

Every job runs `tests/multi_worker_script.py` in subprocesses, each with its own XLA_FLAGS
(set by ``mirrorfit.launch``). Jobs are shared between tests through module fixtures, since
starting processes is the slow part.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import launch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "multi_worker_script.py")
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
        timeout=timeout, cwd=ROOT)
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


def test_metrics_history_and_weights_identical_on_every_process(job):
    _, _, (first, second) = job
    assert first.keys() == second.keys()
    for key in first:
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_only_chief_prints_and_writes_logs_launcher_prefixes_ranks(job):
    out, output, _ = job
    assert (out / "log-0.csv").read_text().count("\n") == 1 + 3  # header, 3 epochs
    assert not (out / "log-1.csv").exists()
    epochs = re.findall(r"^\[(\d)\] Epoch \d/3", output, flags=re.M)
    assert epochs == ["0"] * 3
    assert re.search(r"^\[1\] ", output, flags=re.M)  # rank 1 output (gloo) is prefixed
    assert not (out / "backup").exists()  # BackupAndRestore deletes it after success


def test_worker_killed_others_exit_with_clear_error_in_bounded_time(killed):
    _, killed_code, survivor_code, seconds, output = killed
    assert killed_code == -9
    assert survivor_code != 0
    assert seconds < 60
    assert "another task died" in output or "unhealthy" in output, output[-2000:]


def test_restart_after_worker_killed_resumes_and_matches_uninterrupted(killed, job):
    out = killed[0]
    code, output, _ = _launch(out, "--backup")
    assert code == 0, output
    for resumed, uninterrupted in zip(_results(out), job[2]):
        assert int(resumed["first_step"]) == KILL_AT_STEP - 1  # the last backup
        for key in uninterrupted:
            if key != "first_step":
                np.testing.assert_array_equal(resumed[key], uninterrupted[key], err_msg=key)


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


def test_unreachable_coordinator_names_the_setting_in_bounded_time():
    port = launch.free_port()  # nothing listens there
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", "import mirrorfit as mf; mf.MultiWorkerMirroredStrategy("
         f"'127.0.0.1:{port}', 2, 1, initialization_timeout=2)"],
        env=_env(), capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 1
    assert time.monotonic() - start < 30
    assert f"ValueError: coordinator_address='127.0.0.1:{port}' is unreachable" in done.stderr


@pytest.mark.parametrize("process_id", [2, -1])
def test_process_id_out_of_range_names_the_setting(process_id):
    # Raised before JAX is touched, so this runs in the test process.
    with pytest.raises(ValueError, match=rf"process_id must be in \[0, num_processes=2\).*"
                                         rf"Received: process_id={process_id}"):
        mf.MultiWorkerMirroredStrategy("127.0.0.1:1234", num_processes=2,
                                       process_id=process_id)


def test_launcher_kills_all_and_returns_first_nonzero_exit_code(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\n"
                      "if os.environ['MIRRORFIT_PROCESS_ID'] == '1': sys.exit(3)\n"
                      "time.sleep(60)\n")
    start = time.monotonic()
    assert launch.launch(str(script), nproc=2) == 3
    assert time.monotonic() - start < 30
