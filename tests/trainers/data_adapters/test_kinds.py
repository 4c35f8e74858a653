"""Every input kind trains exactly like the same data given as arrays, with one compile.

Kinds: lists (torch-collate style ``[x, y]``), `mf.utils.PyDataset` (also on worker
threads), pandas, grain ``MapDataset``/``IterDataset``/``DataLoader`` and, when installed,
``tf.data`` and torch ``DataLoader``. Data: 35 rows in global batches of 10 on 3 replicas, so
every epoch ends with a partial, padded batch.
"""

import math

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.trainers import data_adapters
from tests.helpers import count_step_compiles
from tests.trainers.data_adapters.helpers import (
    BATCH,
    ROWS,
    X,
    Y,
    batches,
    make_model,
)

EPOCHS = 2


class Batches(mf.utils.PyDataset):
    def __init__(self, x, y, batch_size=BATCH, **kwargs):
        super().__init__(**kwargs)
        self.x, self.y, self.batch_size = x, y, batch_size

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __getitem__(self, index):
        part = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return self.x[part], self.y[part]


def _grain(kind):
    grain = pytest.importorskip("grain")
    pairs = [(X[i], Y[i]) for i in range(ROWS)]
    if kind == "grain_loader":
        sampler = grain.samplers.IndexSampler(ROWS, shard_options=grain.sharding.NoSharding(),
                                              shuffle=False, num_epochs=1)
        return grain.DataLoader(data_source=pairs, sampler=sampler, worker_count=0,
                                operations=[grain.transforms.Batch(BATCH)])
    dataset = grain.MapDataset.source(pairs).batch(BATCH)
    return dataset if kind == "grain_map" else dataset.to_iter_dataset()


def _tf():
    tf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed here")
    return tf.data.Dataset.from_tensor_slices((X, Y)).batch(BATCH)


def _torch():
    torch = pytest.importorskip("torch", reason="torch is not installed here")
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(Y))
    return torch.utils.data.DataLoader(dataset, batch_size=BATCH)


SOURCES = {
    "list_of_lists": lambda: [[x, y] for x, y in batches()],
    "py_dataset": lambda: Batches(X, Y),
    "py_dataset_workers": lambda: Batches(X, Y, workers=2, max_queue_size=2),
    "grain_map": lambda: _grain("grain_map"),
    "grain_iter": lambda: _grain("grain_iter"),
    "grain_loader": lambda: _grain("grain_loader"),
    "tf_data": _tf,
    "torch_loader": _torch,
}


@pytest.fixture(scope="module")
def trained():
    """The model, its initial weights, and the weights/history after fitting arrays."""
    model = make_model()
    initial = model.get_weights()
    history = model.fit(X, Y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return model, initial, model.get_weights(), history.history


@pytest.mark.parametrize("kind", list(SOURCES))
def test_source_trains_like_arrays_with_one_compile(kind, trained, allclose):
    model, initial, expected, expected_history = trained
    source = SOURCES[kind]()
    model.set_weights(initial)
    with count_step_compiles() as compiles:
        history = model.fit(source, epochs=EPOCHS, verbose=0, shuffle=False)
    allclose(model.get_weights(), expected, rtol=1e-6, atol=1e-7)
    for key, values in expected_history.items():
        np.testing.assert_allclose(history.history[key], values, rtol=1e-6)
    # Same padded shapes as the array run: its compiled step is reused, and the partial
    # last batch compiles nothing new.
    assert compiles == [0]


def test_pandas_frame_and_series_train_like_arrays(trained, allclose):
    pd = pytest.importorskip("pandas")
    model, initial, expected, _ = trained
    model.set_weights(initial)
    model.fit(pd.DataFrame(X), pd.Series(Y), batch_size=BATCH, epochs=EPOCHS, shuffle=False,
              verbose=0)
    allclose(model.get_weights(), expected, rtol=1e-6, atol=1e-7)


def test_pandas_columns_in_a_dict_are_array_inputs():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"a": np.arange(4.0), "b": np.arange(4)})
    assert data_adapters.is_array_input({"a": frame["a"], "b": frame[["b"]]})
    data = data_adapters.get_data_adapter(frame, frame["b"], batch_size=3, num_replicas=2)
    assert isinstance(data.x, np.ndarray) and data.x.shape == (4, 2)


def test_py_dataset_shuffle_reorders_batches_every_epoch_deterministically():
    source = Batches(np.arange(50.0)[:, None], np.arange(50), batch_size=5)

    def first_rows(epoch, seed):
        data = data_adapters.get_data_adapter(source, batch_size=None, num_replicas=1,
                                              shuffle=True, seed=seed)
        return [int(b.y[0]) for b in data.batches(epoch)]

    epoch0, epoch1 = first_rows(0, seed=1), first_rows(1, seed=1)
    assert sorted(epoch0) == sorted(epoch1) == list(range(0, 50, 5))  # every batch once
    assert epoch0 != epoch1 and epoch0 != sorted(epoch0)
    assert first_rows(1, seed=1) == epoch1  # deterministic in (seed, epoch)


def test_py_dataset_epoch_hooks_run_around_every_epoch():
    calls = []

    class Hooked(Batches):
        def on_epoch_begin(self):
            calls.append("begin")

        def on_epoch_end(self):
            calls.append("end")

    data = data_adapters.get_data_adapter(Hooked(X, Y), batch_size=None, num_replicas=1,
                                          shuffle=False)
    for epoch in range(2):
        assert len(list(data.batches(epoch))) == 4
    assert calls == ["begin", "end", "begin", "end"]


def test_py_dataset_rejects_multiprocessing():
    with pytest.raises(ValueError, match="use_multiprocessing=True is not supported"):
        Batches(X, Y, use_multiprocessing=True)


def test_grain_dict_elements_show_the_map_to_x_y():
    grain = pytest.importorskip("grain")
    dataset = grain.MapDataset.source([{"image": X[i], "label": Y[i]} for i in range(ROWS)])
    dataset = dataset.batch(BATCH)
    with pytest.raises(ValueError, match=r"not a dict\. Map it to \(x, y\) first.*d\['image'\]"):
        data_adapters.get_data_adapter(dataset, batch_size=None,
                                       num_replicas=1).first_inputs()
    fixed = dataset.map(lambda d: (d["image"], d["label"]))
    data = data_adapters.get_data_adapter(fixed, batch_size=None, num_replicas=1)
    assert data.steps == 4 and data.first_inputs().shape == (BATCH, 5)
