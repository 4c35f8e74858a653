"""Every adapter `get_data_adapter` returns keeps the `DataAdapter` contract.

One tiny data set (10 rows, global batches of 4 on 3 replicas: steps of 4, 4 and 2 real rows,
each padded to 6) is given as every input kind; each adapter's interface values (steps per
epoch, batch sizes, flags, first inputs, resume order, in-memory arrays) are checked against
the batches it yields, so an adapter that drifts from the contract fails here.
"""

import inspect
import math
from typing import Any, NamedTuple

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.distribute.batch import padded_size
from mirrorfit._src.trainers import data_adapters
from mirrorfit._src.trainers.data_adapters import DataAdapter

REPLICAS, BATCH, ROWS, FEATURES = 3, 4, 10, 2
X = np.arange(ROWS * FEATURES, dtype=np.float32).reshape(ROWS, FEATURES)
Y = np.arange(ROWS, dtype=np.int32)


def _batches(size=BATCH):
    for start in range(0, ROWS, size):
        yield X[start:start + size], Y[start:start + size]


class _Batches(mf.utils.PyDataset):
    def __len__(self):
        return math.ceil(ROWS / BATCH)

    def __getitem__(self, index):
        return X[index * BATCH:(index + 1) * BATCH], Y[index * BATCH:(index + 1) * BATCH]


def _per_replica(context):
    """A dataset_fn without a length: per-replica batches of 2 rows (global batch 6)."""
    yield from _batches(context.get_per_replica_batch_size(6))


def _grain(kind):
    grain = pytest.importorskip("grain")
    pairs = [(X[i], Y[i]) for i in range(ROWS)]
    if kind == "loader":
        sampler = grain.samplers.IndexSampler(ROWS, shard_options=grain.sharding.NoSharding(),
                                              shuffle=False, num_epochs=1)
        return grain.DataLoader(data_source=pairs, sampler=sampler, worker_count=0,
                                operations=[grain.transforms.Batch(BATCH)])
    dataset = grain.MapDataset.source(pairs).batch(BATCH)
    return dataset if kind == "map" else dataset.to_iter_dataset()


def _tf(strategy):
    tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed here")
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH)


def _torch(strategy):
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(Y))
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH)


class Kind(NamedTuple):
    source: Any  # strategy -> the x given to get_data_adapter
    name: str  # the adapter's `kind`
    sized: bool = True  # whether the steps per epoch are known before reading
    global_batch: int = BATCH  # real rows of a full step


KINDS = {
    "arrays": Kind(lambda strategy: X, "arrays"),
    "generator": Kind(lambda strategy: _batches(), "generator", sized=False),
    "list_of_batches": Kind(lambda strategy: list(_batches()), "iterable of batches"),
    "py_dataset": Kind(lambda strategy: _Batches(), "PyDataset"),
    "experimental_distribute_dataset": Kind(
        lambda strategy: strategy.experimental_distribute_dataset(list(_batches())),
        "DistributedDataset"),
    "distribute_datasets_from_function": Kind(
        lambda strategy: strategy.distribute_datasets_from_function(_per_replica),
        "DistributedDataset", sized=False, global_batch=6),
    "grain_map": Kind(lambda strategy: _grain("map"), "grain dataset"),
    "grain_iter": Kind(lambda strategy: _grain("iter"), "grain dataset", sized=False),
    "grain_loader": Kind(lambda strategy: _grain("loader"), "grain dataset", sized=False),
    "tf_data": Kind(_tf, "tf.data.Dataset"),
    "torch_loader": Kind(_torch, "torch DataLoader"),
}


@pytest.fixture(scope="module")
def strategy():
    return mf.MirroredStrategy(jax.devices()[:REPLICAS])


def _adapter(kind: str, strategy) -> DataAdapter:
    source = KINDS[kind].source(strategy)
    if kind == "arrays":
        return data_adapters.get_data_adapter(source, Y, batch_size=BATCH,
                                              num_replicas=REPLICAS, strategy=strategy)
    return data_adapters.get_data_adapter(source, batch_size=None, num_replicas=REPLICAS,
                                          strategy=strategy)


def _rows(kind: str) -> list[int]:
    """Real rows per step of ``kind``'s epoch: full global batches, then the rest."""
    size = KINDS[kind].global_batch
    return [min(size, ROWS - start) for start in range(0, ROWS, size)]


