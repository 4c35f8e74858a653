"""Step-exact fault tolerance: a training process is SIGKILLed mid-epoch (once between steps,
once in the middle of a backup write) and the same command, run again, finishes with params
bitwise equal to an uninterrupted run. The runs are tests/callbacks/resume_worker.py
subprocesses on 2 simulated CPU devices (3 epochs of 13 steps, a backup every 4 steps)."""

import random
import signal

import pytest

from tests.callbacks.resume_harness import (
    EPOCHS,
    STEPS_PER_EPOCH,
    assert_same_result,
    backup_steps,
    finish,
    result,
    start,
)

pytestmark = pytest.mark.slow  # Every run is a subprocess, killed and run again.


def test_fit_resumes_bitwise_after_sigkill_mid_epoch_and_mid_backup(tmp_path):
    saves = backup_steps()
    pick = random.Random()
    # A kill between steps, mid-epoch, not right after a backup; and a kill inside a backup.
    kill_at = pick.choice([s for s in range(saves[0] + 1, STEPS_PER_EPOCH * EPOCHS)
                           if s % STEPS_PER_EPOCH and s not in saves])
    kill_in_save_at = pick.choice(saves[1:])
    note = f"(kill_at={kill_at}, kill_in_save_at={kill_in_save_at})"

    # The uninterrupted run first: it fills the compilation cache that the others reuse.
    code, output = finish(start(tmp_path / "reference", {}, "--no-backup"))
    assert code == 0, output
    expected = result(tmp_path / "reference")

    killed = {"between": start(tmp_path / "between", {"KILL_AT_STEP": str(kill_at)}),
              "in_save": start(tmp_path / "in_save",
                               {"KILL_IN_SAVE_AT_STEP": str(kill_in_save_at)})}
    resumed = {}
    for name, proc in killed.items():
        code, output = finish(proc)
        assert code == -signal.SIGKILL, f"{name} run was not killed {note}:\n{output}"
        assert not (tmp_path / name / "result.npz").exists()
        if name == "in_save":  # it left an unfinished (never renamed) backup version behind
            assert list((tmp_path / name / "backup").glob("*.orbax-checkpoint-tmp*")), note
        resumed[name] = start(tmp_path / name, {})  # the same command again
    for name, proc in resumed.items():
        code, output = finish(proc)
        assert code == 0, f"{name} resume failed {note}:\n{output}"
        got = result(tmp_path / name)
        before = [s for s in saves if s < (kill_at if name == "between" else kill_in_save_at)]
        # Resumed from the newest complete backup, mid-epoch, not from the epoch start.
        # Backups are written in the background, one at a time: a kill between steps may
        # come while the last one is still being written, and then the one before it is
        # the newest complete one (or none: a start from step 0). A kill inside a write
        # follows the previous write's end.
        first_step = int(got.pop("first_step"))
        allowed = ([0, *before][-2:] if name == "between" else before[-1:])
        assert first_step in allowed, f"{name} {note}: resumed at {first_step}"
        assert first_step == 0 or first_step % STEPS_PER_EPOCH != 0
        assert_same_result(got, expected, f"{name} {note}")
        # delete_checkpoint=True: the backup is gone once training ends normally.
        assert not (tmp_path / name / "backup").exists()
