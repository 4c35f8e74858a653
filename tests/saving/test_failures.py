"""Backups and checkpoints never lose or silently mix data (issue 16, section 2).

Each test covers a class of fault (a newer format, a foreign directory, another run's data or
configuration, damaged metadata or arrays, a path that is a file, a full disk) across every
writer or reader it applies to, and checks that no file was lost and that the model trains
afterwards. Most tests share one compiled 2-device model, reset to its initial state.
"""

import errno
import gc
import json
import math

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import mirrorfit as mf
from mirrorfit._src.saving import checkpoint as checkpoint_lib
from mirrorfit._src.saving import checkpoint_files, checkpoint_format
from tests.helpers import Interrupt, compiled_classifier, interrupt_after, reset_to_initial

ROWS, BATCH = 40, 8  # 5 steps per epoch


def _data(rows: int = ROWS, shift: float = 0.0):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4)).astype(np.float32) + shift
    return x, (x[:, 0] > 0).astype(np.int32)


@pytest.fixture(scope="module")
def compiled():
    return compiled_classifier([nn.Dense(8), nn.relu, nn.Dense(2), nn.softmax], seed=3)


@pytest.fixture
def model(compiled):
    """The shared compiled model, reset to its initial training state."""
    return reset_to_initial(compiled)


def _fit(model, callbacks, epochs=2, data=None):
    x, y = data if data is not None else _data()
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, shuffle=False,
                     callbacks=callbacks)


def _interrupted_backup(model, directory, stop_at=4):
    backup = mf.callbacks.BackupAndRestore(directory, save_freq=2)
    with pytest.raises(Interrupt):
        _fit(model, [backup, interrupt_after(model, stop_at)])
    return backup


def _snapshot(root):
    """Every file under ``root`` with its bytes: proves that nothing was lost or changed."""
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _first_step_recorder(model):
    started = []
    probe = mf.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs: started.append(
        int(jax.device_get(model.state.step))) if not started else None)
    return started, probe


def _assert_trains(model):
    before = model.get_weights()
    history = _fit(model, [], epochs=1)
    assert math.isfinite(history.history["loss"][0])
    assert not np.allclose(model.get_weights()[0], before[0])


# -- a newer format is refused and kept ------------------------------------------------------


def _newer_format(monkeypatch):
    monkeypatch.setattr(checkpoint_format, "FORMAT", f"{checkpoint_format.FORMAT_NAME}/"
                                                     f"{checkpoint_format.FORMAT_VERSION + 1}")


def _resume_backup(model, path):
    _fit(model, [mf.callbacks.BackupAndRestore(path)])


