"""The metric registry: Keras' metric names and aliases, and ``get`` for ``compile(metrics=...)``.

The metrics live in `metric` (the base), `reduction_metrics`, `accuracy_metrics`,
`regression_metrics`, `confusion_metrics`, `f_score_metrics` and `iou_metrics`; `METRICS`
(a `mirrorfit._src.utils.registry.Registry`) names them. Names resolve as in Keras 3
(``keras.metrics.ALL_OBJECTS_DICT`` plus ``compile``'s handling of ``"accuracy"``/``"acc"``),
ignoring case; the metric is logged under the string as written.
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
from mirrorfit._src.utils import registry
from mirrorfit._src.utils.naming import snake_case

METRICS = registry.Registry("metric", "mirrorfit.metrics")
"""Keras' metric names -> class (Keras 3's ``keras.metrics.ALL_OBJECTS`` that mirrorfit has);
lookups ignore case."""

for _cls in (
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
):
    METRICS.register(_cls, aliases=(snake_case(_cls.__name__),))
METRICS.register(reg.BinaryCrossentropy, aliases=("bce",))
METRICS.register(reg.MeanSquaredError, aliases=("mse",))
METRICS.register(reg.MeanAbsoluteError, aliases=("mae",))
METRICS.register(reg.MeanAbsolutePercentageError, aliases=("mape",))
METRICS.register(reg.MeanSquaredLogarithmicError, aliases=("msle",))
# Keras' compile resolves these from the shapes of labels and outputs; registered last, so
# "Accuracy" in any case means this metric, as in Keras' compile.
METRICS.register(acc.InferredAccuracy, aliases=("accuracy", "acc"))

_VALUE_METRICS = (red.Mean, red.Sum)


def serialize(metric: Metric) -> dict[str, Any]:
    """``{"module", "class_name", "config", "registered_name"}``, as
    ``keras.metrics.serialize``.

    Raises:
        TypeError: if ``metric`` is not a `Metric` object.
    """
    if not isinstance(metric, Metric):
        raise TypeError("serialize takes a mf.metrics.Metric object (e.g. "
                        f"mf.metrics.AUC(curve='PR')). Received: metric={metric!r}")
    return registry.serialize(metric)


def deserialize(config: dict[str, Any], custom_objects: dict[str, Any] | None = None) -> Metric:
    """The metric that `serialize` described; your classes come from
    ``@mf.saving.register_serializable`` or ``custom_objects`` (``{class name: class}``).

    Raises:
        ValueError: for an unknown class or a malformed dict.
    """
    return METRICS.deserialize(config, custom_objects)


def get(identifier: str | Metric | MetricFn | dict[str, Any]) -> Metric:
    """Returns the ``Metric`` for one entry of ``Model.compile(metrics=[...])``.

    Args:
        identifier: a ``Metric`` (returned as is), a Keras metric name (case-insensitive;
            the metric is named with the string as written, so ``"acc"`` logs as ``acc``)
            or the registered name of your metric (``mf.saving.register_serializable``),
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
            isinstance(identifier, str) and METRICS.get(identifier) in _VALUE_METRICS):
        raise ValueError(
            "Mean and Sum average or add values, not (y_true, y_pred): use them in custom "
            "loops (metric.update_state(values)), and in compile a metric of labels and "
            f"outputs, e.g. 'mae'. Received: metrics={identifier!r}")
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        cls = METRICS.get(identifier)
        if cls is not None and not isinstance(cls, type):  # a registered function
            return get(cls)
        if cls is None:
            raise ValueError(
                f"Unknown metric name. Expected one of {METRICS.names()} (any case), a name "
                "registered with mf.saving.register_serializable, a mf.metrics.Metric or a "
                f"callable fn(y_true, y_pred) -> [batch]. Received: metrics={identifier!r}")
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
