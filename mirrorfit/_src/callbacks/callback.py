"""Keras-style callbacks: the `Callback` hooks, the list that dispatches them (and the check of
``fit``'s ``callbacks`` argument, `checked_callbacks`), `History`, and the helpers the Keras
callback set shares (monitor comparison, save frequency, step count).

The Keras set builds on this module: `mirrorfit._src.callbacks.progbar` (the progress bar),
`stopping_callbacks`, `lr_callbacks`, `logging_callbacks` and `checkpoint_callbacks`.

Batch hooks receive `LazyLogs`: a read-only mapping over the step's device values that
fetches a value from the device only when it is read, so a callback that does not read its
logs adds no host sync. The progress bar reads them at its own refresh rate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from mirrorfit._src.distribute.multi_worker import watchdog
from mirrorfit._src.utils.checks import is_int

_HOOKS = (
    "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
    "on_train_batch_begin", "on_train_batch_end", "on_test_begin", "on_test_end",
    "on_test_batch_begin", "on_test_batch_end", "on_predict_begin", "on_predict_end",
    "on_predict_batch_begin", "on_predict_batch_end", "on_train_error",
)


class LazyLogs(Mapping):
    """Metric values of one step, fetched from the device on first read (then cached).

    Args:
        snapshot: the step's device values (an accumulator snapshot).
        decode: turns ``snapshot`` into ``{name: float}``; called at most once.
    """

    __slots__ = ("_decode", "_snapshot", "_values")

    def __init__(self, snapshot: Any, decode: Callable[[Any], dict[str, float]]):
        self._snapshot = snapshot
        self._decode = decode
        self._values: dict[str, float] | None = None

    def _read(self) -> dict[str, float]:
        if self._values is None:
            self._values = self._decode(self._snapshot)
        return self._values

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return f"LazyLogs({self._read()})"


def is_chief() -> bool:
    """Whether this process is the chief (process 0): the one that prints, writes log files
    and talks to experiment trackers in a multi-process job. Always true in one process."""
    return jax.process_index() == 0


def chief_print(*args, **kwargs) -> None:
    """``print`` on process 0 only, so a multi-process job prints each message once."""
    if is_chief():
        print(*args, **kwargs)


class Callback:
    """Base class of callbacks, with the hooks and attributes of ``keras.callbacks.Callback``.

    Attributes:
        model: the `mirrorfit.Model` being trained; set ``model.stop_training = True`` to end
            ``fit`` after the current step.
        params: dict with ``epochs`` (total epochs), ``steps`` (steps per epoch, or ``None``
            when unknown), ``verbose`` and ``batch_size`` (``fit``'s global batch: rows per
            step over all replicas; ``None`` for a source of batches, whose batches fix their
            own size, and in ``evaluate`` and ``predict``).

    Every hook takes ``logs``: a dict of Python floats at epoch and train ends, a `LazyLogs`
    in batch hooks. ``batch`` indices count steps within the current epoch.

    ``on_train_error(error)`` is mirrorfit's addition (Keras has no such hook): ``fit`` calls
    it when it ends with an exception (raised by the data, a step or a callback, or a
    ``KeyboardInterrupt``), before the exception propagates; ``on_train_end`` then was not
    called or did not finish. A callback that holds a file or a run open closes it there.
    """

    def __init__(self):
        self.model: Any = None  # the `mirrorfit.Model` (a higher layer), set by `set_model`
        self.params: dict[str, Any] = {}

    def set_model(self, model) -> None:
        """Sets `model`: ``fit``, ``evaluate`` and ``predict`` call it before the first hook.

        Args:
            model: the `mirrorfit.Model` the loop runs.
        """
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        """Sets `params`: the loop's ``epochs``, ``steps``, ``verbose`` and ``batch_size``
        (see the class docstring), before the first hook.

        Args:
            params: the dict, shared by every callback of the loop.
        """
        self.params = params

    def on_train_begin(self, logs=None):
        """Called once when ``fit`` starts, before the first epoch.

        Args:
            logs: ``None``, as in Keras.
        """

    def on_train_end(self, logs=None):
        """Called once when ``fit`` ends without an exception (after ``stop_training`` too).

        Args:
            logs: the last epoch's logs, as `on_epoch_end` got them (``{}`` if no epoch
                ran).
        """

    def on_epoch_begin(self, epoch, logs=None):
        """Called at the start of each epoch of ``fit``.

        Args:
            epoch: the epoch's index, from 0 (from ``initial_epoch`` when given, or from the
                epoch a resumed run restarts).
            logs: ``None``.
        """

    def on_epoch_end(self, epoch, logs=None):
        """Called at the end of each epoch of ``fit``, after its validation.

        Args:
            epoch: the epoch's index, from 0.
            logs: the epoch's results as Python floats (NumPy arrays for a metric with one
                value per class), exact over the epoch's rows: ``{"loss": 0.21,
                "accuracy": 0.93}``, and the validation results prefixed with ``val_`` in the
                epochs that validate.
        """

    def on_train_batch_begin(self, batch, logs=None):
        """Called before each train step of ``fit`` (before each group of
        ``steps_per_execution`` steps).

        Args:
            batch: the step's index within the epoch, from 0.
            logs: ``None``.
        """

    def on_train_batch_end(self, batch, logs=None):
        """Called after each train step of ``fit`` (after each group of
        ``steps_per_execution`` steps, with the group's last index).

        Args:
            batch: the step's index within the epoch, from 0.
            logs: a `LazyLogs` mapping of the epoch's results so far (the loss and metrics
                over the epoch's rows up to this step). Reading a value waits for the step
                and copies its results to the host; a callback that does not read them adds
                no wait.
        """

    def on_test_begin(self, logs=None):
        """Called when ``evaluate`` starts, and when ``fit``'s validation starts.

        Args:
            logs: ``None``.
        """

    def on_test_end(self, logs=None):
        """Called when ``evaluate`` (or ``fit``'s validation) ends.

        Args:
            logs: the results as Python floats, exact over every row: ``{"loss": ...,
                "accuracy": ...}``, without the ``val_`` prefix.
        """

    def on_test_batch_begin(self, batch, logs=None):
        """Called before each step of ``evaluate`` (and of ``fit``'s validation).

        Args:
            batch: the step's index, from 0.
            logs: ``None``.
        """

    def on_test_batch_end(self, batch, logs=None):
        """Called after each step of ``evaluate`` (and of ``fit``'s validation).

        Args:
            batch: the step's index, from 0.
            logs: a `LazyLogs` mapping of the results so far, read from the device when
                read (see `on_train_batch_end`).
        """

    def on_predict_begin(self, logs=None):
        """Called when ``predict`` starts.

        Args:
            logs: ``None``.
        """

    def on_predict_end(self, logs=None):
        """Called when ``predict`` ends, before it returns the outputs.

        Args:
            logs: ``None``.
        """

    def on_predict_batch_begin(self, batch, logs=None):
        """Called before each step of ``predict``.

        Args:
            batch: the step's index, from 0.
            logs: ``None``.
        """

    def on_predict_batch_end(self, batch, logs=None):
        """Called once a step's outputs of ``predict`` are on the host: after the next step
        is dispatched, so that the copy overlaps it.

        Args:
            batch: the step's index, from 0.
            logs: ``None`` (Keras passes the outputs; ``predict`` returns them all).
        """

    def on_train_error(self, error: BaseException):
        """Called when ``fit`` ends with an exception, before it propagates (mirrorfit's
        addition, see the class docstring): close files and runs here.

        Args:
            error: the exception (a ``KeyboardInterrupt`` included).
        """


class _StepProgress(Callback):
    """Tells the stuck-rank watchdog (`watchdog.Progress`) of loops and completed steps; runs
    after every other callback, so a step that a callback holds up has not completed."""

    def __init__(self, progress: watchdog.Progress):
        super().__init__()
        self.progress = progress

    def on_train_begin(self, logs=None):
        self.progress.loop_begin("train")

    def on_train_end(self, logs=None):
        self.progress.loop_end("train")

    def on_train_error(self, error):
        self.progress.loop_end()

    def on_test_begin(self, logs=None):
        self.progress.loop_begin("test")

    def on_test_end(self, logs=None):
        self.progress.loop_end("test")

    def on_predict_begin(self, logs=None):
        self.progress.loop_begin("predict")

    def on_predict_end(self, logs=None):
        self.progress.loop_end("predict")

    def on_train_batch_end(self, batch, logs=None):
        self.progress.step_done()

    def on_test_batch_end(self, batch, logs=None):
        self.progress.step_done()

    def on_predict_batch_end(self, batch, logs=None):
        self.progress.step_done()


class CallbackList:
    """Dispatches each hook to the callbacks that implement it (others cost nothing).

    In a multi-process job, the stuck-rank watchdog's step counter comes last
    (`mirrorfit._src.distribute.multi_worker.watchdog`).
    """

    # One dispatcher per hook in `_HOOKS`, set in ``__init__``.
    on_train_begin: Callable[..., None]
    on_train_end: Callable[..., None]
    on_epoch_begin: Callable[..., None]
    on_epoch_end: Callable[..., None]
    on_train_batch_begin: Callable[..., None]
    on_train_batch_end: Callable[..., None]
    on_test_begin: Callable[..., None]
    on_test_end: Callable[..., None]
    on_test_batch_begin: Callable[..., None]
    on_test_batch_end: Callable[..., None]
    on_predict_begin: Callable[..., None]
    on_predict_end: Callable[..., None]
    on_predict_batch_begin: Callable[..., None]
    on_predict_batch_end: Callable[..., None]
    on_train_error: Callable[..., None]

    def __init__(self, callbacks: Sequence[Callback] | None, *, model, params: dict[str, Any]):
        callbacks = list(callbacks or [])
        for cb in callbacks:
            if not all(callable(getattr(cb, hook, None)) for hook in _HOOKS[:4]):
                raise TypeError(
                    "callbacks must be mirrorfit.callbacks.Callback objects (or have Keras "
                    f"hooks such as on_epoch_end). Received: callbacks containing {cb!r}"
                )
            cb.set_model(model)
            cb.set_params(params)
        self.callbacks = callbacks
        progress = watchdog.progress()
        hooked = callbacks if progress is None else [*callbacks, _StepProgress(progress)]
        for hook in _HOOKS:
            active = [getattr(cb, hook) for cb in hooked if _overrides(cb, hook)]
            setattr(self, hook, _dispatch(active))

    def __iter__(self):
        return iter(self.callbacks)


def checked_callbacks(callbacks: Any) -> list[Any]:
    """``callbacks`` as a list, refusing a single callback and a callback class.

    Raises:
        TypeError: naming ``callbacks``, with the fix: wrap one callback in a list
            (``callbacks=[cb]``), instantiate a class (``EarlyStopping()``).
    """
    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(
            "callbacks must be a list of callback objects, e.g. callbacks=[EarlyStopping()]. "
            f"Received: callbacks={callbacks!r} of type {type(callbacks).__name__}")
    for callback in callbacks:
        if isinstance(callback, type):
            raise TypeError(
                f"callbacks must hold callback objects, not classes: pass "
                f"{callback.__name__}(...) instead of {callback.__name__}. Received: "
                f"callbacks containing the class {callback.__name__}")
    return list(callbacks)


def _overrides(cb: Any, hook: str) -> bool:
    method = getattr(type(cb), hook, None)
    return method is not None and method is not getattr(Callback, hook)


def _dispatch(methods):
    if not methods:
        return lambda *args, **kwargs: None
    if len(methods) == 1:
        return methods[0]

    def call(*args, **kwargs):
        for method in methods:
            method(*args, **kwargs)

    return call


def as_log_value(value: Any) -> float | np.ndarray:
    """A log value as `History` keeps it: a Python float, or a NumPy array for a metric with
    one value per class or threshold (e.g. ``F1Score(average=None)``), as Keras."""
    return float(value) if np.ndim(value) == 0 else np.asarray(value)


def format_value(value: Any) -> str:
    """A log value as Keras' progress bar shows it: ``0.1235``, or ``1.0000e-05`` at or
    below ``1e-3`` in magnitude (``keras.utils.Progbar``); arrays with 4 decimals."""
    if np.ndim(value):
        return np.array2string(np.asarray(value), precision=4, separator=", ")
    value = float(value)
    return f"{value:.4f}" if abs(value) > 1e-3 else f"{value:.4e}"


class History(Callback):
    """Records epoch logs: ``history[key]`` is a list of floats, ``epoch`` the epoch numbers."""

    def __init__(self):
        super().__init__()
        self.history: dict[str, list[float | np.ndarray]] = {}
        self.epoch: list[int] = []

    def on_train_begin(self, logs=None):
        """Empties `history` and `epoch`: each ``fit`` call records its own epochs."""
        self.epoch = []
        self.history = {}

    def on_epoch_end(self, epoch, logs=None):
        """Appends ``epoch`` and each log value, and sets ``model.history`` to this object."""
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(as_log_value(value))
        if self.model is not None:
            self.model.history = self


def monitor_op(mode: str, monitor: str, owner: str) -> Callable[[float, float], bool]:
    """``better(a, b)``: ``a < b`` (``"min"``) or ``a > b`` (``"max"``); ``"auto"`` as Keras."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f'{owner} mode must be "auto", "min" or "max". Received: mode={mode!r}')
    if mode == "auto":
        maximize = any(word in monitor for word in ("acc", "auc", "precision", "recall"))
        mode = "max" if maximize else "min"
    return np.greater if mode == "max" else np.less


def check_save_freq(save_freq: Any, owner: str) -> Any:
    """``"epoch"``, or a positive int number of train steps (``save_freq``, ``update_freq``)."""
    if save_freq == "epoch":
        return save_freq
    if not is_int(save_freq) or save_freq < 1:
        raise ValueError(f'{owner} save_freq must be "epoch" or a positive int number of train '
                         f"steps. Received: save_freq={save_freq!r}")
    return int(save_freq)


class StepCounter:
    """Train steps done, from the batch indices of ``on_train_batch_end`` (as Keras counts).

    With ``steps_per_execution = K`` a hook sees every K-th index, so one call may add K steps.
    """

    def __init__(self):
        self._last = -1

    def advance(self, batch: int) -> int:
        added = batch + 1 if batch <= self._last else batch - self._last
        self._last = batch
        return added
