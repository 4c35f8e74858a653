"""The ``mirrorfit`` case: fit/evaluate/predict with the defaults a user gets.

``MirrorfitRunner.run(x, y, repeats)`` blocks until the work is done and returns the number of
examples processed, like the hand-written runners. The peers (Keras 3, tf.keras) are in
``peers.py``, which runs in their own virtualenvs.
"""

import jax
import numpy as np

from workloads import Workload


class MirrorfitRunner:
    """``mirrorfit`` with the defaults a user gets: progress bar (``verbose=1``) and accuracy.

    Used by ``run.py`` (probabilities, simulated CPU devices) and ``gpu.py`` (logits).

    Args:
        workload: the model to run.
        num_devices: replicas of the ``MirroredStrategy``.
        batch_size: global batch size.
        mode: ``"fit"``, ``"evaluate"`` or ``"predict"``.
        steps_per_execution: train steps fused per device call.
        from_logits: whether the model outputs logits (else probabilities).
        verbose: the ``verbose`` argument of every call (1: progress bar).
        dtype_policy: the model's ``dtype_policy`` (e.g. ``"mixed_bfloat16"``).
        metrics: the compiled metrics (``[]`` for the language model: loss only).
        device_resident: ``fit``'s ``device_resident`` (``None``: not passed, the default a
            user gets; ``False``: every batch sent from the host; ``True``: resident).
    """

    def __init__(self, workload: Workload, num_devices: int, batch_size: int, mode: str,
                 steps_per_execution: int = 1, from_logits: bool = False, verbose: int = 1,
                 dtype_policy: str = "float32", metrics: tuple = ("accuracy",),
                 device_resident: bool | None = None):
        import mirrorfit as mf

        self.batch_size = batch_size
        self.mode = mode
        self.verbose = verbose
        self.device_resident = device_resident
        strategy = mf.MirroredStrategy(devices=jax.devices()[:num_devices])
        with strategy.scope():
            self.model = mf.Model(workload.module, input_shape=workload.input_shape,
                                  input_dtype=workload.input_dtype, dtype_policy=dtype_policy)
            self.model.compile(
                optimizer="adam", metrics=list(metrics), steps_per_execution=steps_per_execution,
                loss=mf.losses.SparseCategoricalCrossentropy(from_logits=from_logits))

    def run(self, x: np.ndarray, y: np.ndarray, repeats: int) -> int:
        """Fits ``repeats`` epochs, or evaluates/predicts ``repeats`` times, over ``x`` ``[n, ...]``."""
        if self.mode == "fit":
            # device_resident only when set: commits before it existed run too (ab_commits.py).
            placement = ({} if self.device_resident is None
                         else {"device_resident": self.device_resident})
            self.model.fit(x, y, batch_size=self.batch_size, epochs=repeats, verbose=self.verbose,
                           **placement)
        else:
            for _ in range(repeats):
                if self.mode == "evaluate":
                    self.model.evaluate(x, y, batch_size=self.batch_size, verbose=self.verbose)
                else:
                    self.model.predict(x, batch_size=self.batch_size, verbose=self.verbose)
        jax.block_until_ready(self.model.params)
        return repeats * len(x)

