"""BackupAndRestore(save_before_preemption=True) in one process: SIGTERM during a step saves a
backup at the end of that step and exits with PREEMPTED_EXIT_CODE; the same command, run
again, resumes there and finishes with params bitwise equal to an uninterrupted run. The runs
are tests/callbacks/resume_worker.py subprocesses (3 epochs of 13 steps, a backup every 4)."""

import pytest

from mirrorfit._src.distribute.multi_worker.preemption import PREEMPTED_EXIT_CODE
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from tests.callbacks.resume_harness import (
    STEPS_PER_EPOCH,
    assert_same_result,
    backup_steps,
    finish,
    result,
    start,
)

pytestmark = pytest.mark.slow  # Every run is a subprocess, signalled and run again.


def test_sigterm_saves_at_that_step_exits_76_and_resumes_bitwise(tmp_path):
    # Mid-epoch, off the save_freq grid; and an epoch's last step (saved after validation).
    term_at = {"mid_epoch": 6, "epoch_end": STEPS_PER_EPOCH}
    assert term_at["mid_epoch"] not in backup_steps()
    code, output = finish(start(tmp_path / "reference", {}, "--no-backup"))
    assert code == 0, output
    expected = result(tmp_path / "reference")

    runs = {name: start(tmp_path / name, {"TERM_AT_STEP": str(step)})
            for name, step in term_at.items()}
    resumed = {}
    for name, proc in runs.items():
        code, output = finish(proc)
        assert code == PREEMPTED_EXIT_CODE, f"{name}:\n{output}"
        assert "preemption notice" in output
        assert not (tmp_path / name / "result.npz").exists()
        newest = checkpoint_lib.load(checkpoint_lib.versions(tmp_path / name / "backup")[0])
        epoch, step = divmod(term_at[name], STEPS_PER_EPOCH)
        assert (int(newest.info["epoch"]), int(newest.info["step"])) == (epoch, step), name
        resumed[name] = start(tmp_path / name, {})  # the same command again
    for name, proc in resumed.items():
        code, output = finish(proc)
        assert code == 0, f"{name} resume failed:\n{output}"
        got = result(tmp_path / name)
        assert int(got.pop("first_step")) == term_at[name], name
        assert_same_result(got, expected, name)
        assert not (tmp_path / name / "backup").exists()
