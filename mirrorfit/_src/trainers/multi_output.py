"""Multi-output models: per-output losses, loss weights and per-output metrics, as Keras 3.

A module may return a tuple/list or a dict of outputs. ``compile`` then takes ``loss`` as a
list or dict matching the outputs, ``loss_weights`` alike, and ``metrics`` /
``weighted_metrics`` per output (a list of lists, or a dict). Output names are the dict keys;
for a list, a functional model's ``output_names`` (its output layers' names, as Keras 3:
then ``loss``, ``loss_weights``, ``metrics`` and the targets ``y`` may also be dicts by those
names), else ``output_1``, ``output_2``, ... (tf.keras' names for unnamed outputs). Logs
follow Keras: ``loss`` (the weighted total), ``<output>_loss`` and ``<output>_<metric>``.

`MultiOutputLoss` is one per-example loss for the steps: the weighted sum of the outputs'
per-example losses, so the total over the global batch is exactly the weighted sum of the
per-output means, as on one device. Each output's Keras mask weights its own loss, as Keras 3
applies every output's ``_keras_mask`` (`MultiOutputLoss.per_output`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
from jax import lax

from mirrorfit._src.distribute.mesh import BATCH_AXIS
from mirrorfit._src.losses import losses as losses_lib
from mirrorfit._src.metrics import metrics as metrics_lib
from mirrorfit._src.trainers import input_checks
from mirrorfit._src.utils.checks import is_int

SINGLE_LOSS_FOR_SEVERAL_OUTPUTS = (
    "The loss {name!r} was given for a model with {count} outputs {names}, but a built-in loss "
    "applies to one output. Pass one loss per output, as a list in output order or a dict by "
    "output name, e.g. loss={example}. Received: loss={name!r}"
)


TARGETS_DO_NOT_MATCH_OUTPUTS = (
    "{argument} must hold one target per output of the model's loss: {expected}. Pass the "
    "targets {fix}. Received: {argument}={received}"
)


def describe_targets(y: Any) -> str:
    """``y`` in words for an error: a dict's keys, a tuple's length, or one array's shape."""
    if isinstance(y, Mapping):
        return f"a dict with keys {sorted(map(str, y))}"
    if isinstance(y, (list, tuple)):
        return f"a {type(y).__name__} of {len(y)} targets"
    return f"one array of shape {tuple(getattr(y, 'shape', ()))}" if hasattr(
        y, "shape") else f"{type(y).__name__}"


def _output_keys(spec: Any) -> list[Any]:
    return list(spec) if isinstance(spec, Mapping) else list(range(len(spec)))


def output_name(key: Any, names: Sequence[str] | None = None) -> str:
    """The log name of an output: its dict key, or for list index ``i`` ``names[i]`` (a
    functional model's ``output_names``), else ``output_{i + 1}``."""
    if not is_int(key):
        return str(key)
    return str(names[key]) if names is not None else f"output_{key + 1}"


def select(tree: Any, key: Any, names: Sequence[str] | None = None) -> Any:
    """Output ``key`` of a tuple/list or dict of outputs (or of targets); a dict of targets
    for list outputs named ``names`` (`output_names`) is read by the output's name."""
    if names is not None and is_int(key) and isinstance(tree, Mapping) and key not in tree:
        return tree[names[key]]
    return tree[key]


def _by_position(spec: Any, names: Sequence[str] | None, what: str) -> Any:
    """``spec`` as given, or, a dict by output name for list outputs named ``names``, as a
    list in output order (``None`` for an output it leaves out).

    Raises:
        ValueError: a key that names no output.
    """
    if names is None or not isinstance(spec, Mapping):
        return spec
    unknown = sorted(map(str, set(spec) - set(names)))
    if unknown:
        raise ValueError(f"{what} names outputs {unknown} that the model does not have; the "
                         f"outputs are {list(names)} (model.output_names). Received: "
                         f"{what}={dict(spec)!r}")
    return [spec.get(name) for name in names]


def _per_output(spec: Any, keys: list[Any], what: str,
                names: Sequence[str] | None = None) -> dict[Any, Any]:
    """``spec`` (a list in output order, or a dict by name) as a dict key -> entry."""
    spec = _by_position(spec, names, what)
    labels = [output_name(k, names) for k in keys]
    if isinstance(spec, Mapping):
        unknown = sorted(map(str, set(spec) - set(keys)))
        if unknown:
            raise ValueError(f"{what} names outputs {unknown} that the loss does not have; "
                             f"the outputs are {labels}. Received: {what}={dict(spec)!r}")
        return dict(spec)
    if len(spec) != len(keys):
        raise ValueError(f"{what} must have one entry per output ({len(keys)}: {labels}). "
                         f"Received: {what} with {len(spec)} entries")
    return dict(zip(keys, spec))


