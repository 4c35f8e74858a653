"""A model's metrics as Keras 3's ``Trainer`` lists them: `ModelMetrics`.

A Keras-form ``train_step(self, data)`` updates metric objects: the loss tracker ``compile``
creates, the compiled metrics, and the `Metric` s the model holds as attributes (a VAE's
``total_loss_tracker``). `ModelMetrics.metrics` lists them in Keras 3's order; ``fit`` and
``evaluate`` reset them when they start (`ModelMetrics.reset_metrics`) and carry their
variables through the compiled steps (`mirrorfit._src.trainers.keras_steps`), apart from the
model's weights.
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.metrics.metric import Metric
from mirrorfit._src.trainers import keras_steps


class ModelMetrics:
    """``metrics``, ``reset_metrics``, ``compute_metrics``, ...; mixed into `mirrorfit.Model`."""

    # Keras' loss tracker (a Mean named "loss"), created by compile; ``_mf``: not one of the
    # attributes whose variables are the model's.
    _mf_loss_tracker: Metric | None = None
    _trainer: Any  # owned by Model: its config's compiled metrics

    @property
    def metrics(self) -> list[Metric]:
        """The metrics a Keras-form step updates, as ``keras.Model.metrics``: once compiled,
        the loss tracker (a `mirrorfit.metrics.Mean` named ``"loss"``) and the compiled
        metrics; then the `Metric` s held in the model's attributes. ``fit`` resets them
        at each epoch's start, ``evaluate`` at its start (`reset_metrics`)."""
        found: list[Metric] = []
        config = self._trainer.config
        if config is not None:
            if self._mf_loss_tracker is not None:
                found.append(self._mf_loss_tracker)
            found += [m for m in (*config.metrics, *config.weighted_metrics)
                      if isinstance(m, Metric)]
        found += [m for m in keras_steps.attribute_metrics(self)
                  if all(m is not f for f in found)]
        return found

    @property
    def metrics_names(self) -> list[str]:
        """The names of `metrics`, in order."""
        return [m.name for m in self.metrics]

    @property
    def metrics_variables(self) -> list[Any]:
        """The variables of `metrics`, in order (not the model's weights)."""
        return [v for m in self.metrics for v in getattr(m, "variables", [])]

    def reset_metrics(self) -> None:
        """Resets every metric of `metrics` (``reset_state``)."""
        for metric in self.metrics:
            metric.reset_state()

    def compute_metrics(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None
                        ) -> dict[str, Any]:
        """Updates the compiled metrics (``weighted_metrics`` with ``sample_weight``) and
        returns `get_metrics_result`, as Keras 3's ``compute_metrics``."""
        del x
        config = self._trainer.config
        if config is not None:
            for metric in config.metrics:
                if isinstance(metric, Metric):
                    metric.update_state(y, y_pred)
            for metric in config.weighted_metrics:
                if isinstance(metric, Metric):
                    metric.update_state(y, y_pred, sample_weight)
        return self.get_metrics_result()

    def get_metrics_result(self) -> dict[str, Any]:
        """``{name: result()}`` of `metrics`; a result that is a dict is merged in."""
        found: dict[str, Any] = {}
        for metric in self.metrics:
            result = metric.result()
            if isinstance(result, dict):
                found.update(result)
            else:
                found[metric.name] = result
        return found
