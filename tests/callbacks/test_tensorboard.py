"""`TensorBoard`: scalars read back from its events files (epoch and batch logs, the learning
rate), no events file without values, and ``profile_batch`` traces read back from disk.

The tests share one compiled 2-device model and reset its training state first.
"""

import gzip
import json
import math
import struct

import flax.linen as nn
import jax
import numpy as np
import pytest
from tensorboardX.proto import event_pb2
from tensorboardX.record_writer import masked_crc32c

import mirrorfit as mf
from tests.helpers import compiled_classifier, reset_to_initial

ROWS, BATCH = 72, 16  # 5 steps per epoch, the last one partial (8 rows)
STEPS = math.ceil(ROWS / BATCH)


def _data(rows: int = ROWS):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, 4)).astype(np.float32)
    return x, (x[:, 0] + x[:, 1] > 0).astype(np.int32)


@pytest.fixture(scope="module")
def compiled():
    return compiled_classifier([nn.Dense(16), nn.relu, nn.Dense(2), nn.softmax], seed=2)


@pytest.fixture
def model(compiled):
    """The shared compiled model, reset to its initial training state."""
    return reset_to_initial(compiled)


def _fit(model, callbacks, epochs, **kwargs):
    x, y = _data()
    return model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0, callbacks=callbacks,
                     **kwargs)


def _read_events(directory):
    """Scalars of every events file in ``directory``: {tag: [(step, value)]}.

    TFRecord framing: uint64 length, uint32 masked CRC32C of the length, the record, uint32
    masked CRC32C of the record (little endian). Each record is an ``Event`` proto.
    """
    scalars = {}
    files = sorted(directory.glob("events.out.tfevents.*"))
    assert files, f"no event file in {directory}"
    for path in files:
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            header = data[offset:offset + 8]
            (length,) = struct.unpack("<Q", header)
            (length_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
            assert length_crc == masked_crc32c(header)
            record = data[offset + 12:offset + 12 + length]
            (record_crc,) = struct.unpack("<I", data[offset + 12 + length:offset + 16 + length])
            assert record_crc == masked_crc32c(record)
            offset += 16 + length
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def test_tensorboard_event_files_hold_the_logged_values(model, tmp_path):
    board = mf.callbacks.TensorBoard(tmp_path, update_freq=2)
    history = _fit(model, [board], 2, validation_data=_data(24))
    train, val = _read_events(tmp_path / "train"), _read_events(tmp_path / "validation")
    for tag, logs, key in (("epoch_loss", train, "loss"), ("epoch_accuracy", train, "accuracy"),
                           ("epoch_loss", val, "val_loss"),
                           ("epoch_accuracy", val, "val_accuracy")):
        assert [s for s, _ in logs[tag]] == [0, 1]
        np.testing.assert_array_equal([v for _, v in logs[tag]],
                                      np.float32(history.history[key]))  # float32 protos
    # Every 2 steps (10 steps in all), at the global step; batch loss is the running mean.
    assert [s for s, _ in train["batch_loss"]] == [2, 4, 6, 8, 10]
    assert train["batch_loss"][-1][1] == np.float32(history.history["loss"][1])
    assert "epoch_learning_rate" not in val


def _schedule(epoch):
    return 0.1 * 0.5 ** epoch


@pytest.mark.parametrize("board_first", [True, False])
def test_epoch_learning_rate_is_the_optimizers_rate(model, tmp_path, board_first):
    # The scheduler writes the rate into the optimizer state at each epoch begin; the board
    # reads it from there, wherever it is listed (before the scheduler, the logs hold none).
    seen = []
    record = mf.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: seen.append(float(model.optimizer.learning_rate)))
    board = mf.callbacks.TensorBoard(tmp_path)
    scheduler = mf.callbacks.LearningRateScheduler(_schedule)
    _fit(model, [board, scheduler, record] if board_first else [scheduler, board, record], 3)
    logged = _read_events(tmp_path / "train")["epoch_learning_rate"]
    assert [s for s, _ in logged] == [0, 1, 2]
    expected = np.float32([_schedule(epoch) for epoch in range(3)])
    np.testing.assert_array_equal([v for _, v in logged], expected)  # exact: float32 protos
    np.testing.assert_array_equal(np.float32(seen), expected)


def test_epoch_learning_rate_without_a_scheduler_is_the_compiled_rate(model, tmp_path):
    _fit(model, [mf.callbacks.TensorBoard(tmp_path)], 2)
    logged = _read_events(tmp_path / "train")["epoch_learning_rate"]
    assert [v for _, v in logged] == [np.float32(0.1)] * 2


def test_no_validation_events_file_without_validation_data(model, tmp_path):
    _fit(model, [mf.callbacks.TensorBoard(tmp_path)], 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]
    files = list((tmp_path / "train").iterdir())
    assert len(files) == 1 and files[0].stat().st_size > 0
    assert "epoch_loss" in _read_events(tmp_path / "train")


def _traces(log_dir):
    """The ``jax.profiler`` runs under ``<log_dir>/train/plugins/profile``: {file suffix:
    [paths]} over all runs."""
    runs = sorted((log_dir / "train" / "plugins" / "profile").glob("*"))
    files = [path for run in runs for path in run.iterdir()]
    return runs, files


def _traced_steps(trace_file):
    """Step numbers of the ``train`` step annotations in a ``*.trace.json.gz``."""
    events = json.loads(gzip.decompress(trace_file.read_bytes()))["traceEvents"]
    return sorted(int(e["args"]["step_num"]) for e in events if e.get("name") == "train")


@pytest.mark.parametrize("profile_batch, steps", [((2, 3), [2, 3]), (4, [4]), ((5, 7), [5, 6, 7])])
def test_profile_batch_traces_those_train_steps(model, tmp_path, profile_batch, steps):
    # Steps count from 1 over the whole fit (5 per epoch): (5, 7) spans the epoch boundary.
    _fit(model, [mf.callbacks.TensorBoard(tmp_path, profile_batch=profile_batch)], 2)
    runs, files = _traces(tmp_path)
    assert len(runs) == 1
    xplanes = [f for f in files if f.name.endswith(".xplane.pb")]
    assert len(xplanes) == 1 and xplanes[0].stat().st_size > 0
    (trace,) = [f for f in files if f.name.endswith(".trace.json.gz")]
    assert _traced_steps(trace) == steps


def test_profile_batch_with_steps_per_execution_traces_the_calls_holding_them(tmp_path):
    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = mf.Sequential([nn.Dense(2), nn.softmax], input_shape=(4,), seed=0)
        model.compile("sgd", "sparse_categorical_crossentropy", steps_per_execution=2)
    # Calls hold steps 1-2, 3-4, 5 (epoch 1), 6-7, ...: steps 4 to 6 are in three calls,
    # each annotated with its first step.
    _fit(model, [mf.callbacks.TensorBoard(tmp_path, profile_batch=(4, 6))], 2)
    (trace,) = [f for f in _traces(tmp_path)[1] if f.name.endswith(".trace.json.gz")]
    assert _traced_steps(trace) == [3, 5, 6]


def test_no_profile_by_default(model, tmp_path):
    _fit(model, [mf.callbacks.TensorBoard(tmp_path)], 1)
    assert not (tmp_path / "train" / "plugins").exists()


@pytest.mark.parametrize("profile_batch", [-1, (0, 2), (3, 2), (1, 2, 3), "2", True, 1.5])
def test_profile_batch_must_be_a_step_or_a_range(profile_batch):
    with pytest.raises(ValueError, match=r"profile_batch must be .* Received: profile_batch="):
        mf.callbacks.TensorBoard(profile_batch=profile_batch)