READERS = {
    "backup_and_restore": (lambda model, path: _interrupted_backup(model, path), _resume_backup),
    "load_weights": (lambda model, path: model.save_weights(path),
                     lambda model, path: model.load_weights(path)),
    "load_model": (lambda model, path: model.save(path),
                   lambda model, path: mf.load_model(path, model.module,
                                                     optimizer=mf.optimizers.SGD(0.1))),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_newer_format_is_refused_and_nothing_is_deleted(reader, model, tmp_path, monkeypatch):
    write, read = READERS[reader]
    path = tmp_path / "ckpt"
    with monkeypatch.context() as patch:
        _newer_format(patch)
        write(model, path)
    files = _snapshot(path)
    with pytest.raises(checkpoint_format.NewerFormatError,
                       match=r"written by a newer mirrorfit.*Upgrade mirrorfit.*move the "
                             r"directory away"):
        read(model, path)
    assert _snapshot(path) == files
    _assert_trains(model)


# -- a backup_dir with the user's files ------------------------------------------------------


def test_backup_dir_with_only_user_files_is_refused_and_left_alone(model, tmp_path):
    directory = tmp_path / "results"
    directory.mkdir()
    (directory / "notes.txt").write_text("my notes")
    (directory / "ckpt-7").mkdir()  # named like a backup, but not laid out as one
    (directory / "ckpt-7" / "model.h5").write_bytes(b"user weights")
    files = _snapshot(directory)
    with pytest.raises(ValueError, match=r"backup_dir .* is not empty and holds no "
                                         r"mirrorfit backup.*Received: backup_dir="):
        _fit(model, [mf.callbacks.BackupAndRestore(directory)])
    assert _snapshot(directory) == files
    _assert_trains(model)


@pytest.mark.parametrize("interrupted", [False, True])
def test_backup_removes_only_its_own_files_at_the_end(model, tmp_path, interrupted):
    directory = tmp_path / "results"
    if interrupted:  # a run's backups first, then the user's files beside them
        _interrupted_backup(model, directory)
    else:
        directory.mkdir()
    (directory / "notes.txt").write_text("my notes")
    (directory / "ckpt-9").mkdir()
    (directory / "ckpt-9" / "data.csv").write_text("1,2")
    user_files = {k: v for k, v in _snapshot(directory).items() if k.parts[0] in (
        "notes.txt", "ckpt-9")}
    if interrupted:
        _fit(model, [mf.callbacks.BackupAndRestore(directory, save_freq=2)])
    else:  # user files but no backup: refused before anything is written
        with pytest.raises(ValueError, match="holds no mirrorfit backup"):
            _fit(model, [mf.callbacks.BackupAndRestore(directory, save_freq=2)])
    assert _snapshot(directory) == user_files
    assert not checkpoint_files.holds_checkpoints(directory)


# -- another run's data or compile configuration ---------------------------------------------


def _other_values(model):
    return _data(shift=0.5)


def _other_labels(model):
    x, y = _data()
    return x, 1 - y


def _other_optimizer(model):
    model.compile(mf.optimizers.SGD(0.05), "sparse_categorical_crossentropy", ["accuracy"])
    return _data()


class _DoubledCrossentropy(mf.losses.SparseCategoricalCrossentropy):
    def call(self, y_true, y_pred):
        return 2.0 * super().call(y_true, y_pred)


def _other_loss(model):
    model.compile(mf.optimizers.SGD(0.1), _DoubledCrossentropy(), ["accuracy"])
    return _data()


CHANGES = {
    "x_values": (_other_values, r"training data: the values of the sampled training rows"),
    "labels": (_other_labels, r"training data: the values of the sampled training rows"),
    "optimizer": (_other_optimizer, r"compile optimizer: .*0\.1.* in the backup, .*0\.05.* now"),
    "loss": (_other_loss, r"compile loss: \{'SparseCategoricalCrossentropy': .*\} in the backup, "
                          r"\{'_DoubledCrossentropy': .*\} now"),
}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("strict", [True, False])
def test_resuming_with_other_data_or_compile_config_is_an_error(change, strict, model, tmp_path):
    make, match = CHANGES[change]
    _interrupted_backup(model, tmp_path / "b")
    files = _snapshot(tmp_path / "b")
    data = make(model)
    started, probe = _first_step_recorder(model)
    backup = mf.callbacks.BackupAndRestore(tmp_path / "b", save_freq=2, strict=strict,
                                           delete_checkpoint=False)
    if strict:
        with pytest.raises(ValueError, match=match + r"(.|\n)*strict=False"):
            _fit(model, [backup, probe], data=data)
        assert _snapshot(tmp_path / "b") == files
        assert not started
    else:
        with pytest.warns(mf.MirrorfitWarning, match=match):
            _fit(model, [backup, probe], data=data)
        assert started == [4]  # resumed from the backup after step 4
    model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy", ["accuracy"])
    _assert_trains(model)


def test_resuming_with_the_same_data_and_config_is_silent(model, tmp_path):
    _interrupted_backup(model, tmp_path / "b")
    model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy", ["accuracy"])
    started, probe = _first_step_recorder(model)
    _fit(model, [mf.callbacks.BackupAndRestore(tmp_path / "b", save_freq=2), probe])
    assert started == [4]


# -- damaged metadata or arrays: fall back to the previous backup ----------------------------


def _edit_step_digit(version):
    path = version / "meta" / "metadata"
    meta = json.loads(path.read_text())
    text = path.read_text().replace(f'"step": {meta["info"]["step"]}',
                                    f'"step": {meta["info"]["step"] - 1}')
    assert text != path.read_text()
    path.write_text(text)


def _edit_history_value(version):
    path = version / "meta" / "metadata"
    meta = json.loads(path.read_text())
    meta["info"]["epoch"] += 1  # valid JSON, plausible value: only the checksum tells
    path.write_text(json.dumps(meta))


def _flip_array_bytes(version):
    files = [p for p in (version / "arrays").rglob("*") if p.is_file() and p.parent.name == "d"]
    for path in files:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))


