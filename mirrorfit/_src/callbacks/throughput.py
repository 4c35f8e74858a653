"""`ThroughputMonitor`: training speed per epoch (steps/s, examples/s, TFLOP/s) and MFU.

The step's FLOPs come from XLA's cost analysis of the compiled train step, through the
trainer (`mirrorfit._src.callbacks.contract.TrainingLoop.train_step_cost`); the peak FLOP/s
of known accelerators are in `PEAK_FLOPS`.
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from time import perf_counter
from typing import Any

import jax

from mirrorfit._src.callbacks.callback import Callback
from mirrorfit._src.utils.checks import MirrorfitWarning

PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    # (``device.device_kind`` pattern, re.fullmatch, dense bf16 peak FLOP/s per device)
    # NVIDIA datasheets state Tensor Core peaks "with sparsity": the dense peak is half.
    (r"NVIDIA H100.*PCIe", 756e12),  # H100 datasheet: BF16 1,513 TFLOPS sparse
    (r"NVIDIA H100.*NVL", 835e12),  # H100 datasheet: BF16 1,671 TFLOPS sparse
    (r"NVIDIA H100.*", 989e12),  # H100 SXM, datasheet: BF16 1,979 TFLOPS sparse
    (r"NVIDIA H200.*NVL", 835e12),  # H200 datasheet: BF16 1,671 TFLOPS sparse
    (r"NVIDIA H200.*", 989e12),  # H200 SXM, datasheet: BF16 1,979 TFLOPS sparse
    (r"NVIDIA A100.*", 312e12),  # A100 datasheet: BF16 312 TFLOPS dense (SXM and PCIe)
    # Google Cloud TPU system-architecture pages: bf16 peak per chip (one JAX device).
    (r"TPU v4", 275e12),
    (r"TPU v5 lite|TPU v5e", 197e12),
    (r"TPU v5p?", 459e12),
    (r"TPU v6 lite|TPU v6e", 918e12),
)
"""Dense bf16 peak FLOP/s per JAX device of known accelerators, from the vendors'
datasheets: the default ``peak_flops`` of `ThroughputMonitor`."""


def peak_flops_of(device_kind: str) -> float | None:
    """The `PEAK_FLOPS` entry for a ``jax.Device.device_kind``; ``None`` if none matches.

    Example:
        >>> peak_flops_of("NVIDIA H100 80GB HBM3")
        989000000000000.0
    """
    for pattern, peak in PEAK_FLOPS:
        if re.fullmatch(pattern, device_kind):
            return peak
    return None


class ThroughputMonitor(Callback):
    """Logs training throughput per epoch: steps/s, examples/s, TFLOP/s and MFU.

    Each epoch's logs get (so `History`, the progress bar and the loggers listed after this
    callback show them):

    * ``steps_per_second``: train steps (global batches) per second;
    * ``examples_per_second``: ``steps_per_second`` times the global batch (the rows of one
      step over all replicas, padded up to a multiple of the replica count, so a partial
      last batch counts whole, as the devices compute it);
    * ``tflops_per_second``: achieved TFLOP/s over all devices, ``steps_per_second`` times
      the step's FLOPs (XLA's cost analysis of the compiled train step, all replicas);
    * ``mfu``: model FLOPs utilization, a fraction: achieved FLOP/s over the peak of all
      devices, ``tflops_per_second * 1e12 / (peak_flops * num_replicas)``, as in PaLM
      (Chowdhery et al., 2022, appendix B), with XLA's count of the step's FLOPs.

    What is timed: the train steps of the epoch, from the completion of the epoch's first
    train call (for the first epoch of ``fit``, which compiles the step) or from
    ``on_epoch_begin`` (later epochs), to the completion of the epoch's last train step;
    validation and the other callbacks' epoch-end work are outside it. The steps counted
    are those in that span (with ``steps_per_execution``, whole calls). Compilation is
    excluded. The host waits for the device only after the first train call of ``fit`` and
    after each epoch's last step (where ``fit`` waits anyway), never per step. An epoch
    with no step in its span (the first epoch, when it is one train call) logs NaN.

    Put it before the loggers (``CSVLogger``, ``TensorBoard``) in ``callbacks``, so they
    see its values.

    With ``audit``, after the first train call of each ``fit`` (outside the timed span) it
    checks the program of the compiled train step as ``mf.utils.audit_step`` does, and warns
    (a `MirrorfitWarning` naming the layer) of each trap that costs an accelerator time or
    memory: a scatter into a logits-sized buffer, a half-precision scatter-add into a float32
    param, a gather from a half-precision copy of a whole table, a collective in a one-replica
    step, a state leaf not donated.

    Args:
        peak_flops: peak FLOP/s of one device (replica) for ``mfu``; ``None`` looks the
            device kind up in `PEAK_FLOPS` (dense bf16 datasheet peaks: for float32 steps
            give the float32 peak). Without either (on the CPU, an unlisted accelerator),
            ``mfu`` is not logged; on an unlisted accelerator a warning says so once per
            ``fit``.
        audit: ``True`` audits the step as lowered for the model's devices; a platform name
            (``"cuda"``, ``"rocm"``, ``"tpu"``) audits it lowered for that platform, which
            needs no such device; ``False`` (default): no audit.

    Raises:
        ValueError: for a ``peak_flops`` that is not a positive number, or an ``audit`` that
            is neither a bool nor a platform name.

    Example:
        >>> monitor = ThroughputMonitor()  # mfu too on a device listed in PEAK_FLOPS
        >>> history = model.fit(x, y, epochs=2, verbose=0, callbacks=[monitor])
        >>> sorted(history.history)  # on the CPU
        ['examples_per_second', 'loss', 'steps_per_second', 'tflops_per_second']
    """

    def __init__(self, peak_flops: float | None = None, audit: bool | str = False):
        super().__init__()
        if peak_flops is not None and (isinstance(peak_flops, bool) or not isinstance(
                peak_flops, numbers.Real) or not peak_flops > 0):
            raise ValueError("ThroughputMonitor peak_flops must be a positive number of "
                             "FLOP/s per device (e.g. 989e12 for an H100 SXM in bf16), or "
                             f"None to look it up. Received: peak_flops={peak_flops!r}")
        if not isinstance(audit, (bool, str)) or audit == "":
            raise ValueError("ThroughputMonitor audit must be True, False or a platform name "
                             f"such as 'cuda'. Received: audit={audit!r}")
        self.peak_flops = None if peak_flops is None else float(peak_flops)
        self.audit = audit
        self._cost: Any = None  # the fit's `StepCost`, read at its first epoch end
        self._peak: float | None = None
        self._start: tuple[float, int] | None = None  # (clock, steps done) at the span start
        self._end: tuple[float, int] | None = None  # (clock, steps done) at the span end
        self._first_call = True

    def on_train_begin(self, logs=None):
        """Looks up the devices' peak FLOP/s (unless ``peak_flops`` was given); warns on
        an accelerator it does not know.
        """
        self._cost, self._first_call = None, True
        self._peak = self.peak_flops
        if self._peak is None:
            device = self.model.strategy.devices[0]
            kind = device.device_kind
            self._peak = peak_flops_of(kind)
            if self._peak is None and device.platform != "cpu":
                warnings.warn(f"ThroughputMonitor does not know the peak FLOP/s of device kind "
                              f"{kind!r}, so mfu is not logged: pass peak_flops=<FLOP/s per "
                              "device>.", MirrorfitWarning, stacklevel=2)

    def on_epoch_begin(self, epoch, logs=None):
        # After the first call of fit the step is compiled and the device idle here.
        """Starts the epoch's timed span (in the first ``fit`` call, after its first step,
        which compiles).
        """
        self._start = None if self._first_call else (perf_counter(), 0)
        self._end = None

    def on_train_batch_end(self, batch, logs=None):
        """Waits for the device at the first step of the call and at the epoch's last
        step, to time the span between them.
        """
        progress = self.model.trainer.progress
        if self._first_call or progress.end_of_epoch:
            # Wait for the call's device work; at the end of an epoch fit waits right after.
            jax.block_until_ready((self.model.state, progress.statistics))
            if self._first_call:
                self._first_call = False
                if self.audit:
                    platform = None if self.audit is True else self.audit
                    for trap in self.model.trainer.audit_train_step(platform):
                        warnings.warn(trap.message, MirrorfitWarning, stacklevel=2)
                self._start = (perf_counter(), progress.step)
            if progress.end_of_epoch:
                self._end = (perf_counter(), progress.step)

    def on_test_begin(self, logs=None):
        """Ends the timed span: validation is not timed."""
        self._mark_end()  # validation in fit is outside the span

    def _mark_end(self) -> None:
        """Ends the span now unless the epoch's last step ended it: the epoch stopped early
        (``stop_training``), and ``fit`` has waited for its last step already."""
        if self._start is not None and self._end is None:
            self._end = (perf_counter(), self.model.trainer.progress.step)

    def on_epoch_end(self, epoch, logs=None):
        """Adds the epoch's ``steps_per_second``, ``examples_per_second``,
        ``tflops_per_second`` and ``mfu`` (when the step's FLOPs and the peak are
        known) to its logs.
        """
        self._mark_end()
        start, end, self._start = self._start, self._end, None
        if logs is None:
            return
        if self._cost is None:
            self._cost = self.model.trainer.train_step_cost()
        steps = 0 if start is None or end is None else end[1] - start[1]
        seconds = 0.0 if start is None or end is None else end[0] - start[0]
        steps_per_second = steps / seconds if steps > 0 and seconds > 0 else math.nan
        logs["steps_per_second"] = steps_per_second
        logs["examples_per_second"] = steps_per_second * self._cost.global_batch_size
        if self._cost.flops is not None:
            flops_per_second = steps_per_second * self._cost.flops
            logs["tflops_per_second"] = flops_per_second / 1e12
            if self._peak is not None:
                logs["mfu"] = flops_per_second / (
                    self._peak * self.model.strategy.num_replicas_in_sync)
