"""The metric registry: Keras' metric names and aliases, and ``get`` for ``compile(metrics=...)``.

The metrics live in `metric` (the base), `reduction_metrics`, `accuracy_metrics`,
`regression_metrics`, `confusion_metrics`, `f_score_metrics` and `iou_metrics`; `METRICS`
(a `mirrorfit._src.utils.registry.Registry`) names them. Names resolve as in Keras 3
(``keras.metrics.ALL_OBJECTS_DICT`` plus ``compile``'s handling of ``"accuracy"``/``"acc"``),
ignoring case; the metric is logged under the string as written.
"""

from __future__ import annotations

import inspect
from typing import Any, cast

from mirrorfit._src.metrics import accuracy_metrics as acc
from mirrorfit._src.metrics import confusion_metrics as cm
from mirrorfit._src.metrics import f_score_metrics as fs
from mirrorfit._src.metrics import iou_metrics as iou
from mirrorfit._src.metrics import reduction_metrics as red
from mirrorfit._src.metrics import regression_metrics as reg
from mirrorfit._src.metrics.metric import Metric, MetricFn
from mirrorfit._src.utils import registry
from mirrorfit._src.utils.naming import snake_case

_VALUE_METRICS = (red.Mean, red.Sum)


class MetricRegistry(registry.Registry):
    """The metric registry, whose `get` gives a `Metric` for one entry of
    ``compile(metrics=[...])``."""

    def convert(self, value: Any, name: str | None) -> Metric:
        """A `Metric` as is; a `Metric` class (or a class found by a name) built with its
        defaults, named as written when found by a name (``"acc"`` logs as ``acc``); another
        callable ``fn(y_true, y_pred) -> [batch]`` wrapped in ``MeanMetricWrapper`` and named
        ``fn.__name__``. ``Mean`` and ``Sum``, which take values rather than
        ``(y_true, y_pred)``, raise a ValueError."""
        if isinstance(value, _VALUE_METRICS) or (
                inspect.isclass(value) and value in _VALUE_METRICS):
            raise ValueError(
                "Mean and Sum average or add values, not (y_true, y_pred): use them in custom "
                "loops (metric.update_state(values)), and in compile a metric of labels and "
                f"outputs, e.g. 'mae'. Received: metrics={name or value!r}")
        if isinstance(value, Metric):
            return value
        if inspect.isclass(value) and (name is not None or issubclass(value, Metric)):
            return self.build(value, name, **({"name": name} if name else {}))
        if callable(value):
            shown = getattr(value, "__name__", None) or getattr(value, "name", None)
            return red.MeanMetricWrapper(cast(MetricFn, value),
                                         name=shown or type(value).__name__)
        self.refuse(value)


METRICS = MetricRegistry("metric", "mirrorfit.metrics", argument="metrics", base=(Metric,),
                         expected="a mf.metrics.Metric or a callable fn(y_true, y_pred) -> "
                                  "[batch]")
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


serialize = METRICS.serialize
"""A metric's config, ``{"module", "class_name", "config", "registered_name"}``, as
``keras.metrics.serialize``; anything else raises a TypeError."""

deserialize = METRICS.deserialize
"""The metric that `serialize` described, as ``keras.metrics.deserialize``; your classes come
from ``@mf.saving.register_serializable`` or ``custom_objects`` (``{class name: class}``). An
unknown class, or anything but a config, raises a ValueError."""

get = METRICS.get
"""The `Metric` for one entry of ``Model.compile(metrics=[...])`` (`Registry.get` and
`MetricRegistry.convert`): from a ``Metric`` (returned as is), a Keras metric name (any case;
the metric is named with the string as written, so ``"acc"`` logs as ``acc``) or the
registered name of your metric (``mf.saving.register_serializable``), a `serialize` dict, or
a callable ``fn(y_true, y_pred) -> [batch]`` (wrapped in ``MeanMetricWrapper`` and named
``fn.__name__``). An unknown name, a metric that needs arguments (``MeanIoU``), and
``Mean``/``Sum`` raise a ValueError; anything else a TypeError."""
