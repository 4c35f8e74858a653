"""Tests for device-resident datasets (mirrorfit/_src/trainers/resident.py).

A resident data set is placed on the devices once and each step receives only its row
indices and mask: fit (History, final weights), evaluate and predict must be bitwise equal
to the host path, which gathers and transfers every batch, at 1 and 8 replicas.
"""

import types

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.trainers import data_adapters
from mirrorfit._src.trainers import resident as resident_lib
from tests.helpers import (
    Interrupt,
    count_step_compiles,
    interrupt_after,
    mirrored_strategy,
    tree_equal,
)

ROWS, VAL_ROWS, BATCH = 45, 13, 10  # 5 steps per epoch, the last with 5 rows
_rng = np.random.default_rng(0)
X = _rng.normal(size=(ROWS, 4))  # float64: placed as float32 on both paths
Y = _rng.integers(0, 3, ROWS)
WEIGHTS = _rng.uniform(0.5, 1.5, ROWS)
X_VAL = _rng.normal(size=(VAL_ROWS, 4)).astype(np.float32)
Y_VAL = _rng.integers(0, 3, VAL_ROWS)


def _model(replicas, steps_per_execution=1):
    with mirrored_strategy(replicas).scope():
        model = mf.Sequential([mf.layers.Dense(8, activation="relu"), mf.layers.Dense(3)],
                              input_shape=(4,), seed=1)
        model.compile(mf.optimizers.Adam(0.01),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True),
                      ["accuracy"], steps_per_execution=steps_per_execution)
    return model


def _run(replicas, steps_per_execution, device_resident):
    """fit (shuffled, partial last batch, weighted, validated), evaluate and predict (on
    the validation data's shapes: the validation compiles serve them)."""
    model = _model(replicas, steps_per_execution)
    with count_step_compiles() as compiles:
        history = model.fit(X, Y, batch_size=BATCH, epochs=2, sample_weight=WEIGHTS,
                            class_weight={0: 1.0, 1: 2.0, 2: 0.5},
                            validation_data=(X_VAL, Y_VAL), verbose=0,
                            device_resident=device_resident)
    shapes = model.trainer._train_shapes
    cost = model.trainer.train_step_cost()  # ThroughputMonitor's: read from the compiled step
    evaluated = model.evaluate(X_VAL, Y_VAL, batch_size=BATCH, verbose=0,
                               device_resident=device_resident)
    predicted = model.predict(X_VAL, batch_size=BATCH, verbose=0,
                              device_resident=device_resident)
    results = (history.history, model.get_weights(), evaluated, predicted)
    return results, cost, shapes, compiles[0]


