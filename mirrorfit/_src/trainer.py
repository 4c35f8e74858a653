"""The trainer: fit/evaluate/predict loops, callbacks and progress, over compiled steps.

It owns the host side of training. Each loop moves the next batch to the devices while the
current step runs, and keeps **at most two steps in flight**: after dispatching step ``k`` it
waits for step ``k - 1``. On the CPU backend with several devices, XLA's in-process
all-reduce deadlocks when many collective executions are queued ("Termination timeout for
all reduce"); the bound avoids that and still keeps dispatch asynchronous.

Metric statistics accumulate on the devices; the host reads them only when they are shown
(a progress-bar refresh, an epoch end). After every step the model's state is the newest
one, so an exception leaves the model at its last good state.

For fault tolerance, ``fit`` publishes its position (`Progress`: epoch, step in the epoch,
metric accumulators) in ``trainer.progress`` before each ``on_train_batch_end``, and a
callback may set ``trainer.resume_point`` (`ResumePoint`) in ``on_train_begin`` to continue a
run mid-epoch with restored accumulators (``mirrorfit.callbacks.BackupAndRestore`` does).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from mirrorfit._src import steps as steps_lib
from mirrorfit._src.callbacks import CallbackList, History, LazyLogs, ProgbarLogger
from mirrorfit._src.data import HostBatch, place_batches
from mirrorfit._src.losses import NOT_PROBABILITIES_WARNING
from mirrorfit._src.run import replica_function
from mirrorfit._src.multi_worker import check_same_across_processes
from mirrorfit._src.strategy import MirroredStrategy


class Progress(NamedTuple):
    """Where training is after the newest step; `Trainer.progress`, read by callbacks."""

    epoch: int  # current epoch
    step: int  # train steps of ``epoch`` done (the newest state is after them)
    end_of_epoch: bool  # whether ``step`` is the epoch's last step
    acc: Any  # the epoch's metric accumulators after ``step`` (a device array that later
    #           steps do not change)


class ResumePoint(NamedTuple):
    """Where `Trainer.fit` starts instead of ``initial_epoch``; set in ``on_train_begin``."""

    epoch: int  # epoch to resume
    step: int  # train steps of ``epoch`` already done
    acc: Callable[[Any], Any] | None  # zero accumulators (host) -> restored ones; None: fresh


class Trainer:
    """Compiled steps plus the loops that drive them for one compiled configuration.

    Args:
        strategy: the strategy whose mesh the steps run on.
        config: the steps' module adapter, loss, metrics and optimizer.
        steps_per_execution: train steps fused into one device call (``lax.scan``).
    """

    def __init__(self, strategy: MirroredStrategy, config: steps_lib.StepConfig,
                 steps_per_execution: int = 1):
        self.strategy = strategy
        self.config = config
        self.steps_per_execution = steps_per_execution
        self._layout: steps_lib.StatsLayout | None = None
        self._zeros: np.ndarray | None = None
        self._warned_not_probabilities = False
        if steps_per_execution > 1:
            self._train_step = steps_lib.make_multi_train_step(config)
        else:
            self._train_step = steps_lib.make_train_step(config)
        self._eval_step = steps_lib.make_eval_step(config)
        # Compiled on the first batch, through the machinery of ``strategy.run``, once per
        # argument structure (a batch with or without sample weights).
        self._compiled: dict[Any, Any] = {}
        self.train_fn: Any = None  # the newest compiled train step

    # -- accumulators ---------------------------------------------------------------------

    def _fresh_statistics(self, state, batch: HostBatch):
        """Zero accumulators (a float32 vector, mirrored) for statistics of ``batch``."""
        if self._layout is None:
            sample = batch
            if self.steps_per_execution > 1 and batch.mask.ndim == 2:
                # Shapes only: slicing the placed arrays would compile eager ops.
                sample = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), batch)
            self._layout = steps_lib.statistics_layout(self.config, state, sample)
            self._zeros = np.zeros(self._layout.size, np.float32)
        return self.strategy.replicate_arrays(self._zeros)

    def _decode(self, snapshot) -> dict[str, float]:
        """Metric values (Python floats, loss first) from an accumulator snapshot."""
        stats = self._layout.unflatten(np.asarray(self.strategy.fetch(snapshot)))
        if not self._warned_not_probabilities and stats.get(steps_lib.NOT_PROBABILITIES, 0) > 0:
            self._warned_not_probabilities = True
            name = getattr(self.config.loss, "name", type(self.config.loss).__name__)
            warnings.warn(NOT_PROBABILITIES_WARNING.format(name=name), UserWarning, stacklevel=5)
        return {key: float(value) for key, value in steps_lib.results(self.config, stats).items()}

    def _compile(self, step, example_args, out_specs, *, donate_argnums):
        key = (step, jax.tree.structure(example_args))
        if key not in self._compiled:
            self._compiled[key] = replica_function(self.strategy, step, example_args, out_specs,
                                                   donate_argnums=donate_argnums)
        return self._compiled[key]

    # -- loops ----------------------------------------------------------------------------

    def fit(self, model, train, *, epochs: int, initial_epoch: int, callbacks, verbose: int,
            validation=None, validation_freq: int = 1) -> History:
        # Several processes: fail fast, before any collective, unless all train alike.
        check_same_across_processes({
            "global batch_size": getattr(train, "batch_size", None),
            "steps per epoch": train.steps, "epochs": epochs,
            "input shapes": model._input_spec,
            "param shapes": jax.tree.map(lambda a: tuple(a.shape), model.params)})
        history = History()
        extra = [cb for cb in (callbacks or []) if isinstance(cb, ProgbarLogger)]
        # History after the user's callbacks, as in Keras: it records what they add to the
        # epoch logs (e.g. ``learning_rate``).
        cbs = (list(callbacks or []) + [history]
               + ([] if extra or verbose == 0 else [ProgbarLogger(verbose)]))
        params = {"epochs": epochs, "steps": train.steps, "verbose": verbose}
        callback_list = CallbackList(cbs, model=model, params=params)
        model.stop_training = False
        model.history = history
        self.train_data, self.resume_point = train, None
        callback_list.on_train_begin()
        resume, self.resume_point = self.resume_point, None
        first = initial_epoch if resume is None else resume.epoch
        logs: dict[str, float] = {}
        for epoch in range(first, epochs):
            callback_list.on_epoch_begin(epoch)
            logs = self._train_epoch(model, train, epoch, callback_list,
                                     resume if epoch == first else None)
            if validation is not None and (epoch + 1 - initial_epoch) % validation_freq == 0:
                val_logs = self.evaluate(model, validation, callback_list)
                logs.update({f"val_{k}": v for k, v in val_logs.items()})
            callback_list.on_epoch_end(epoch, logs)
            if model.stop_training:
                break
        callback_list.on_train_end(logs)
        return history

    def _train_epoch(self, model, data, epoch, callbacks, resume: ResumePoint | None = None
                     ) -> dict[str, float]:
        group = self.steps_per_execution
        step = 0 if resume is None else resume.step
        batches = place_batches(data.batches(epoch, start_step=step, group=group),
                                self.strategy, group=group)
        batch = next(batches)
        acc = self._fresh_statistics(model._state, batch)
        self.train_fn = self._compile(self._train_step, (model._state, acc, batch),
                                      (P(), P()), donate_argnums=0)
        if resume is not None and resume.acc is not None:
            acc = self.strategy.replicate_arrays(resume.acc(self._zeros))
        previous = None
        while batch is not None:
            callbacks.on_train_batch_begin(step)
            model._state, acc = self.train_fn(model._state, acc, batch)
            batch = next(batches, None)  # the next transfer overlaps this step
            if previous is not None:
                previous.block_until_ready()  # at most two steps in flight
            previous = acc
            step += group
            done = step if data.steps is None else min(step, data.steps)
            self.progress = Progress(epoch, done, batch is None, acc)
            callbacks.on_train_batch_end(done - 1, LazyLogs(acc, self._decode))
            if model.stop_training:
                break
        return self._decode(acc)

    def evaluate(self, model, data, callbacks) -> dict[str, float]:
        callbacks.on_test_begin()
        batches = place_batches(data.batches(0), self.strategy)
        batch = next(batches)
        acc = self._fresh_statistics(model._state, batch)
        eval_fn = self._compile(self._eval_step, (acc, model._state, batch), P(),
                                donate_argnums=())
        previous = None
        step = 0
        while batch is not None:
            callbacks.on_test_batch_begin(step)
            acc = eval_fn(acc, model._state, batch)
            batch = next(batches, None)
            if previous is not None:
                previous.block_until_ready()
            previous = acc
            callbacks.on_test_batch_end(step, LazyLogs(acc, self._decode))
            step += 1
        values = self._decode(acc)
        callbacks.on_test_end(values)
        return values


def predict(strategy: MirroredStrategy, predict_fn, state, data, callbacks) -> Any:
    """Runs ``predict_fn`` over every batch; returns NumPy outputs for the real rows, in order.

    Outputs of step ``k - 1`` are copied to the host after step ``k`` is dispatched, which
    is also the bound on steps in flight.
    """
    callbacks.on_predict_begin()
    outputs, pending = [], None
    for step, host in enumerate(data.batches(0)):
        callbacks.on_predict_batch_begin(step)
        y_pred = predict_fn(state, strategy.shard_batch(host.x))
        if pending is not None:
            outputs.append(_to_host(strategy, *pending))
            callbacks.on_predict_batch_end(step - 1)
        pending = (y_pred, int(host.mask.sum()))
    outputs.append(_to_host(strategy, *pending))
    callbacks.on_predict_batch_end(step)
    callbacks.on_predict_end()
    return jax.tree.map(lambda *parts: np.concatenate(parts), *outputs)


def _to_host(strategy: MirroredStrategy, y_pred, num_real: int):
    # All rows on every process: several processes all-gather them.
    return jax.tree.map(lambda a: a[:num_real], strategy.fetch(y_pred))