class MultiOutputLoss:
    """The per-example loss of a multi-output model: ``sum_k w_k * loss_k(y[k], y_pred[k])``.

    Args:
        loss: a list (one per output, ``None`` for an output without a loss) or a dict by
            output name of loss names, `mirrorfit.losses` objects or callables
            ``(y_true, y_pred) -> [batch]``.
        loss_weights: ``None`` (all 1.0), or a list/dict of floats like ``loss``.
        output_names: the names of a model's list of outputs (`output_names`), or ``None``:
            then ``loss`` and ``loss_weights`` may be dicts by these names, and the
            targets a dict by them too.

    Raises:
        ValueError: if ``loss_weights`` does not match ``loss``, a dict names no output, or
            every loss is ``None``.
    """

    name = "loss"

    def __init__(self, loss: Sequence[Any] | Mapping[str, Any], loss_weights: Any = None,
                 output_names: Sequence[str] | None = None):
        self.names = None if output_names is None else list(output_names)
        loss = _by_position(loss, self.names, "loss")
        self.keys = _output_keys(loss)
        given = _per_output(loss, self.keys, "loss", self.names)
        weights = dict.fromkeys(self.keys, 1.0) if loss_weights is None else _per_output(
            loss_weights, self.keys, "loss_weights", self.names)
        self.losses = {key: fit_loss(fn) for key, fn in given.items() if fn is not None}
        if not self.losses:
            raise ValueError(f"loss must give a loss for at least one output. Received: "
                             f"loss={loss!r}")
        self.weights = {key: float(1.0 if weights.get(key) is None else weights[key])
                        for key in self.losses}
        self._is_dict = isinstance(loss, Mapping)

    def output_name(self, key: Any) -> str:
        """The log name of output ``key`` (see `output_name`)."""
        return output_name(key, self.names)

    def _targets(self, y: Any) -> Any:
        """``y``, or, when some outputs have no loss (``loss=[fn, None]``) and ``y`` holds
        only the targets of those with one (one array, or a shorter list or tuple, in output
        order), those targets by output key, as Keras' partially defined loss takes them."""
        if len(self.losses) == len(self.keys) or isinstance(y, Mapping):
            return y
        given = list(y) if isinstance(y, (list, tuple)) else [y]
        return dict(zip(self.losses, given)) if len(given) == len(self.losses) else y

    @property
    def loss_names(self) -> list[str]:
        """The log names of the per-output losses, ``<output>_loss``, in output order; none
        when only one output has a loss (Keras logs only ``loss`` then)."""
        if len(self.losses) == 1:
            return []
        return [f"{self.output_name(key)}_loss" for key in self.losses]

    def _check(self, y_pred: Any) -> None:
        if isinstance(y_pred, Mapping) != self._is_dict or len(y_pred) != len(self.keys) or (
                self._is_dict and set(y_pred) != set(self.keys)):
            got = (sorted(y_pred) if isinstance(y_pred, Mapping) else
                   f"{type(y_pred).__name__} of {len(y_pred)}" if isinstance(
                       y_pred, (list, tuple)) else "one array")
            raise ValueError(f"loss is given per output for outputs "
                             f"{[self.output_name(k) for k in self.keys]}, but the model returns "
                             f"{got}. Match loss to the model's outputs. Received: "
                             f"model outputs {got}")

    def check_targets(self, y: Any, argument: str = "y") -> None:
        """Checks that ``y`` has one target per output: a dict with the outputs' names, or a
        tuple/list in output order (for named list outputs, either).

        Args:
            y: the targets (arrays, or a batch's).
            argument: the argument the targets came from, for the message (``"y"``,
                ``"validation_data"``).

        Raises:
            ValueError: for a different count, missing or unknown names, or one array,
                naming the expected outputs and what was received.
        """
        names = [self.output_name(k) for k in self.keys]
        if self._targets(y) is not y:  # the targets of the outputs with a loss only
            return
        if self.names is not None and isinstance(y, Mapping):
            ok = set(y) == set(names)
            expected = f"a dict with keys {sorted(names)}"
            fix = "as a dict by output name (model.output_names)"
        elif self._is_dict:
            ok = isinstance(y, Mapping) and set(y) == set(self.keys)
            expected = f"a dict with keys {sorted(names)}"
            if isinstance(y, Mapping) and not ok:
                missing = sorted(map(str, set(self.keys) - set(y)))
                unknown = sorted(map(str, set(y) - set(self.keys)))
                expected += (f" (missing: {missing}" if missing else " (") + (
                    f"{'; ' if missing else ''}unknown: {unknown})" if unknown else ")")
            fix = "as a dict by output name"
        else:
            ok = isinstance(y, (list, tuple)) and len(y) == len(self.keys)
            expected = f"a tuple or list of {len(names)} targets for the outputs {names}"
            fix = "as a tuple in output order"
        if not ok:
            raise ValueError(TARGETS_DO_NOT_MATCH_OUTPUTS.format(
                argument=argument, expected=expected, fix=fix, received=describe_targets(y)))

    def per_output(self, y_true: Any, y_pred: Any, mask: Any = None,
                   rows: jax.Array | None = None) -> dict[str, jax.Array]:
        """``{"<output>_loss": per-example loss [batch]}`` for every output with a loss.

        Args:
            y_true: one replica's targets, one per output.
            y_pred: one replica's outputs.
            mask: the outputs' Keras masks in the outputs' structure (bool ``[batch,
                timesteps]``, ``None`` for an output without one), or ``None``. Inside the
                steps only: the masked outputs' divisors are summed over the replicas.
            rows: bool ``[batch]``, this replica's real rows, or ``None`` (for shapes only:
                the masked values are then not scaled, and nothing is summed over replicas).

        Returns:
            Without a mask, each output's mean loss per example. For an output with a mask
            and a built-in loss, each row's sum of unmasked element losses times
            ``N / C`` (``N`` real rows and ``C`` unmasked elements in real rows, both over
            every replica; 0 when ``C`` is 0): summed with the sample weights over the
            global batch and divided by ``N``, as the steps do, that is Keras'
            ``sum(l * sample_weight * mask) / sum(mask)`` for that output, exactly as on one
            device.
        """
        self._check(y_pred)
        self.check_targets(y_true)
        y_true = self._targets(y_true)
        masks = {key: None if mask is None else select(mask, key) for key in self.losses}
        parts = {}
        for key, fn in self.losses.items():
            values, counts = input_checks.masked_loss(
                fn, select(y_true, key, self.names), select(y_pred, key), masks[key])
            if counts is not None and rows is not None:
                real, unmasked = lax.psum((jnp.sum(rows, dtype=jnp.float32),
                                           jnp.sum(jnp.where(rows, counts, 0.0))), BATCH_AXIS)
                values = values * jnp.where(unmasked > 0, real / jnp.maximum(unmasked, 1.0),
                                            0.0)
            parts[f"{self.output_name(key)}_loss"] = values
        return parts

    def __call__(self, y_true: Any, y_pred: Any, mask: Any = None,
                 rows: jax.Array | None = None) -> jax.Array:
        """The weighted total per-example loss ``[batch]`` (``mask``, ``rows``: as
        `per_output`)."""
        parts = self.per_output(y_true, y_pred, mask, rows)
        total = sum(self.weights[key] * parts[f"{self.output_name(key)}_loss"]
                    for key in self.losses)
        return cast(jax.Array, total)  # self.losses is never empty: never sum's start value 0

    def not_probabilities(self, y_pred: Any) -> jax.Array | None:
        """Rows where any output's loss got outputs that are not probabilities, or ``None``."""
        flags = [check(select(y_pred, key)) for key, fn in self.losses.items()
                 if (check := getattr(fn, "not_probabilities", None)) is not None]
        flags = [f for f in flags if f is not None]
        return None if not flags else jnp.any(jnp.stack(flags), axis=0)


