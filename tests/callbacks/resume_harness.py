"""Runs of tests/callbacks/resume_worker.py in subprocesses, for the kill-and-resume tests
(tests/callbacks/test_resume.py, and the float16 case in tests/modules/test_mixed_precision.py).

A run is started with `start`, waited for with `finish`, and its final weights, step and
history are read back with `result`; `assert_same_result` compares a resumed run with an
uninterrupted one, bit for bit.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.helpers import REPO_ROOT

WORKER = Path(__file__).with_name("resume_worker.py")
STEPS_PER_EPOCH, EPOCHS, SAVE_FREQ = 13, 3, 4  # as in resume_worker.py (200 rows, batch 16)


def backup_steps() -> list[int]:
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


def start(out: Path, env_extra: dict[str, str], *args: str) -> subprocess.Popen:
    """Starts ``resume_worker.py out *args`` with ``env_extra`` added to the environment."""
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    # One compilation cache for every run: later runs reuse the same executables.
    env.update(JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(out.parent / "jax-cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]),
               **env_extra)
    return subprocess.Popen([sys.executable, str(WORKER), str(out), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    """Waits (at most 300 seconds) for a run; returns its exit code and its output."""
    output, _ = proc.communicate(timeout=300)
    return proc.returncode, output


def result(out: Path) -> dict[str, np.ndarray]:
    """The ``result.npz`` a finished run wrote into ``out``."""
    with np.load(out / "result.npz", allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def assert_same_result(got: dict[str, np.ndarray], expected: dict[str, np.ndarray],
                       note: str = "") -> None:
    """Asserts a resumed run's result (``first_step`` popped) equals an uninterrupted run's,
    key by key, with the same dtypes and bitwise-equal values."""
    assert got.keys() == expected.keys() - {"first_step"}
    for key, value in got.items():
        assert value.dtype == expected[key].dtype
        assert np.array_equal(value, expected[key]), f"{key} differs {note}"
