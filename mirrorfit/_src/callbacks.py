"""Keras-style callbacks: the `Callback` hooks, the list that dispatches them, and the two
callbacks every ``fit`` gets (`History`, `ProgbarLogger`).

Batch hooks receive `LazyLogs`: a read-only mapping over the step's device values that
fetches a value from the device only when it is read, so a callback that does not read its
logs adds no host sync. The progress bar reads them at its own refresh rate.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
from tqdm.auto import tqdm

_HOOKS = (
    "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
    "on_train_batch_begin", "on_train_batch_end", "on_test_begin", "on_test_end",
    "on_test_batch_begin", "on_test_batch_end", "on_predict_begin", "on_predict_end",
    "on_predict_batch_begin", "on_predict_batch_end",
)


class LazyLogs(Mapping):
    """Metric values of one step, fetched from the device on first read (then cached).

    Args:
        snapshot: the step's device values (an accumulator snapshot).
        decode: turns ``snapshot`` into ``{name: float}``; called at most once.
    """

    __slots__ = ("_snapshot", "_decode", "_values")

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


def chief_print(*args, **kwargs) -> None:
    """``print`` on process 0 only, so a multi-process job prints each message once."""
    if jax.process_index() == 0:
        print(*args, **kwargs)


class Callback:
    """Base class of callbacks, with the hooks and attributes of ``keras.callbacks.Callback``.

    Attributes:
        model: the `mirrorfit.Model` being trained; set ``model.stop_training = True`` to end
            ``fit`` after the current step.
        params: dict with ``epochs`` (total epochs), ``steps`` (steps per epoch, or ``None``
            when unknown) and ``verbose``.

    Every hook takes ``logs``: a dict of Python floats at epoch and train ends, a `LazyLogs`
    in batch hooks. ``batch`` indices count steps within the current epoch.
    """

    def __init__(self):
        self.model = None
        self.params: dict[str, Any] = {}

    def set_model(self, model) -> None:
        self.model = model

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def on_train_begin(self, logs=None): ...
    def on_train_end(self, logs=None): ...
    def on_epoch_begin(self, epoch, logs=None): ...
    def on_epoch_end(self, epoch, logs=None): ...
    def on_train_batch_begin(self, batch, logs=None): ...
    def on_train_batch_end(self, batch, logs=None): ...
    def on_test_begin(self, logs=None): ...
    def on_test_end(self, logs=None): ...
    def on_test_batch_begin(self, batch, logs=None): ...
    def on_test_batch_end(self, batch, logs=None): ...
    def on_predict_begin(self, logs=None): ...
    def on_predict_end(self, logs=None): ...
    def on_predict_batch_begin(self, batch, logs=None): ...
    def on_predict_batch_end(self, batch, logs=None): ...


class CallbackList:
    """Dispatches each hook to the callbacks that implement it (others cost nothing)."""

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
        for hook in _HOOKS:
            active = [getattr(cb, hook) for cb in callbacks if _overrides(cb, hook)]
            setattr(self, hook, _dispatch(active))

    def __iter__(self):
        return iter(self.callbacks)


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


class History(Callback):
    """Records epoch logs: ``history[key]`` is a list of floats, ``epoch`` the epoch numbers."""

    def __init__(self):
        super().__init__()
        self.history: dict[str, list[float]] = {}
        self.epoch: list[int] = []

    def on_train_begin(self, logs=None):
        self.epoch = []
        self.history = {}

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(value))
        if self.model is not None:
            self.model.history = self


def _format(logs: Mapping[str, float]) -> str:
    return " - ".join(f"{key}: {logs[key]:.4f}" for key in logs if not key.startswith("_"))


class ProgbarLogger(Callback):
    """Progress display: a tqdm bar per epoch (``verbose=1``) or one line per epoch (``2``).

    The bar advances every step but reads metric values from the device only every
    ``refresh_seconds``.
    """

    def __init__(self, verbose: int = 1, refresh_seconds: float = 0.5, file=None):
        super().__init__()
        self.verbose = verbose
        self.refresh_seconds = refresh_seconds
        self.file = file
        self._bar = None
        self._next_refresh = 0.0
        self._epoch_start = 0.0
        self._in_fit = False

    def _open(self, total, desc):
        if self.verbose == 1 and jax.process_index() == 0:  # several processes: the chief
            self._bar = tqdm(total=total, desc=desc, unit="step", file=self.file or sys.stderr,
                             dynamic_ncols=True, leave=True)
            self._next_refresh = time.monotonic() + self.refresh_seconds

    def _advance(self, batch, logs):
        bar = self._bar
        if bar is None:
            return
        bar.update(batch + 1 - bar.n)
        now = time.monotonic()
        if logs is not None and now >= self._next_refresh:
            self._next_refresh = now + self.refresh_seconds
            bar.set_postfix_str(_format(logs), refresh=False)

    def _close(self, logs):
        if self._bar is not None:
            if logs:
                self._bar.set_postfix_str(_format(logs), refresh=False)
            self._bar.close()
            self._bar = None

    def on_train_begin(self, logs=None):
        self._in_fit = True

    def on_train_end(self, logs=None):
        self._in_fit = False

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = time.monotonic()
        self._open(self.params.get("steps"), f"Epoch {epoch + 1}/{self.params.get('epochs')}")

    def on_train_batch_end(self, batch, logs=None):
        self._advance(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._close(logs)
        if self.verbose == 2 and jax.process_index() == 0:
            seconds = time.monotonic() - self._epoch_start
            print(f"Epoch {epoch + 1}/{self.params.get('epochs')} - {seconds:.1f}s - "
                  f"{_format(logs or {})}", file=self.file or sys.stdout, flush=True)

    def on_test_begin(self, logs=None):
        if not self._in_fit:
            self._open(self.params.get("steps"), "Evaluate")

    def on_test_batch_end(self, batch, logs=None):
        if not self._in_fit:
            self._advance(batch, logs)

    def on_test_end(self, logs=None):
        if not self._in_fit:
            self._close(logs)

    def on_predict_begin(self, logs=None):
        self._open(self.params.get("steps"), "Predict")

    def on_predict_batch_end(self, batch, logs=None):
        self._advance(batch, None)

    def on_predict_end(self, logs=None):
        self._close(None)