FIT_REDUCTIONS = ("sum_over_batch_size", "mean", None, "none")
"""Loss reductions ``fit`` honours: all mean the weighted mean over the global batch."""


def fit_loss(loss: Any) -> Callable:
    """``losses.get(loss)``, refusing a reduction that ``fit`` would not honour.

    Raises:
        ValueError: for a `mirrorfit.losses` object whose ``reduction`` is ``"sum"`` or
            ``"mean_with_sample_weight"``.
    """
    fn = losses_lib.get(loss)
    reduction = getattr(getattr(fn, "loss", None), "reduction", None)
    if reduction not in FIT_REDUCTIONS:
        raise ValueError(
            f"In fit and evaluate the loss is the weighted mean over the global batch, summed "
            f"over replicas and padding-exact (Keras' 'sum_over_batch_size'), so the loss "
            f"{fn.name!r} cannot use reduction={reduction!r} there. Drop `reduction=` (scale "
            f"the learning rate or use loss_weights instead). Received: reduction={reduction!r}")
    return fn


def single_loss(loss: Any) -> Callable:
    """A loss for a model with one output; a built-in loss refuses several outputs."""
    fn = fit_loss(loss)
    if not isinstance(fn, losses_lib.PerExampleLoss):
        return fn  # a custom callable may handle any output structure itself

    def checked(y_true, y_pred):
        if isinstance(y_pred, (list, tuple, Mapping)) and len(jax.tree.leaves(y_pred)) > 1:
            names = [output_name(k) for k in _output_keys(y_pred)]
            example = ([fn.name] * len(names) if not isinstance(y_pred, Mapping) else
                       dict.fromkeys(names, fn.name))
            raise ValueError(SINGLE_LOSS_FOR_SEVERAL_OUTPUTS.format(
                name=fn.name, count=len(names), names=names, example=example))
        return fn(y_true, y_pred)

    checked.name = fn.name
    checked.not_probabilities = fn.not_probabilities
    checked.loss = fn.loss
    checked.elements = fn.elements
    return checked


