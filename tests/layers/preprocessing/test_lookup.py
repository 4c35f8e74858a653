"""StringLookup and IntegerLookup against hand-computed vocabularies and indices."""

import numpy as np
import pytest

import mirrorfit as mf


def test_string_lookup_adapt_orders_by_count_then_token_descending_and_caps_max_tokens():
    lookup = mf.layers.StringLookup(max_tokens=4)
    lookup.adapt(np.array(["b", "a", "c", "a", "b", "d", "e", "e", "e"]))
    # counts e:3, b:2, a:2 (b > a), then c and d (1 each) cut by max_tokens=4 with "[UNK]"
    assert lookup.get_vocabulary() == ["[UNK]", "e", "b", "a"]
    assert lookup(np.array([["a", "z"], ["e", "b"]])).tolist() == [[3, 0], [1, 2]]
    assert lookup(["a"]).dtype == np.int32


def test_mask_token_takes_index_0_in_int_mode_and_is_dropped_when_encoding():
    lookup = mf.layers.StringLookup(vocabulary=["a", "b", "c"], mask_token="")
    assert lookup.get_vocabulary() == ["", "[UNK]", "a", "b", "c"]
    assert lookup([["a", "c", ""], ["z", "b", ""]]).tolist() == [[2, 4, 0], [1, 3, 0]]
    counts = mf.layers.StringLookup(vocabulary=["a", "b", "c"], mask_token="",
                                    output_mode="count")
    assert counts.get_vocabulary() == ["[UNK]", "a", "b", "c"]
    np.testing.assert_array_equal(counts([["a", "c", "a", ""], ["z", "b", "", ""]]),
                                  [[0, 2, 0, 1], [1, 0, 1, 0]])


def test_multi_hot_one_hot_and_tf_idf_encodings():
    vocab = ["a", "b"]
    multi = mf.layers.StringLookup(vocabulary=vocab, output_mode="multi_hot")
    np.testing.assert_array_equal(multi(["a", "b", "a"]), [0, 1, 1])  # one sample [n]
    one = mf.layers.StringLookup(vocabulary=vocab, output_mode="one_hot")
    np.testing.assert_array_equal(one(["b", "z"]), [[0, 0, 1], [1, 0, 0]])
    tfidf = mf.layers.StringLookup(vocabulary=vocab, output_mode="tf_idf",
                                   idf_weights=[0.5, 2.0])
    # OOV's weight is the mean of the given ones, as Keras pads them
    np.testing.assert_allclose(tfidf([["a", "a", "b", "z"]]), [[1.25, 1.0, 2.0]])


def test_invert_maps_indices_back_to_tokens():
    lookup = mf.layers.StringLookup(vocabulary=["a", "bb"], invert=True, mask_token="[M]")
    assert lookup([0, 1, 2, 3, 9]).tolist() == ["[M]", "[UNK]", "a", "bb", "[UNK]"]
    ints = mf.layers.IntegerLookup(vocabulary=[5, 3], invert=True)
    assert ints([0, 1, 2, 7]).tolist() == [-1, 5, 3, -1]


def test_integer_lookup_adapt_mask_and_floormod_oov_indices():
    lookup = mf.layers.IntegerLookup()
    lookup.adapt(np.array([5, 5, 3, 3, 7, 9, 9, 9]))
    assert lookup.get_vocabulary() == [-1, 9, 5, 3, 7]
    several = mf.layers.IntegerLookup(mask_token=0, num_oov_indices=2, vocabulary=[5, 3])
    assert several.get_vocabulary() == [0, -1, -1, 5, 3]
    assert several([0, 5, 3, 4, 7]).tolist() == [0, 3, 4, 1, 2]  # 4 % 2 -> 1, 7 % 2 -> 2


def test_vocabulary_with_special_tokens_first_is_accepted_and_config_round_trips():
    lookup = mf.layers.StringLookup(vocabulary=["[UNK]", "x", "y"])
    assert lookup.get_vocabulary() == ["[UNK]", "x", "y"]
    again = mf.layers.StringLookup.from_config(lookup.get_config())
    assert again(["y", "q"]).tolist() == [2, 0]


@pytest.mark.parametrize("make, match", [
    (lambda: mf.layers.StringLookup(vocabulary=["a", "a"]), "repeated"),
    (lambda: mf.layers.StringLookup(max_tokens=2, vocabulary=["a", "b"]), "max_tokens"),
    (lambda: mf.layers.StringLookup(output_mode="hashed"), "output_mode"),
    (lambda: mf.layers.StringLookup(num_oov_indices=2), "farmhash"),
    (lambda: mf.layers.IntegerLookup(max_tokens=1), "max_tokens")])
def test_bad_arguments_raise_naming_them(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_oov_without_oov_indices_and_adapt_after_vocabulary_raise():
    with pytest.raises(ValueError, match="num_oov_indices=1"):
        mf.layers.StringLookup(vocabulary=["a"], num_oov_indices=0)(["b"])
    with pytest.raises(ValueError, match="after setting a vocabulary"):
        mf.layers.StringLookup(vocabulary=["a"]).adapt(["a"])