@pytest.mark.parametrize("kind", KINDS)
def test_adapter_interface_values_match_its_batches(kind, strategy):
    data = _adapter(kind, strategy)
    rows = _rows(kind)
    padded = padded_size(rows[0], REPLICAS)
    assert isinstance(data, DataAdapter) and not inspect.isabstract(type(data))
    assert data.kind == KINDS[kind].name
    assert data.steps == (len(rows) if KINDS[kind].sized else None)
    assert data.batch_size == (BATCH if kind == "arrays" else None)
    assert data.runs_user_code is (kind != "arrays")
    assert data.local_rows is (kind == "distribute_datasets_from_function")
    np.testing.assert_array_equal(data.first_inputs(), X if kind == "arrays" else X[:rows[0]])

    batches = list(data.batches(0))

    assert data.padded_batch_size == padded
    assert [(b.x.shape, b.y.shape, b.mask.shape) for b in batches] == [
        ((padded, FEATURES), (padded,), (padded,))] * len(rows)
    assert [int(b.mask.sum()) for b in batches] == rows
    np.testing.assert_array_equal(np.concatenate([b.x[b.mask] for b in batches]), X)
    np.testing.assert_array_equal(np.concatenate([b.y[b.mask] for b in batches]), Y)
    assert data.steps_seen == len(rows)
    assert data.epoch_order(0) is None  # no shuffle: nothing to check on resume
    if kind == "arrays":
        x, y, sample_weight = data.arrays()
        np.testing.assert_array_equal(x, X)
        np.testing.assert_array_equal(y, Y)
        assert sample_weight is None
    else:
        assert data.arrays() is None  # a source cannot be read without consuming it


@pytest.mark.parametrize("kind", KINDS)
def test_grouped_batches_from_a_start_step_are_stacked_and_filled_with_masked_steps(
        kind, strategy):
    data = _adapter(kind, strategy)
    rows = _rows(kind)
    padded = padded_size(rows[0], REPLICAS)
    items = list(data.batches(0, start_step=1, group=len(rows)))
    assert len(items) == 1
    assert items[0].x.shape == (len(rows), padded, FEATURES)
    assert items[0].mask.sum(axis=1).tolist() == [*rows[1:], 0]  # the filler masks all rows
    np.testing.assert_array_equal(items[0].x[items[0].mask], X[rows[0]:])
    assert data.steps_seen == len(rows)


@pytest.mark.parametrize("kind", KINDS)
def test_sources_check_the_first_batch_they_pad_and_arrays_need_no_check(kind, strategy):
    data = _adapter(kind, strategy)
    checked = []
    data.check_input = checked.append
    list(data.batches(0))
    if kind == "arrays":
        assert checked == []  # first_inputs() was all of x
    else:
        assert len(checked) == 1
        np.testing.assert_array_equal(checked[0], X[:_rows(kind)[0]])


def test_shuffled_arrays_yield_their_rows_in_epoch_order(strategy):
    data = data_adapters.get_data_adapter(X, Y, batch_size=BATCH, num_replicas=REPLICAS,
                                          shuffle=True, seed=5)
    order = data.epoch_order(1)
    assert sorted(order.tolist()) == list(range(ROWS))
    assert not np.array_equal(order, data.epoch_order(2))
    np.testing.assert_array_equal(order, data.epoch_order(1))  # a resume sees the same
    batches = list(data.batches(1))
    np.testing.assert_array_equal(np.concatenate([b.y[b.mask] for b in batches]), Y[order])


def _subclasses(cls: type) -> set[type]:
    return {sub for direct in cls.__subclasses__() for sub in {direct, *_subclasses(direct)}}


def test_every_data_adapter_class_is_one_get_data_adapter_returns_here(strategy):
    """A new adapter class must get a kind in KINDS above, so the contract tests cover it."""
    concrete = {cls for cls in _subclasses(DataAdapter)
                if cls.__module__.startswith("mirrorfit.") and not inspect.isabstract(cls)}
    returned = set()
    for kind in KINDS:
        try:
            returned.add(type(_adapter(kind, strategy)))
        except pytest.skip.Exception:  # tf.data or torch is not installed here
            continue
    assert concrete == returned
