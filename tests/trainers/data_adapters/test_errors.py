"""Arguments that do not apply to the chosen input kind are errors naming them and why."""

import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit._src.trainers import data_adapters
from tests.trainers.data_adapters.helpers import BATCH, X, Y, batches


class OneBatch(mf.utils.PyDataset):
    def __len__(self):
        return 1

    def __getitem__(self, index):
        return X[:BATCH], Y[:BATCH]


def _adapter(x, **kwargs):
    kwargs.setdefault("batch_size", None)
    return data_adapters.get_data_adapter(x, num_replicas=2, **kwargs)


@pytest.mark.parametrize("name, value, why", [
    ("y", Y, "already yields the targets"),
    ("sample_weight", np.ones(35), r"yield \(x, y, sample_weight\) instead"),
    ("batch_size", 16, "whose size is the global batch"),
    ("shuffle", True, "shuffle it at the source"),
    ("class_weight", {0: 2.0}, "only arrays, PyDataset and tf.data"),
])
def test_argument_that_does_not_apply_to_a_generator_is_named(name, value, why):
    with pytest.raises(ValueError, match=rf"^{name} does not apply when x is a generator: "
                                         rf".*{why}.*Received: {name}="):
        _adapter(batches(), **{name: value})


def test_py_dataset_takes_shuffle_and_class_weight_but_not_y():
    data = _adapter(OneBatch(), shuffle=True, class_weight={0: 2.0})
    (batch,) = list(data.batches(0))
    np.testing.assert_array_equal(batch.sample_weight, np.where(Y[:BATCH] == 0, 2.0, 1.0))
    with pytest.raises(ValueError, match="y does not apply when x is a PyDataset"):
        _adapter(OneBatch(), y=Y)


def test_shuffle_false_with_a_generator_is_allowed():
    assert _adapter(batches(), shuffle=False).steps is None


def test_validation_batch_size_with_a_validation_source_is_named():
    train = _adapter(X, y=Y, batch_size=BATCH)
    with pytest.raises(ValueError, match="validation_batch_size does not apply"):
        data_adapters.train_and_validation(train, validation_split=0.0,
                                           validation_data=batches(), batch_size=BATCH,
                                           num_replicas=2, validation_batch_size=8)


def test_validation_steps_must_be_positive():
    train = _adapter(X, y=Y, batch_size=BATCH)
    with pytest.raises(ValueError, match="Received: validation_steps=0"):
        data_adapters.train_and_validation(train, validation_split=0.0,
                                           validation_data=(X, Y), batch_size=BATCH,
                                           num_replicas=2, validation_steps=0)


def test_dict_elements_get_the_one_line_map_hint_but_predict_takes_them_as_x():
    dicts = [{"image": X[:BATCH], "label": Y[:BATCH]}]
    with pytest.raises(ValueError, match=r"Map it to \(x, y\) first, e.g. dataset.map"):
        _adapter(iter(dicts)).first_inputs()
    inputs = _adapter(iter(dicts), with_targets=False).first_inputs()
    assert set(inputs) == {"image", "label"}


def test_malformed_batch_names_the_kind_and_the_expected_form():
    with pytest.raises(ValueError, match=r"iterable of batches must be a tuple or list "
                                         r"\(x, y\).*with 4 items"):
        _adapter([(X, Y, Y, Y)]).first_inputs()


def test_infinite_py_dataset_needs_steps():
    class Endless(mf.utils.PyDataset):
        def __getitem__(self, index):
            return X[:BATCH], Y[:BATCH]

    with pytest.raises(ValueError, match="infinite PyDataset.*steps_per_epoch"):
        _adapter(Endless())
    assert _adapter(Endless(), steps=3).steps == 3


def test_not_iterable_x_is_a_type_error():
    with pytest.raises(TypeError, match="Received: x of type int"):
        _adapter(3)


def test_a_batch_sample_weight_of_the_wrong_length_is_named(model_and_initial):
    # Before: "operands could not be broadcast together with shapes (10,) (16,)".
    model, _ = model_and_initial

    def weighted():
        yield X[:16], Y[:16], np.ones(10, np.float32)

    with pytest.raises(ValueError, match=r"sample_weight must have one weight per row of the "
                                         r"batch's x and y \(16 rows\).*shape \(10,\)"):
        model.fit(weighted(), verbose=0)


def test_a_wrong_sample_weight_in_validation_data_names_validation_data(model_and_initial):
    # Before: "x and sample_weight must have the same number of rows ..." without naming
    # validation_data.
    model, _ = model_and_initial
    with pytest.raises(ValueError, match=r"^In validation_data .*x with 35 rows and "
                                         r"sample_weight with 10 rows"):
        model.fit(X, Y, batch_size=BATCH, verbose=0,
                  validation_data=(X, Y, np.ones(10, np.float32)))
