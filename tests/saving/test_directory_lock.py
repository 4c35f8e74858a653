"""One writer per checkpoint directory: a second writer fails at once naming the holder, the
first is unharmed, a killed writer's lock is taken over with a warning."""

import json
import os
import socket
import subprocess
import sys

import flax.linen as nn
import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving import checkpoint_format
from mirrorfit._src.saving.directory_lock import DirectoryLock, DirectoryLockedError, lock_path
from tests.helpers import Interrupt, interrupt_after

ROWS, BATCH = 40, 8  # 5 steps per epoch
_rng = np.random.default_rng(0)
X = _rng.normal(size=(ROWS, 4)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32)


def _model():
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(2), nn.softmax],
                              input_shape=(4,), seed=3)
        model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    return model


@pytest.fixture(scope="module")
def models():
    return _model(), _model()


def _fit(model, callbacks, epochs=2):
    return model.fit(X, Y, batch_size=BATCH, epochs=epochs, verbose=0, shuffle=False,
                     callbacks=callbacks)


def _holder_pattern(argument, path):
    return (rf"{argument} '{path}' is being written by another writer: process {os.getpid()} "
            rf"on host '{socket.gethostname()}'.*Received: {argument}='{path}'")


class _During(mf.callbacks.Callback):
    """Runs ``action`` once at train step ``step`` and keeps what it raised."""

    def __init__(self, step, action):
        super().__init__()
        self.step, self.action, self.error = step, action, None

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.step and self.error is None:
            try:
                self.action()
            except Exception as err:  # noqa: BLE001  the test inspects it
                self.error = err


# -- the lock itself --------------------------------------------------------------------------


def test_second_lock_fails_naming_directory_and_holder_then_frees_on_release(tmp_path):
    path = tmp_path / "ckpt"
    first = DirectoryLock(path, "filepath").acquire()
    with pytest.raises(DirectoryLockedError, match=_holder_pattern("path", path)):
        DirectoryLock(path, "path").acquire()
    record = json.loads(lock_path(path).read_text())
    assert (record["pid"], record["host"]) == (os.getpid(), socket.gethostname())
    first.release()
    assert not lock_path(path).exists()  # released: no file left beside the directory
    with DirectoryLock(path, "path") as again:
        assert again.held


def test_lock_left_by_a_dead_process_is_taken_over_with_a_warning(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "backup"
    lock_path(path).write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    with pytest.warns(mf.MirrorfitWarning, match=rf"taking over the lock left by process "
                                                 rf"{dead.pid}.*is no longer running"):
        lock = DirectoryLock(path, "backup_dir").acquire()
    assert json.loads(lock_path(path).read_text())["pid"] == os.getpid()
    lock.release()


@pytest.mark.slow
def test_lock_held_by_another_live_process_names_its_pid(tmp_path):
    path = tmp_path / "ckpt"
    script = ("import sys; from mirrorfit._src.saving.directory_lock import DirectoryLock; "
              f"lock = DirectoryLock({str(path)!r}, 'filepath').acquire(); "
              "print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=dict(os.environ, PYTHONPATH=os.getcwd(), JAX_PLATFORMS="cpu"))
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryLockedError, match=rf"process {holder.pid} on host "
                                                       rf"'{socket.gethostname()}' \(filepath\)"):
            DirectoryLock(path, "path").acquire()
    finally:
        holder.communicate("")
    with DirectoryLock(path, "path"):  # the holder ended: its lock went with it, no warning
        pass


# -- writers ----------------------------------------------------------------------------------


def test_backup_of_a_run_started_twice_fails_and_the_first_run_is_unharmed(models, tmp_path):
    model, other = models
    path = tmp_path / "backup"
    second = _During(3, lambda: _fit(other, [mf.callbacks.BackupAndRestore(path)], epochs=1))
    history = _fit(model, [mf.callbacks.BackupAndRestore(path, save_freq=2,
                                                         delete_checkpoint=False), second])
    assert isinstance(second.error, DirectoryLockedError)
    assert "BackupAndRestore backup_dir" in str(second.error)
    assert f"process {os.getpid()}" in str(second.error)
    assert len(history.history["loss"]) == 2  # the first run finished
    found = checkpoint_lib.read_latest(path)  # and its last backup is intact
    assert (found.info["epoch"], found.info["step"]) == (1, 3)  # global step 8, its last
    assert not lock_path(path).exists()


def test_two_model_checkpoints_on_one_directory_fail_before_training(models, tmp_path):
    model, _ = models
    path = tmp_path / "ckpt"
    before = model.get_weights()
    with pytest.raises(DirectoryLockedError,
                       match=_holder_pattern("ModelCheckpoint filepath", path)):
        _fit(model, [mf.callbacks.ModelCheckpoint(path), mf.callbacks.ModelCheckpoint(path)])
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), before))
    assert not lock_path(path).exists()  # released on the error
    _fit(model, [mf.callbacks.ModelCheckpoint(path)], epochs=1)  # a single writer works
    assert checkpoint_lib.versions(path)


def test_save_weights_into_a_directory_a_live_run_writes_is_refused(models, tmp_path):
    model, other = models
    path = tmp_path / "ckpt"
    intruder = _During(2, lambda: other.save_weights(path))
    _fit(model, [mf.callbacks.ModelCheckpoint(path, save_freq=2), intruder])
    assert isinstance(intruder.error, DirectoryLockedError)
    assert "ModelCheckpoint filepath" in str(intruder.error)
    assert str(path) in str(intruder.error)
    found = checkpoint_lib.read_latest(path)
    assert all(np.array_equal(found.arrays[k], v) for k, v in
               checkpoint_format.flatten({"params": model.state.params}).items())
    other.save_weights(path)  # the run ended: its lock is gone


def test_backup_lock_is_released_when_fit_fails(tmp_path):
    model = _model()
    path = tmp_path / "backup"
    with pytest.raises(Interrupt):
        _fit(model, [mf.callbacks.BackupAndRestore(path, save_freq=2),
                     interrupt_after(model, 4)])
    assert not lock_path(path).exists()
    _fit(model, [mf.callbacks.BackupAndRestore(path, save_freq=2)])  # resumes, unlocked
