"""`ProgbarLogger`: Keras' progress display, a tqdm bar per epoch or one line per epoch.

Metric values come from `LazyLogs`, read at most every ``refresh_seconds``, so the bar adds
no host sync to most steps. Several processes: only the chief (process 0) prints.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Mapping

import jax
from tqdm import TqdmWarning

from mirrorfit._src.callbacks.callback import Callback, format_value

with warnings.catch_warnings():
    # In a notebook without ipywidgets, tqdm.auto falls back to its text bar and warns at
    # import time, which would print on every `import mirrorfit` (bar or not) with the path
    # of the user's site-packages.
    warnings.simplefilter("ignore", TqdmWarning)
    from tqdm.auto import tqdm


def _format(logs: Mapping[str, float]) -> str:
    return " - ".join(f"{key}: {format_value(logs[key])}" for key in logs
                      if not key.startswith("_"))


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
        """Notes that ``fit`` runs: its validation draws no bar of its own."""
        self._in_fit = True

    def on_train_end(self, logs=None):
        """Notes that ``fit`` has ended."""
        self._in_fit = False

    def on_epoch_begin(self, epoch, logs=None):
        """Opens the epoch's bar (``verbose=1``)."""
        self._epoch_start = time.monotonic()
        self._open(self.params.get("steps"), f"Epoch {epoch + 1}/{self.params.get('epochs')}")

    def on_train_batch_end(self, batch, logs=None):
        """Advances the bar, showing the logs at its refresh rate (reading them only
        then).
        """
        self._advance(batch, logs)

    def on_epoch_end(self, epoch, logs=None):
        """Closes the bar with the epoch's logs, or prints the epoch's line
        (``verbose=2``).
        """
        self._close(logs)
        if self.verbose == 2 and jax.process_index() == 0:
            seconds = time.monotonic() - self._epoch_start
            print(f"Epoch {epoch + 1}/{self.params.get('epochs')} - {seconds:.1f}s - "
                  f"{_format(logs or {})}", file=self.file or sys.stdout, flush=True)

    def on_test_begin(self, logs=None):
        """Opens the bar of ``evaluate`` (not of ``fit``'s validation)."""
        if not self._in_fit:
            self._open(self.params.get("steps"), "Evaluate")

    def on_test_batch_end(self, batch, logs=None):
        """Advances the bar of ``evaluate``."""
        if not self._in_fit:
            self._advance(batch, logs)

    def on_test_end(self, logs=None):
        """Closes the bar of ``evaluate`` with its results."""
        if not self._in_fit:
            self._close(logs)

    def on_predict_begin(self, logs=None):
        """Opens the bar of ``predict``."""
        self._open(self.params.get("steps"), "Predict")

    def on_predict_batch_end(self, batch, logs=None):
        """Advances the bar of ``predict``."""
        self._advance(batch, None)

    def on_predict_end(self, logs=None):
        """Closes the bar of ``predict``."""
        self._close(None)
