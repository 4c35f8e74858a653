"""``.keras`` files: failed writes name the file and the cause with its errno, damaged files
are called damaged, and ``load_weights`` reads one; a full disk during a backup is errno 28."""

import errno
import gc
import re
import zipfile

import flax.linen as nn
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

import mirrorfit as mf
from mirrorfit._src.saving import checkpoint_files, checkpoint_format
from tests.helpers import tree_equal

_rng = np.random.default_rng(0)
X = _rng.normal(size=(16, 4)).astype(np.float32)
Y = (X[:, 0] > 0).astype(np.int32)


@pytest.fixture(scope="module")
def model():
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(2), nn.softmax],
                              input_shape=(4,), seed=3)
        model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy")
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    return model


def _paths_in(message, root):
    """Every quoted path under ``root`` that ``message`` mentions."""
    return set(re.findall(rf"'({re.escape(str(root))}[^']*)'", message))


async def _disk_full(self, item, directory):
    raise OSError(errno.ENOSPC, "No space left on device")


async def _tensorstore_full(self, item, directory):  # what orbax raises: no errno, only words
    raise ValueError("RESOURCE_EXHAUSTED: Error writing local file \"d/0a1b\": [OS error: "
                     "No space left on device]")


def _read_only(path):
    async def fail(self, item, directory):
        raise OSError(errno.EROFS, "Read-only file system", str(directory))
    return fail


def _zip_write_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


# A failing write abandons orbax's other pending writes, which report to a closed event loop.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(("where", "code", "cause"), [
    ("orbax", errno.ENOSPC, r"the disk is full \(\[Errno 28\] No space left on device\)"),
    ("zip", errno.ENOSPC, r"the disk is full \(\[Errno 28\] No space left on device\)"),
    ("read-only", errno.EROFS,
     r"the file system is read-only \(\[Errno 30\] Read-only file system\)"),
])
def test_failed_keras_write_names_the_file_and_the_cause(where, code, cause, model, tmp_path,
                                                         monkeypatch):
    path = tmp_path / "m.keras"
    model.save(path)
    before = path.read_bytes()
    with monkeypatch.context() as patch:
        if where == "zip":
            patch.setattr(zipfile.ZipFile, "write", _zip_write_full)
        else:
            patch.setattr(ocp.JsonCheckpointHandler, "_save_fn",
                          _disk_full if where == "orbax" else _read_only(path))
        with pytest.raises(checkpoint_files.CheckpointWriteError) as raised:
            model.save(path)
    message = str(raised.value)
    assert raised.value.errno == code
    assert re.search(rf"Could not write the .keras file path='{re.escape(str(path))}': {cause}",
                     message)
    assert _paths_in(message, tmp_path) == {str(path)}  # never a temporary directory
    assert path.read_bytes() == before  # the previous file is unchanged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.keras"]  # no temporary left
    gc.collect()


@pytest.mark.parametrize("reader", ["load_model", "load_weights"])
@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_damaged_keras_file_is_called_damaged(damage, reader, model, tmp_path):
    path = tmp_path / "m.keras"
    model.save(path)
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:  # a byte inside the compressed arrays: fails a CRC, zlib or a checksum
        with zipfile.ZipFile(path) as archive:
            info = max(archive.infolist(), key=lambda i: i.compress_size)
        middle = info.header_offset + 30 + len(info.filename) + info.compress_size // 2
        data[middle] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError) as raised:
        if reader == "load_model":
            mf.load_model(path)
        else:
            model.load_weights(path)
    message = str(raised.value)
    assert f"The .keras file '{path}' is damaged or truncated" in message
    assert "not a .keras file" not in message
    assert _paths_in(message, tmp_path) <= {str(path)}


def test_keras_file_of_a_newer_mirrorfit_names_the_file_not_a_temporary_one(model, tmp_path,
                                                                            monkeypatch):
    path = tmp_path / "m.keras"
    with monkeypatch.context() as patch:
        patch.setattr(checkpoint_format, "FORMAT", f"{checkpoint_format.FORMAT_NAME}/"
                                                   f"{checkpoint_format.FORMAT_VERSION + 1}")
        model.save(path)
    with pytest.raises(checkpoint_format.NewerFormatError, match="written by a newer mirrorfit") \
            as raised:
        model.load_weights(path)
    assert _paths_in(str(raised.value), tmp_path) == {f"{path}/model/ckpt-1"}  # inside it


def test_file_that_is_no_zip_is_not_a_keras_file(model, tmp_path):
    path = tmp_path / "notes.keras"
    path.write_text("my notes")
    with pytest.raises(ValueError, match=rf"'{re.escape(str(path))}' is not a .keras file "
                                         r"written by model.save \(it is not a zip file"):
        model.load_weights(path)


def test_load_weights_reads_a_keras_file(model, tmp_path):
    path = tmp_path / "m.keras"
    model.save(path)
    saved = model.get_weights()
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        other = mf.Sequential([nn.Dense(8), nn.relu, nn.Dense(2), nn.softmax],
                              input_shape=(4,), seed=11)
    assert not all(np.array_equal(a, b) for a, b in zip(other.get_weights(), saved))
    other.load_weights(path)
    tree_equal(other.get_weights(), saved)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("failure", [_disk_full, _tensorstore_full])
def test_full_disk_during_a_backup_reports_errno_28(failure, model, tmp_path, monkeypatch):
    backup = mf.callbacks.BackupAndRestore(tmp_path / "backup")
    with monkeypatch.context() as patch:
        patch.setattr(ocp.JsonCheckpointHandler, "_save_fn", failure)
        with pytest.raises(checkpoint_files.CheckpointWriteError,
                           match=r"BackupAndRestore backup_dir=.*the disk is full \(\[Errno 28\] "
                                 r"No space left on device\)") as raised:
            model.fit(X, Y, batch_size=8, epochs=1, verbose=0, callbacks=[backup])
    assert raised.value.errno == errno.ENOSPC
    gc.collect()
