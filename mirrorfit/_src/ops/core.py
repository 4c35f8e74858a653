"""Keras 3's ``keras.ops`` core names (``keras/src/ops/core.py``): conversions, shapes and
control flow, on ``jax.numpy`` and ``jax.lax``.
"""

from mirrorfit._src.ops.wrapping import keras_op

associative_scan = keras_op("associative_scan", "jax.lax.associative_scan",
                            "f, elems, reverse=False, axis=0")
cast = keras_op("cast", "jax.numpy.asarray", "x, dtype")
# A branch may assign Variables inside a compiled step (`mirrorfit._src.variables.control_flow`).
cond = keras_op("cond", "mirrorfit._src.variables.control_flow.cond", "pred, true_fn, false_fn")
convert_to_numpy = keras_op("convert_to_numpy", "numpy.asarray", "x")
convert_to_tensor = keras_op("convert_to_tensor", "jax.numpy.asarray", "x, dtype=None")
dtype = keras_op("dtype", "jax.numpy.result_type", "x")
fori_loop = keras_op("fori_loop", "jax.lax.fori_loop", "lower, upper, body_fun, init_val")
map = keras_op("map", "jax.lax.map", "f, xs")
scan = keras_op("scan", "jax.lax.scan",
                "f, init, xs=None, length=None, reverse=False, unroll=1")
shape = keras_op("shape", "jax.numpy.shape", "x")
slice = keras_op("slice", "jax.lax.dynamic_slice", "inputs, start_indices, shape")
slice_update = keras_op("slice_update", "jax.lax.dynamic_update_slice",
                        "inputs, start_indices, updates",
                        renames={"inputs": "operand", "updates": "update"})
stop_gradient = keras_op("stop_gradient", "jax.lax.stop_gradient", "variable")
switch = keras_op("switch", "jax.lax.switch", "index, branches, *operands")
unstack = keras_op("unstack", "jax.numpy.unstack", "x, num=None, axis=0", drop=("num",))
