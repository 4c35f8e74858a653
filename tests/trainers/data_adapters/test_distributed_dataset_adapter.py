"""fit/evaluate/predict on a DistributedDataset, as tf.keras' fit on a tf.distribute dataset.

``strategy.experimental_distribute_dataset(batches)`` yields global batches;
``strategy.distribute_datasets_from_function(fn)`` yields per-replica batches from one
pipeline per process. On 8 replicas with a global batch of 16, 35 rows make 3 steps, the
last a partial batch of 3 rows padded to 16: everything must match the same data as arrays,
with the compiled step of the array run reused. (Several processes:
tests/distribute/multi_worker/test_multi_worker.py.)
"""

import math

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.trainers import data_adapters
from mirrorfit._src.trainers.data_adapters.distributed_dataset_adapter import _exactly
from tests.helpers import count_step_compiles
from tests.trainers.data_adapters.helpers import X, Y, batches, make_model

REPLICAS, GLOBAL_BATCH, EPOCHS = 8, 16, 2


def _per_replica(context, inputs_only=False):
    """A dataset_fn: per-replica batches of GLOBAL_BATCH / replicas rows, in order."""
    size = context.get_per_replica_batch_size(GLOBAL_BATCH)
    for start in range(0, len(X), size):
        part = slice(start, start + size)
        yield X[part] if inputs_only else (X[part], Y[part])


def _dataset(model, kind, inputs_only=False):
    strategy = model.strategy
    if kind == "experimental_distribute_dataset":
        return strategy.experimental_distribute_dataset(
            [b[0] if inputs_only else b for b in batches(batch_size=GLOBAL_BATCH)])
    return strategy.distribute_datasets_from_function(
        lambda context: _per_replica(context, inputs_only))


KINDS = ["experimental_distribute_dataset", "distribute_datasets_from_function"]


@pytest.fixture(scope="module")
def trained():
    """The model, its initial weights, and the weights/history after fitting arrays."""
    model = make_model(REPLICAS)
    initial = model.get_weights()
    history = model.fit(X, Y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return model, initial, model.get_weights(), history.history


@pytest.mark.parametrize("kind", KINDS)
def test_distributed_dataset_fits_like_arrays_with_one_compile(kind, trained, allclose):
    model, initial, expected, expected_history = trained
    model.set_weights(initial)
    with count_step_compiles() as compiles:
        history = model.fit(_dataset(model, kind), epochs=EPOCHS, verbose=0)
    allclose(model.get_weights(), expected, rtol=1e-6, atol=1e-7)
    for key, values in expected_history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-6)
    # The partial last batch (3 rows, padded to 16) reuses the array run's compiled step.
    assert compiles == [0]


@pytest.mark.parametrize("kind", KINDS)
def test_distributed_dataset_evaluates_validates_and_predicts_like_arrays(kind, trained):
    model, initial, expected, _ = trained
    model.set_weights(expected)
    want = model.evaluate(X, Y, batch_size=GLOBAL_BATCH, verbose=0, return_dict=True)
    got = model.evaluate(_dataset(model, kind), verbose=0, return_dict=True)
    np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=1e-6)
    predicted = model.predict(_dataset(model, kind, inputs_only=True), verbose=0)
    np.testing.assert_allclose(predicted, model.predict(X, batch_size=GLOBAL_BATCH, verbose=0),
                               rtol=1e-6)
    model.set_weights(initial)
    history = model.fit(X[:GLOBAL_BATCH], Y[:GLOBAL_BATCH], batch_size=GLOBAL_BATCH,
                        validation_data=_dataset(model, kind), verbose=0)
    val = model.evaluate(X, Y, batch_size=GLOBAL_BATCH, verbose=0, return_dict=True)
    np.testing.assert_allclose(history.history["val_loss"], [val["loss"]], rtol=1e-6)


def test_per_process_pipeline_with_a_length_gives_the_steps_per_epoch(trained):
    grain = pytest.importorskip("grain")
    model = trained[0]

    def dataset_fn(context):
        shard = grain.sharding.ShardByJaxProcess()  # one process here: all 35 rows
        assert (shard.shard_index, shard.shard_count) == (0, 1)
        pairs = [(X[i], Y[i]) for i in range(len(X))]
        size = context.get_per_replica_batch_size(GLOBAL_BATCH)
        return grain.MapDataset.source(pairs).batch(size)  # 18 per-replica batches

    data = data_adapters.get_data_adapter(
        model.strategy.distribute_datasets_from_function(dataset_fn), batch_size=None,
        num_replicas=REPLICAS, strategy=model.strategy)
    assert data.steps == math.ceil(18 / REPLICAS) == 3
    rows = [int(batch.mask.sum()) for batch in data.batches(0)]
    assert rows == [16, 16, 3] and data.local_rows
    # Several processes compare the steps and padded rows, never the (per-process) data.
    assert data_adapters.input_fingerprint(data) == {
        "steps per epoch of the per-process input": 3,
        "padded rows per process of the per-process input": 16}


def test_distributed_dataset_of_another_strategy_is_a_value_error(trained):
    model = trained[0]
    other = mf.MirroredStrategy(jax.devices()[:2])
    dataset = other.experimental_distribute_dataset(list(batches(batch_size=GLOBAL_BATCH)))
    with pytest.raises(ValueError, match=r"must be distributed by the model's strategy.*"
                                         r"model\.strategy\.distribute_datasets_from_function"
                                         r".*Received: a dataset of MirroredStrategy"):
        model.fit(dataset, verbose=0)
    with pytest.raises(ValueError, match="must be distributed by the model's strategy"):
        model.fit(X, Y, validation_data=dataset, verbose=0)


@pytest.mark.parametrize("name, value", [("y", Y), ("sample_weight", np.ones(35)),
                                         ("batch_size", 16), ("shuffle", True)])
def test_argument_that_does_not_apply_to_a_distributed_dataset_is_named(name, value, trained):
    model = trained[0]
    dataset = _dataset(model, "distribute_datasets_from_function")
    with pytest.raises(ValueError, match=rf"^{name} does not apply when x is a "
                                         rf"DistributedDataset: .*Received: {name}="):
        model.fit(dataset, verbose=0, **{name: value})


def test_per_process_pipeline_that_runs_dry_early_names_steps_per_epoch():
    # With several processes, the adapter wraps each epoch's pipeline in this check.
    items = _exactly(iter([1, 2]), 3, 3, "steps_per_epoch")
    assert next(items) == 1 and next(items) == 2
    with pytest.raises(ValueError, match=r"must give steps_per_epoch=3 batches per epoch.*"
                                         r"ran dry after 2.*Received: steps_per_epoch=3"):
        next(items)
