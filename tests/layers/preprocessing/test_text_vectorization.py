"""TextVectorization against hand-computed vocabularies, and first in a Sequential model."""

import numpy as np
import pytest

import mirrorfit as mf
from tests.helpers import mirrored_strategy

TEXTS = ["The cat sat.", "The cat ran!", "A dog"]


def test_adapt_standardizes_splits_and_pads_with_index_0():
    vectorize = mf.layers.TextVectorization(output_sequence_length=4)
    vectorize.adapt(TEXTS)
    # counts the:2, cat:2 (the > cat), then sat, ran, dog, a (descending)
    assert vectorize.get_vocabulary() == ["", "[UNK]", "the", "cat", "sat", "ran", "dog", "a"]
    assert vectorize(["the CAT, flew", "a dog sat on the cat"]).tolist() == [
        [2, 3, 1, 0], [7, 6, 4, 1]]
    assert vectorize(np.array([["A dog"]])).tolist() == [[7, 6, 0, 0]]  # [batch, 1]
    ragged = mf.layers.TextVectorization(vocabulary=["a", "b"])
    assert ragged(["a b a", "b"]).tolist() == [[2, 3, 2], [3, 0, 0]]  # the longest row


def test_standardize_and_split_options():
    lower = mf.layers.TextVectorization(standardize="lower", vocabulary=["cat.", "école"])
    assert lower(["Cat. cat École"]).tolist() == [[2, 1, 1]]  # ASCII only, as tf.strings.lower
    strip = mf.layers.TextVectorization(standardize="strip_punctuation", vocabulary=["Cat"])
    assert strip(["Cat! cat"]).tolist() == [[2, 1]]
    chars = mf.layers.TextVectorization(split="character", standardize=None,
                                        vocabulary=["a", "b"])
    assert chars(["abz"]).tolist() == [[2, 3, 1]]
    whole = mf.layers.TextVectorization(split=None, vocabulary=["new york", "paris"])
    assert whole(["New York!", "Paris", "Rome"]).tolist() == [2, 3, 1]
    custom = mf.layers.TextVectorization(standardize=lambda s: np.char.upper(s),
                                         split=lambda s: s.split("-"), vocabulary=["A", "B"])
    assert custom(["a-b-c"]).tolist() == [[2, 3, 1]]


def test_ngrams_max_tokens_and_tf_idf():
    vectorize = mf.layers.TextVectorization(max_tokens=6, ngrams=2, output_mode="tf_idf")
    vectorize.adapt(TEXTS)
    # 1-grams then 2-grams; counts 2: "the cat" > "the" > "cat"; then the 1-counts descending
    assert vectorize.get_vocabulary() == ["[UNK]", "the cat", "the", "cat", "sat", "ran"]
    idf = np.log(1 + 3 / (1 + np.array([2, 2, 2, 1, 1])))  # 3 documents
    expected = np.concatenate([[idf.mean() * 3], [0, 0, 0, 0, 0]])  # "dog dog" -> 3 OOV
    np.testing.assert_allclose(vectorize(["dog dog"])[0], expected, rtol=1e-6)
    np.testing.assert_allclose(vectorize(["the cat"])[0], [0, *idf[:3], 0, 0], rtol=1e-6)


def test_multi_hot_and_count_encode_each_string():
    counts = mf.layers.TextVectorization(output_mode="count", vocabulary=["a", "b"])
    np.testing.assert_array_equal(counts(["a a c", "b"]), [[1, 2, 0], [0, 0, 1]])
    multi = mf.layers.TextVectorization(output_mode="multi_hot", vocabulary=["a", "b"],
                                        max_tokens=5, pad_to_max_tokens=True)
    np.testing.assert_array_equal(multi(["a a"]), [[0, 1, 0, 0, 0]])


def test_adapt_on_a_generator_of_batches_learns_the_same_vocabulary():
    vectorize = mf.layers.TextVectorization()
    vectorize.adapt(iter([TEXTS[:2], TEXTS[2:]]))
    assert vectorize.get_vocabulary()[2:4] == ["the", "cat"] and len(
        vectorize.get_vocabulary()) == 8


def test_a_sequential_starting_with_text_vectorization_fits_and_predicts_on_strings():
    vectorize = mf.layers.TextVectorization(output_sequence_length=5)
    texts = np.array(["good movie", "bad movie", "good good fun", "bad awful"] * 4)
    labels = np.array([1, 0, 1, 0] * 4, np.int32)
    vectorize.adapt(texts)
    with mirrored_strategy(8).scope():
        model = mf.Sequential([vectorize, mf.layers.Embedding(8, 4),
                               mf.layers.GlobalAveragePooling1D(), mf.layers.Dense(2)],
                              seed=0)
        model.compile(mf.optimizers.Adam(0.05),
                      mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(texts, labels, batch_size=8, epochs=3, verbose=0,
                        validation_data=(texts[:8], labels[:8]))
    assert history.history["loss"][-1] < history.history["loss"][0]
    np.testing.assert_allclose(model.predict(texts[:8], batch_size=8, verbose=0),
                               model(vectorize(texts[:8])), rtol=1e-5, atol=1e-6)
    batches = ((texts[i:i + 8], labels[i:i + 8]) for i in range(0, 16, 8))
    assert np.isfinite(model.evaluate(batches, verbose=0))


def test_host_layers_raise_in_a_functional_graph_or_after_a_device_layer():
    vectorize = mf.layers.TextVectorization(vocabulary=["a"])
    with pytest.raises(TypeError, match="input pipeline"):
        vectorize(mf.layers.Input((1,)))
    with pytest.raises(ValueError, match="Move it first"):
        mf.Sequential([mf.layers.Dense(2), vectorize])


@pytest.mark.parametrize("numbers", [np.array([[3, 1, 4]]), [1, 2], np.array([0.5])])
def test_numbers_are_refused_instead_of_becoming_unknown_digit_strings(numbers):
    # Before: 3, 1 and 4 became "3", "1", "4", all "[UNK]" (index 1), and adapt built a
    # vocabulary of digit strings, without a word.
    layer = mf.layers.TextVectorization()
    layer.adapt(["the cat", "the dog"])
    with pytest.raises(TypeError, match=r"takes strings.*pass them to an Embedding.*"
                                        r"Received: inputs of dtype (int|float)64"):
        layer(numbers)
    with pytest.raises(TypeError, match="takes strings"):
        mf.layers.TextVectorization().adapt(numbers)
    assert layer(np.array(["the dog"])).tolist() == [[2, 3]]  # strings still work
