"""Keras 3's ``keras.ops`` neural-network names (``keras/src/ops/nn.py``) on ``jax.nn``."""

from mirrorfit._src.ops.wrapping import keras_op

celu = keras_op("celu", "jax.nn.celu", "x, alpha=1.0")
dot_product_attention = keras_op(
    "dot_product_attention", "jax.nn.dot_product_attention",
    "query, key, value, bias=None, mask=None, scale=None, is_causal=False")
elu = keras_op("elu", "jax.nn.elu", "x, alpha=1.0")
gelu = keras_op("gelu", "jax.nn.gelu", "x, approximate=True")
glu = keras_op("glu", "jax.nn.glu", "x, axis=-1")
hard_sigmoid = keras_op("hard_sigmoid", "jax.nn.hard_sigmoid", "x")
hard_silu = keras_op("hard_silu", "jax.nn.hard_silu", "x")
hard_swish = keras_op("hard_swish", "jax.nn.hard_swish", "x")
hard_tanh = keras_op("hard_tanh", "jax.nn.hard_tanh", "x")
leaky_relu = keras_op("leaky_relu", "jax.nn.leaky_relu", "x, negative_slope=0.2")
log_sigmoid = keras_op("log_sigmoid", "jax.nn.log_sigmoid", "x")
log_softmax = keras_op("log_softmax", "jax.nn.log_softmax", "x, axis=-1")
one_hot = keras_op("one_hot", "jax.nn.one_hot", "x, num_classes, axis=-1, dtype=None")
relu = keras_op("relu", "jax.nn.relu", "x")
relu6 = keras_op("relu6", "jax.nn.relu6", "x")
selu = keras_op("selu", "jax.nn.selu", "x")
sigmoid = keras_op("sigmoid", "jax.nn.sigmoid", "x")
silu = keras_op("silu", "jax.nn.silu", "x")
softmax = keras_op("softmax", "jax.nn.softmax", "x, axis=-1")
softplus = keras_op("softplus", "jax.nn.softplus", "x")
softsign = keras_op("softsign", "jax.nn.soft_sign", "x")
sparse_plus = keras_op("sparse_plus", "jax.nn.sparse_plus", "x")
sparse_sigmoid = keras_op("sparse_sigmoid", "jax.nn.sparse_sigmoid", "x")
squareplus = keras_op("squareplus", "jax.nn.squareplus", "x, b=4")
swish = keras_op("swish", "jax.nn.swish", "x")