@pytest.mark.parametrize("replicas, steps_per_execution", [(1, 1), (8, 3)])
def test_resident_results_bitwise_equal_host_path(replicas, steps_per_execution, monkeypatch):
    host, host_cost, host_shapes, host_compiles = _run(replicas, steps_per_execution, False)
    placed = []  # every host batch the resident path places (or passes) per step

    def recording(batches, *args, **kwargs):
        for batch in batches:
            placed.append(batch)
            yield batch

    place = resident_lib.place_batches
    monkeypatch.setattr(resident_lib, "place_batches",
                        lambda batches, *a, **k: place(recording(batches), *a, **k))
    got, cost, shapes, compiles = _run(replicas, steps_per_execution, True)
    tree_equal(got, host)
    # The step's cost: the same global batch; XLA counts the gather's few index operations.
    assert cost.global_batch_size == host_cost.global_batch_size
    assert cost.flops == pytest.approx(host_cost.flops, rel=0.05)
    assert compiles == host_compiles == 2  # one train and one validation compile per fit
    # Only the indices and the mask cross per step: int32 rows, bool mask, nothing else.
    padded = -(-BATCH // replicas) * replicas
    group = (steps_per_execution,) if steps_per_execution > 1 else ()
    train_steps = 2 * -(-5 // steps_per_execution)
    assert len(placed) == train_steps + 2 * 2 + 2 + 2  # + validation, evaluate, predict
    assert sum(batch.x.shape == group + (padded,) for batch in placed) == (
        train_steps if group else len(placed))
    for batch in placed:
        assert batch.x.dtype == np.int32 and batch.x.shape[-1] == padded
        assert batch.mask.dtype == bool and batch.mask.shape == batch.x.shape
        assert batch.y is None and batch.sample_weight is None
    # The compiled train step takes the whole data set (64 rows: 45 padded to a power of
    # two), mirrored, with the indices split over replicas; the host path takes rows.
    assert isinstance(shapes[2], resident_lib.ResidentBatch)
    assert shapes[2].arrays.x.shape == (64, 4) and shapes[2].index.shape == group + (padded,)
    assert shapes[2].arrays.x.sharding.is_fully_replicated
    assert host_shapes[2].x.shape == group + (padded, 4)


def test_resident_fit_resumes_mid_epoch_bitwise(tmp_path):
    # Interrupted at step 7 (epoch 1, step 2) after a backup at step 6, then resumed: the
    # resident run ends with the uninterrupted host run's weights.
    reference = _model(1)
    reference.fit(X, Y, batch_size=BATCH, epochs=2, verbose=0, device_resident=False)
    model = _model(1)
    backup = mf.callbacks.BackupAndRestore(tmp_path, save_freq=2)
    with pytest.raises(Interrupt):
        model.fit(X, Y, batch_size=BATCH, epochs=2, verbose=0, device_resident=True,
                  callbacks=[backup, interrupt_after(model, 7)])
    first = []
    probe = mf.callbacks.LambdaCallback(on_train_batch_begin=lambda batch, logs: first.append(
        int(jax.device_get(model.state.step))))
    model.fit(X, Y, batch_size=BATCH, epochs=2, verbose=0, device_resident=True,
              callbacks=[mf.callbacks.BackupAndRestore(tmp_path, save_freq=2), probe])
    assert first[0] == 6  # resumed mid-epoch, not from the epoch start
    tree_equal(model.get_weights(), reference.get_weights())


def _adapter(rows):
    return data_adapters.ArrayDataAdapter(X[:rows], Y[:rows], WEIGHTS[:rows], batch_size=BATCH,
                                          num_replicas=1)


def test_automatic_choice_fits_the_budget_in_order():
    train, validation = _adapter(ROWS), _adapter(VAL_ROWS)
    # float64 x as float32, int64 y as int32, float32 weights: 6 * 4 bytes per row, rows
    # padded to a power of two.
    assert resident_lib.bucket_rows(45) == 64 and resident_lib.bucket_rows(64) == 64
    assert resident_lib.resident_bytes(train) == 64 * 24
    assert resident_lib.resident_bytes(validation) == 16 * 24
    strategy = mirrored_strategy(1)
    fits_train_only = int((64 + 15) * 24 / resident_lib.BUDGET_FRACTION)
    resident_lib.choose(None, [train, validation], strategy, available=fits_train_only)
    assert train.resident is not None and validation.resident is None
    resident_lib.choose(None, [train, validation], strategy, available=10 * fits_train_only)
    assert train.resident is not None and validation.resident is not None
    resident_lib.choose(None, [train], strategy, available=10 * fits_train_only,
                        automatic=False)  # evaluate, predict: one pass, host path
    assert train.resident is None
    resident_lib.choose(True, [train, None], mirrored_strategy(8), available=0)
    assert train.resident is not None


def test_free_bytes_is_the_fullest_accelerators_and_none_on_the_cpu():
    def device(limit, in_use, platform="gpu"):
        return types.SimpleNamespace(
            platform=platform, memory_stats=lambda: {"bytes_limit": limit, "bytes_in_use": in_use})

    gpus = types.SimpleNamespace(devices=[device(100, 10), device(100, 40)],
                                 single_replica=False)
    assert resident_lib.free_bytes(gpus) == 60
    no_stats = types.SimpleNamespace(devices=[types.SimpleNamespace(
        platform="tpu", memory_stats=lambda: None)], single_replica=True)
    assert resident_lib.free_bytes(no_stats) == 0
    # The CPU backend: host memory is "the device"; the host path is the default there.
    assert resident_lib.free_bytes(mirrored_strategy(1)) == 0
    assert resident_lib.free_bytes(mirrored_strategy(8)) == 0


def test_fit_feeds_from_the_host_by_default_on_the_cpu():
    model = _model(1)
    seen = []

    class Probe(mf.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(self.model.trainer.train_data.resident)

    model.fit(X[:ROWS], Y[:ROWS], batch_size=BATCH, epochs=1, verbose=0, callbacks=[Probe()])
    assert seen and all(resident is None for resident in seen)
    model.fit(X[:ROWS], Y[:ROWS], batch_size=BATCH, epochs=1, verbose=0, callbacks=[Probe()],
              device_resident=True)
    assert seen[-1] is not None


def test_device_resident_argument_is_validated():
    model = _model(1)
    with pytest.raises(TypeError, match=r"device_resident must be None .*Received: "
                                        r"device_resident='yes'"):
        model.fit(X, Y, device_resident="yes")
    batches = [(X[:10].astype(np.float32), Y[:10])]
    with pytest.raises(ValueError, match="device_resident=True needs in-memory arrays .*"
                                         "Received: x of kind iterable of batches"):
        model.evaluate(batches, device_resident=True, verbose=0)
