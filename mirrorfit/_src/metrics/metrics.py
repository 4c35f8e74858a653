"""The metric registry: Keras' metric names and aliases, and ``get`` for ``compile(metrics=...)``.

The metrics live in `metric` (the base), `reduction_metrics`, `accuracy_metrics`,
`regression_metrics`, `confusion_metrics`, `f_score_metrics` and `iou_metrics`. Names
resolve as in Keras 3 (``keras.metrics.ALL_OBJECTS_DICT`` plus ``compile``'s handling of
``"accuracy"``/``"acc"``), ignoring case; the metric is logged under the string as written.
"""

from __future__ import annotations

from typing import Any

from mirrorfit._src.metrics import accuracy_metrics as acc
from mirrorfit._src.metrics import confusion_metrics as cm
from mirrorfit._src.metrics import f_score_metrics as fs
from mirrorfit._src.metrics import iou_metrics as iou
from mirrorfit._src.metrics import reduction_metrics as red
from mirrorfit._src.metrics import regression_metrics as reg
from mirrorfit._src.metrics.metric import Metric, MetricFn
from mirrorfit._src.utils.naming import snake_case

METRIC_CLASSES: tuple[type[Metric], ...] = (
    red.Mean, red.Sum, red.MeanMetricWrapper,
    reg.MeanSquaredError, reg.RootMeanSquaredError, reg.MeanAbsoluteError,
    reg.MeanAbsolutePercentageError, reg.MeanSquaredLogarithmicError, reg.CosineSimilarity,
    reg.LogCoshError,
    cm.AUC, cm.FalseNegatives, cm.FalsePositives, cm.Precision, cm.Recall, cm.TrueNegatives,
    cm.TruePositives,
    reg.Hinge, reg.SquaredHinge, reg.CategoricalHinge,
    reg.KLDivergence, reg.Poisson, reg.BinaryCrossentropy, reg.CategoricalCrossentropy,
    reg.SparseCategoricalCrossentropy,
    acc.Accuracy, acc.BinaryAccuracy, acc.CategoricalAccuracy, acc.SparseCategoricalAccuracy,
    acc.TopKCategoricalAccuracy, acc.SparseTopKCategoricalAccuracy,
    fs.F1Score, fs.FBetaScore,
    iou.IoU, iou.MeanIoU, iou.OneHotIoU, iou.OneHotMeanIoU,
)
"""Every built-in metric class (Keras 3's ``keras.metrics.ALL_OBJECTS`` that mirrorfit has)."""

ALIASES: dict[str, type[Metric]] = {
    **{cls.__name__: cls for cls in METRIC_CLASSES},
    **{snake_case(cls.__name__): cls for cls in METRIC_CLASSES},
    "bce": reg.BinaryCrossentropy, "mse": reg.MeanSquaredError, "mae": reg.MeanAbsoluteError,
    "mape": reg.MeanAbsolutePercentageError, "msle": reg.MeanSquaredLogarithmicError,
    # Keras' compile resolves these from the shapes of labels and outputs.
    "accuracy": acc.InferredAccuracy, "acc": acc.InferredAccuracy,
}
"""Keras' metric names -> class; ``get`` ignores case."""

_BY_LOWER_NAME = {name.lower(): cls for name, cls in ALIASES.items()}
_VALUE_METRICS = (red.Mean, red.Sum)


def serialize(metric: Metric) -> dict[str, Any]:
    """``{"class_name": ..., "config": metric.get_config()}``, as ``keras.metrics.serialize``.

    Raises:
        TypeError: if ``metric`` is not a built-in metric object.
    """
    if type(metric) not in METRIC_CLASSES and type(metric) is not acc.InferredAccuracy:
        raise TypeError("serialize takes a built-in mf.metrics object (e.g. "
                        f"mf.metrics.AUC(curve='PR')). Received: metric={metric!r}")
    return {"class_name": type(metric).__name__, "config": metric.get_config()}


def deserialize(config: dict[str, Any]) -> Metric:
    """The metric that `serialize` described.

    Raises:
        ValueError: for an unknown ``class_name`` or a malformed dict.
    """
    classes = {c.__name__: c for c in (*METRIC_CLASSES, acc.InferredAccuracy)}
    cls = classes.get(config.get("class_name", "")) if isinstance(config, dict) else None
    if cls is None:
        raise ValueError("A metric config must be {'class_name': <a mf.metrics class name>, "
                         f"'config': {{...}}}}. Received: metrics={config!r}")
    return cls.from_config(config.get("config", {}))


def get(identifier: str | Metric | MetricFn | dict[str, Any]) -> Metric:
    """Returns the ``Metric`` for one entry of ``Model.compile(metrics=[...])``.

    Args:
        identifier: a ``Metric`` (returned as is), a Keras metric name (case-insensitive;
            the metric is named with the string as written, so ``"acc"`` logs as ``acc``),
            a `serialize` dict, or a callable ``fn(y_true, y_pred) -> [batch]`` (wrapped in
            ``MeanMetricWrapper`` and named ``fn.__name__``).

    Returns:
        A ``Metric``.

    Raises:
        ValueError: for an unknown name, a name of a metric that needs arguments (e.g.
            ``MeanIoU``), or ``Mean``/``Sum``, which take values rather than
            ``(y_true, y_pred)``.
        TypeError: for anything that is neither a Metric, a string, a dict nor a callable.

    Example:
        >>> get("acc")
        InferredAccuracy(name='acc')
    """
    if isinstance(identifier, dict):
        identifier = deserialize(identifier)
    if isinstance(identifier, _VALUE_METRICS) or identifier in _VALUE_METRICS or (
            isinstance(identifier, str)
            and _BY_LOWER_NAME.get(identifier.lower()) in _VALUE_METRICS):
        raise ValueError(
            "Mean and Sum average or add values, not (y_true, y_pred): use them in custom "
            "loops (metric.update_state(values)), and in compile a metric of labels and "
            f"outputs, e.g. 'mae'. Received: metrics={identifier!r}")
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        cls = _BY_LOWER_NAME.get(identifier.lower())
        if cls is None:
            raise ValueError(
                f"Unknown metric name. Expected one of {sorted(ALIASES)} (any case), a "
                "mf.metrics.Metric or a callable fn(y_true, y_pred) -> [batch]. "
                f"Received: metrics={identifier!r}")
        try:
            return cls(name=identifier)
        except TypeError:
            raise ValueError(
                f"The metric {cls.__name__} needs arguments: pass an object, e.g. "
                f"metrics=[mf.metrics.{cls.__name__}(...)]. Received: metrics={identifier!r}"
            ) from None
    if isinstance(identifier, type) and issubclass(identifier, Metric):
        return identifier()
    if callable(identifier):
        name = getattr(identifier, "__name__", None) or getattr(identifier, "name", None)
        return red.MeanMetricWrapper(identifier, name=name or type(identifier).__name__)
    raise TypeError(
        "Each metric must be a metric name (e.g. 'accuracy'), a mf.metrics.Metric "
        "or a callable fn(y_true, y_pred) -> [batch]. "
        f"Received: metrics={identifier!r} of type {type(identifier).__name__}")
