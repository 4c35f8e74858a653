"""One Keras 3 (JAX backend) case of ``gpu.py``, run in its own process (never in mirrorfit's).

``gpu.py`` starts it with the interpreter that can import Keras (its own, or the venv of
``venvs.offline_keras_python``) and ``KERAS_BACKEND=jax``. It imports only Keras, NumPy,
``peers`` and ``synthetic``, and trains what the mirrorfit cases train: the same
architecture (``peers.keras_resnet18`` or ``peers.keras_decoder_lm``) on the same seeded
data, under ``keras.mixed_precision.set_global_policy("mixed_bfloat16")`` (the language model's attention
with ``flash_attention=True``, i.e. cuDNN, when the device is a GPU), with
``optimizer="adam"`` (Keras defaults) and sparse categorical crossentropy from logits, at the
same global batch and the spec's ``steps_per_execution`` (default 1). The ResNet adds the accuracy metric, as mirrorfit's ``fit`` case.

It warms up with one ``fit`` over ``warm_rows`` rows (compilation, ending in a partial
batch), times one epoch over ``rows`` rows to pick the epochs per repeat (about
``target_seconds``), then times ``rounds`` fits of that many epochs and writes
``{"status": "ok", "first_call_s", "examples_per_s": [...], "peak_memory_bytes"}`` to
``--result``. A crash leaves
no result file: the parent reports the last lines of stderr.

Usage: ``python keras_gpu.py --spec JSON --result PATH``.
"""

import argparse
import json
import time

import numpy as np

import peers
from synthetic import make_data, make_tokens


def build(keras, spec: dict):
    """The compiled Keras model and its data ``(x, y)`` for ``spec`` (see the module doc)."""
    arch = spec["arch"]
    if spec["model"] == "resnet18":
        model = peers.keras_resnet18(keras, arch["width"], tuple(arch["stage_blocks"]))
        x, y = make_data((32, 32, 3), spec["n"])
        metrics = ["accuracy"]
    else:
        model = peers.keras_decoder_lm(keras, arch["vocab"], arch["seq"], arch["layers"],
                                       arch["d_model"], arch["heads"], spec["flash_attention"])
        x, y = make_tokens(spec["n"], arch["seq"], arch["vocab"])
        metrics = []
    model.compile(optimizer="adam", metrics=metrics,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  steps_per_execution=spec.get("steps_per_execution", 1))
    return model, x, y


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--spec", required=True,
                   help="JSON: model, arch, n, batch, warm_rows, rows, target_seconds, rounds")
    p.add_argument("--result", required=True, help="path of the JSON result")
    args = p.parse_args(argv)
    spec = json.loads(args.spec)
    import jax
    import keras

    spec["flash_attention"] = jax.devices()[0].platform == "gpu"
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model, x, y = build(keras, spec)
    batch, rows, warm = spec["batch"], spec["rows"], spec["warm_rows"]
    start = time.perf_counter()
    model.fit(x[:warm], y[:warm], batch_size=batch, epochs=1, verbose=1)
    first_call_s = time.perf_counter() - start
    start = time.perf_counter()
    model.fit(x[:rows], y[:rows], batch_size=batch, epochs=1, verbose=1)
    epochs = max(1, round(spec["target_seconds"] / (time.perf_counter() - start)))
    rates = []
    for _ in range(spec["rounds"]):
        start = time.perf_counter()
        model.fit(x[:rows], y[:rows], batch_size=batch, epochs=epochs, verbose=1)
        rates.append(epochs * rows / (time.perf_counter() - start))
    result = {"status": "ok", "first_call_s": first_call_s, "examples_per_s": rates,
              "rows_per_repeat": rows, "epochs_per_repeat": epochs,
              "keras": keras.__version__, "backend": keras.backend.backend(),
              "compute_dtype": model.dtype_policy.compute_dtype,
              "params": int(sum(np.prod(w.shape) for w in model.weights if w.trainable)),
              "peak_memory_bytes": (jax.devices()[0].memory_stats() or {}).get(
                  "peak_bytes_in_use")}
    with open(args.result, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