def scaled(fn: Callable, loss_weights: Any) -> Callable:
    """A single loss times ``loss_weights`` (a float, or a list of one float; ``None``: 1).

    Raises:
        ValueError: for any other ``loss_weights``.
    """
    if isinstance(loss_weights, (list, tuple)) and len(loss_weights) == 1:
        loss_weights = loss_weights[0]
    if loss_weights is None:
        return fn
    if isinstance(loss_weights, bool) or not isinstance(loss_weights, (int, float)):
        raise ValueError("loss_weights must be a float for a single loss, or a list/dict like a "
                         f"per-output loss. Received: loss_weights={loss_weights!r}")
    weight = float(loss_weights)

    def weighted(y_true, y_pred):
        return weight * fn(y_true, y_pred)

    weighted.name = getattr(fn, "name", "loss")
    weighted.not_probabilities = getattr(fn, "not_probabilities", lambda y_pred: None)
    if hasattr(fn, "elements"):
        weighted.elements = lambda y_true, y_pred: weight * fn.elements(y_true, y_pred)
    return weighted


class OutputMetric:
    """A metric of one output of a multi-output model, logged as ``<output>_<metric>``
    (``names``: the model's `output_names` of list outputs, or ``None``)."""

    def __init__(self, metric: Any, key: Any, prefix: str = "",
                 names: Sequence[str] | None = None):
        self.metric = metric
        self.key = key
        self.names = names
        self.name = f"{prefix}{output_name(key, names)}_{metric.name}"

    def update(self, y_true: Any, y_pred: Any, sample_weight: jax.Array) -> Any:
        return self.metric.update(select(y_true, key := self.key, self.names),
                                  select(y_pred, key), sample_weight)

    def result(self, stats: Any) -> Any:
        return self.metric.result(stats)


def metric_objects(metrics: Any, keys: list[Any] | None, argument: str,
                   names: Sequence[str] | None = None) -> tuple[Any, ...]:
    """``metrics``/``weighted_metrics`` as metric objects for the steps.

    Args:
        metrics: ``None``, a list (for every output), a list of lists (one per output), or a
            dict by output name.
        keys: the outputs' keys when the loss is given per output, else ``None``.
        argument: the argument's name, for errors.
        names: the model's `output_names` of list outputs, or ``None``.

    Raises:
        TypeError: for a ``metrics`` that is neither a list nor a dict.
        ValueError: for per-output metrics on a single-output loss, or names that clash.
    """
    if metrics is None:
        return ()
    if isinstance(metrics, str) or not isinstance(metrics, (Sequence, Mapping)):
        raise TypeError(f"{argument} must be a list, e.g. {argument}=[\"accuracy\"], or one "
                        f"list per output. Received: {argument}={metrics!r}")
    per_output = isinstance(metrics, Mapping) or (
        bool(metrics) and all(m is None or isinstance(m, (list, tuple)) for m in metrics))
    if per_output and keys is None:
        raise ValueError(f"{argument} is given per output, but loss is a single loss (one "
                         f"output). Pass a flat list, e.g. {argument}=[\"accuracy\"]. "
                         f"Received: {argument}={metrics!r}")
    if keys is None:
        return tuple(metrics_lib.get(m) for m in metrics)
    given = (_per_output(metrics, keys, argument, names) if per_output
             else dict.fromkeys(keys, metrics))
    return tuple(OutputMetric(metrics_lib.get(m), key, names=names)
                 for key in keys for m in _as_list(given.get(key)))


def _as_list(metrics: Any) -> list[Any]:
    """One output's metrics: a list, or one metric (``{"cls": "accuracy"}``, as Keras)."""
    if metrics is None:
        return []
    return list(metrics) if isinstance(metrics, (list, tuple)) else [metrics]


def loss_keys(loss: Any, names: Sequence[str] | None = None) -> list[Any] | None:
    """The output keys of a per-output ``loss`` (list or dict; a dict by the `output_names`
    ``names` of list outputs gives their positions), ``None`` for a single loss."""
    if not isinstance(loss, (list, tuple, Mapping)):
        return None
    return _output_keys(_by_position(loss, names, "loss"))