# Orbax's reader of a damaged array abandons pending reads, which report to a closed loop.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("damage", [_edit_step_digit, _edit_history_value, _flip_array_bytes])
def test_damaged_newest_backup_falls_back_to_the_previous_one(damage, compiled, tmp_path):
    model, initial = compiled
    model.state = model.strategy.replicate_arrays(initial)
    _fit(model, [])  # the uninterrupted run
    expected = model.get_weights()
    model.state = model.strategy.replicate_arrays(initial)
    _interrupted_backup(model, tmp_path / "b")
    newest, previous = checkpoint_lib.versions(tmp_path / "b")
    damage(newest)
    started, probe = _first_step_recorder(model)
    with pytest.warns(mf.MirrorfitWarning,
                      match=r"damaged backup.*falling back"):
        _fit(model, [mf.callbacks.BackupAndRestore(tmp_path / "b", save_freq=2), probe])
    assert started == [2]  # the backup after step 2, not the damaged one after step 4
    for got, want in zip(model.get_weights(), expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# -- path errors: a file where the directory should be, a full disk --------------------------


def _save_weights(model, path):
    model.save_weights(path)


def _save(model, path):
    model.save(path)


def _model_checkpoint(model, path):
    _fit(model, [mf.callbacks.ModelCheckpoint(path, save_weights_only=True)], epochs=1)


def _backup(model, path):
    # A second call resumes after the first one's epoch and trains (and backs up) one more.
    epochs = 2 if checkpoint_files.holds_checkpoints(path) else 1
    _fit(model, [mf.callbacks.BackupAndRestore(path, delete_checkpoint=False)], epochs=epochs)


WRITERS = {  # writer, the argument its errors must name
    "save_weights": (_save_weights, "path"),
    "save": (_save, "path"),
    "model_checkpoint": (_model_checkpoint, "ModelCheckpoint filepath"),
    "backup_and_restore": (_backup, "BackupAndRestore backup_dir"),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_checkpoint_path_that_is_a_file_names_the_argument(writer, model, tmp_path):
    write, argument = WRITERS[writer]
    path = tmp_path / "model.weights.h5"
    path.write_bytes(b"the user's file")
    with pytest.raises(ValueError, match=rf"{argument} must name a directory.*existing file"
                                         rf".*Choose a new directory.*Received: "):
        write(model, path)
    assert path.read_bytes() == b"the user's file"
    _assert_trains(model)


async def _disk_full(self, item, directory):
    raise OSError(errno.ENOSPC, "No space left on device")


async def _tensorstore_full(self, item, directory):
    raise ValueError("RESOURCE_EXHAUSTED: Error writing local file \"d/0a1b\": [OS error: "
                     "No space left on device]")


# A failing write abandons orbax's other pending writes, which report to a closed event loop.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("failure", [_disk_full, _tensorstore_full])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_full_disk_names_the_argument_and_keeps_the_previous_checkpoint(writer, failure, model,
                                                                        tmp_path, monkeypatch):
    write, argument = WRITERS[writer]
    path = tmp_path / "ckpt"
    write(model, path)
    previous = checkpoint_lib.versions(path)[0]
    files = _snapshot(path)
    saved = checkpoint_lib.load(previous)
    with monkeypatch.context() as patch:
        patch.setattr(ocp.JsonCheckpointHandler, "_save_fn", failure)
        with pytest.raises(checkpoint_files.CheckpointWriteError,
                           match=rf"{argument}=.*the disk is full.*Free disk space, or pass a "
                                 rf"{argument} on a disk with room.*previous checkpoint "
                                 rf".*{previous.name}' is intact"):
            write(model, path)
    assert _snapshot(path) == files  # no half-written version left, nothing removed
    again = checkpoint_lib.load(checkpoint_lib.versions(path)[0])
    assert again.path == previous
    for key, value in saved.arrays.items():
        assert np.array_equal(again.arrays[key], value)
    _assert_trains(model)
    gc.collect()  # report the abandoned writes here, under this test's warning filter


# -- formats this mirrorfit reads ------------------------------------------------------------


def test_format_1_checkpoints_without_a_metadata_checksum_still_load(tmp_path, monkeypatch):
    tree = {"w": np.arange(6.0).reshape(2, 3)}
    with monkeypatch.context() as patch:
        patch.setattr(checkpoint_format, "FORMAT", f"{checkpoint_format.FORMAT_NAME}/1")
        version = checkpoint_lib.save(tmp_path / "c", tree, {"epoch": 2})
    path = version / "meta" / "metadata"
    meta = json.loads(path.read_text())
    del meta["sha256"]  # version 1 wrote none
    path.write_text(json.dumps(meta))
    loaded = checkpoint_lib.load(version)
    assert np.array_equal(loaded.arrays["w"], tree["w"]) and loaded.info == {"epoch": 2}


@pytest.mark.parametrize("tag", ["other-format/1", "mirrorfit-checkpoint/x", None])
def test_meta_of_another_format_is_damage_not_a_newer_version(tag, tmp_path):
    version = checkpoint_lib.save(tmp_path / "c", {"w": np.ones(3)})
    path = version / "meta" / "metadata"
    meta = json.loads(path.read_text())
    meta["format"] = tag
    path.write_text(json.dumps(meta))
    with pytest.raises(checkpoint_format.CheckpointError,
                       match="not a mirrorfit checkpoint") as info:
        checkpoint_lib.load(version)
    assert not isinstance(info.value, checkpoint_format.NewerFormatError)
