"""Input signatures of exports (mirrorfit/_src/export/signature.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mirrorfit._src.export.signature import from_input_signature


class _StringSpec:  # a spec as a tf.TensorSpec(dtype=tf.string) or Keras' InputSpec gives
    shape, dtype = (None, 1), "string"


@pytest.mark.parametrize("leaf", [jax.ShapeDtypeStruct((None, 3), np.dtype("O")),
                                  np.array([["a", "b", "c"]]), _StringSpec()])
def test_a_string_signature_names_the_host_side_text_layers(leaf):
    # Before: JAX's "dtype=object is not a valid dtype for JAX type promotion", or NumPy's
    # "data type 'string' not understood".
    with pytest.raises(ValueError, match=r"numeric or boolean dtype.*TextVectorization.*"
                                         r"Received: dtype '(object|<U1|string)'"):
        from_input_signature([leaf])


def test_numeric_signatures_keep_their_dtypes_without_the_batch():
    (x, mask), = from_input_signature([(jax.ShapeDtypeStruct((None, 3), jnp.bfloat16),
                                        np.zeros((2, 4), bool))])
    assert (x.shape, x.dtype, mask.shape, mask.dtype) == ((3,), jnp.bfloat16, (4,), np.bool_)
