"""Step-exact fault tolerance: a training process is SIGKILLed mid-epoch (once between steps,
once in the middle of a backup write) and the same command, run again, finishes with params
bitwise equal to an uninterrupted run. The runs are tests/callbacks/resume_worker.py
subprocesses on 2 simulated CPU devices (3 epochs of 13 steps, a backup every 4 steps)."""

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.helpers import REPO_ROOT

WORKER = Path(__file__).with_name("resume_worker.py")
STEPS_PER_EPOCH, EPOCHS, SAVE_FREQ = 13, 3, 4  # as in resume_worker.py (200 rows, batch 16)


def _backup_steps() -> list[int]:
    """Global steps after which BackupAndRestore(save_freq=4) writes a backup.

    Every 4 steps, except that a backup due on an epoch's last step is skipped.
    """
    saved, since = [], 0
    for step in range(1, STEPS_PER_EPOCH * EPOCHS + 1):
        since += 1
        if since >= SAVE_FREQ and step % STEPS_PER_EPOCH:
            saved.append(step)
            since = 0
    return saved


def _start(out: Path, env_extra: dict[str, str], *args: str) -> subprocess.Popen:
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    # One compilation cache for every run: later runs reuse the same executables.
    env.update(JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(out.parent / "jax-cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]),
               **env_extra)
    return subprocess.Popen([sys.executable, str(WORKER), str(out), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    output, _ = proc.communicate(timeout=300)
    return proc.returncode, output


def _result(out: Path) -> dict[str, np.ndarray]:
    with np.load(out / "result.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def test_fit_resumes_bitwise_after_sigkill_mid_epoch_and_mid_backup(tmp_path):
    saves = _backup_steps()
    pick = random.Random()
    # A kill between steps, mid-epoch, not right after a backup; and a kill inside a backup.
    kill_at = pick.choice([s for s in range(saves[0] + 1, STEPS_PER_EPOCH * EPOCHS)
                           if s % STEPS_PER_EPOCH and s not in saves])
    kill_in_save_at = pick.choice(saves[1:])
    note = f"(kill_at={kill_at}, kill_in_save_at={kill_in_save_at})"

    # The uninterrupted run first: it fills the compilation cache that the others reuse.
    code, output = _finish(_start(tmp_path / "reference", {}, "--no-backup"))
    assert code == 0, output
    expected = _result(tmp_path / "reference")

    killed = {"between": _start(tmp_path / "between", {"KILL_AT_STEP": str(kill_at)}),
              "in_save": _start(tmp_path / "in_save",
                                {"KILL_IN_SAVE_AT_STEP": str(kill_in_save_at)})}
    resumed = {}
    for name, proc in killed.items():
        code, output = _finish(proc)
        assert code == -signal.SIGKILL, f"{name} run was not killed {note}:\n{output}"
        assert not (tmp_path / name / "result.npz").exists()
        if name == "in_save":  # it left an unfinished (never renamed) backup version behind
            assert list((tmp_path / name / "backup").glob("*.orbax-checkpoint-tmp*")), note
        resumed[name] = _start(tmp_path / name, {})  # the same command again
    for name, proc in resumed.items():
        code, output = _finish(proc)
        assert code == 0, f"{name} resume failed {note}:\n{output}"
        got = _result(tmp_path / name)
        last_backup = max(s for s in saves if s < (kill_at if name == "between"
                                                   else kill_in_save_at))
        # Resumed from the newest complete backup, mid-epoch, not from the epoch start.
        assert int(got.pop("first_step")) == last_backup, f"{name} {note}"
        assert last_backup % STEPS_PER_EPOCH != 0
        assert got.keys() == expected.keys() - {"first_step"}
        for key, value in got.items():
            assert value.dtype == expected[key].dtype
            assert np.array_equal(value, expected[key]), f"{name}: {key} differs {note}"
        # delete_checkpoint=True: the backup is gone once training ends normally.
        assert not (tmp_path / name / "backup").exists()
