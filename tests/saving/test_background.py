"""Checkpoint writes in the background: at most one in flight, the right contents, and a
failed write reported (naming the path) at the next save or at the end of ``fit``."""

import threading
import time

import flax.linen as nn
import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.distribute import zero
from mirrorfit._src.saving import background, checkpoint_format
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving.checkpoint_files import CheckpointWriteError
from mirrorfit._src.saving.directory_lock import DirectoryLock
from tests.helpers import compiled_classifier, mirrored_strategy, reset_to_initial, tree_equal

ROWS, BATCH = 40, 8  # 5 steps per epoch


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int32)


@pytest.fixture(scope="module")
def compiled():
    return compiled_classifier([nn.Dense(8), nn.relu, nn.Dense(2), nn.softmax], seed=5)


@pytest.fixture
def model(compiled):
    return reset_to_initial(compiled)


def test_failed_write_is_raised_once_by_the_next_call_naming_the_path():
    writer = background.BackgroundWriter()

    def fail():
        raise RuntimeError("injected")

    started = []
    writer.submit(fail, "ckpt/e1", "ModelCheckpoint filepath")
    with pytest.raises(background.BackgroundWriteError,
                       match=r"to ModelCheckpoint filepath='ckpt/e1' failed \(RuntimeError: "
                             r"injected\).*save_on_background=False") as err:
        writer.submit(lambda: started.append(1), "ckpt/e2", "ModelCheckpoint filepath")
    assert isinstance(err.value.__cause__, RuntimeError) and started == []  # not started
    writer.wait()  # raised once, not again
    disk_full = CheckpointWriteError(28, "Could not write ... the disk is full")

    def full():
        raise disk_full

    writer.submit(full, "b", "BackupAndRestore backup_dir")
    with pytest.raises(CheckpointWriteError) as err:  # its own message names the path already
        writer.wait()
    assert err.value is disk_full


def test_write_holds_the_values_of_the_save_while_the_caller_changes_its_arrays(tmp_path,
                                                                               monkeypatch):
    # The one host copy (zero.host_copy) is the write's own: a step that donates the device
    # buffer (on the CPU a host view of it) and the caller's NumPy array changed in place
    # while the write waits leave what it writes unchanged.
    strategy = mirrored_strategy(2)
    caller_array = np.arange(4, dtype=np.float32)
    state = strategy.replicate_arrays(np.ones(3, np.float32))
    release = threading.Event()
    monkeypatch.setattr(background, "write_hook",
                        lambda event, path: event == "start" and release.wait(30))
    writer = background.BackgroundWriter()
    background.save(writer, tmp_path / "ckpt",
                    zero.host_copy(strategy, {"caller": caller_array, "state": state}))
    caller_array[:] = -1
    state = jax.jit(lambda a: a * 0 - 1, donate_argnums=0)(state)  # as the next train step
    state.block_until_ready()
    release.set()
    writer.wait()
    saved = checkpoint_lib.read_latest(tmp_path / "ckpt").arrays
    np.testing.assert_array_equal(saved["caller"], np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(saved["state"], np.ones(3, np.float32))


def test_fit_keeps_one_write_in_flight_and_returns_after_the_last(model, tmp_path,
                                                                  monkeypatch):
    active, events, lock = [0], [], threading.Lock()

    def hook(event, path):
        with lock:
            active[0] += 1 if event == "start" else -1
            events.append((event, active[0]))
        if event == "start":  # a slower write: a second write in flight would overlap it
            time.sleep(0.02)

    monkeypatch.setattr(background, "write_hook", hook)
    checkpoint = mf.callbacks.ModelCheckpoint(tmp_path / "ckpt", save_freq=1)
    x, y = _data()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[checkpoint])
    assert [e for e, _ in events] == ["start", "end"] * 5  # a save per step, none lost
    assert max(n for _, n in events) == 1  # never two writes at once
    assert not checkpoint._writer.in_flight
    last = checkpoint_lib.read_latest(tmp_path / "ckpt")  # written before fit returned
    assert int(last.arrays["step"]) == 5
    tree_equal([last.arrays[k] for k in sorted(checkpoint_format.select(last.arrays, "params"))],
               [np.asarray(v) for _, v in sorted(checkpoint_format.flatten(
                   {"params": model.state.params}).items())])


def test_failed_background_backup_surfaces_in_fit_naming_backup_dir(model, tmp_path,
                                                                    monkeypatch):
    def injected(*args, **kwargs):
        raise RuntimeError("injected write failure")

    monkeypatch.setattr(checkpoint_lib, "_write_orbax", injected)
    backup = mf.callbacks.BackupAndRestore(tmp_path / "backup", save_freq=2)
    x, y = _data()
    with pytest.raises(background.BackgroundWriteError) as err:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[backup])
    message = str(err.value)
    assert f"BackupAndRestore backup_dir={str(tmp_path / 'backup')!r}" in message
    assert "injected write failure" in message
    DirectoryLock(tmp_path / "backup", "backup_dir").acquire().release()  # released
