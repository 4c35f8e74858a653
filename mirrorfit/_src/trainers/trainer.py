"""The trainer: ``fit``, its epochs with callbacks, progress and resume points.

`Trainer` adds training to `mirrorfit._src.trainers.step_loops.StepLoops` (the compiled
steps, placed batches, statistics, ``evaluate`` and ``predict``): after every train step the
model's state is the newest one, so an exception leaves the model at its last good state.

An epoch's logs are read (a wait for its last steps) after the next epoch's first batch of
in-memory arrays is gathered and placed, so the devices do not idle for that host work.

A source of unknown length ends an epoch when exhausted; one that runs dry before ``fit``
is done warns as Keras (`RAN_OUT_OF_DATA`) and stops training.

For fault tolerance, ``fit`` publishes its position (`Progress`) before each
``on_train_batch_end``, and a callback may call `Trainer.resume_from` in ``on_train_begin``
to continue mid-epoch (``BackupAndRestore`` does): `mirrorfit._src.callbacks.contract`.

With `TerminateOnNaN` (`wants_check_numerics`), ``fit`` runs train steps built with the check
on (`StepLoops.train_step_for`): their optimizer updates skip non-finite gradients and count
them in the statistics, which the host reads after each step (`non_finite_seen`) to stop
training there with one line (`NON_FINITE_GRADIENTS`).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

from mirrorfit._src.callbacks.callback import History, LazyLogs, chief_print
from mirrorfit._src.callbacks.contract import (
    ProgramTrap,
    Progress,
    ResumePoint,
    StepCost,
    TrainingLoop,
)
from mirrorfit._src.callbacks.stopping import TerminateOnNaN
from mirrorfit._src.distribute.batch import place_batches
from mirrorfit._src.distribute.mesh import DeviceMesh, InFlight
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.optimizers.loss_scale import LossScaleOptimizer
from mirrorfit._src.trainers import (
    audit,
    fingerprint,
    object_step,
    sharded_state,
    step_cost,
)
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.data_adapters import DataAdapter, input_fingerprint
from mirrorfit._src.trainers.step_family import StepConfig
from mirrorfit._src.trainers.step_loops import StepLoops
from mirrorfit._src.utils.checks import MirrorfitWarning

RAN_OUT_OF_DATA = (
    "Your input ran out of data; interrupting training. Make sure that your dataset or "
    "generator can generate at least `steps_per_epoch * epochs` batches. You may need to "
    "use the `.repeat()` function when building your dataset.")
"""Keras' warning when a source runs dry before ``fit`` is done (a `MirrorfitWarning`)."""

NON_FINITE_GRADIENTS = (
    "Epoch {epoch}, batch {batch}: non-finite gradients (NaN or inf) although the loss may be "
    "finite; the update was not applied, so the weights are those before this batch. "
    "Terminating training (TerminateOnNaN).")
"""Printed (chief) when ``fit`` with TerminateOnNaN stops at a non-finite gradient."""


def wants_check_numerics(callbacks: Iterable[Any], config: StepConfig) -> bool:
    """Whether ``fit`` checks gradients in the step: with a `TerminateOnNaN` among
    ``callbacks``, and not under loss scaling (which skips non-finite steps and lowers its
    scale instead)."""
    return (any(isinstance(cb, TerminateOnNaN) for cb in callbacks)
            and not isinstance(config.optimizer, LossScaleOptimizer))


def non_finite_seen(layout: stats_lib.StatsLayout, statistics: np.ndarray) -> bool:
    """Whether a train step of this epoch had non-finite gradients.

    Args:
        layout: the train statistics' layout.
        statistics: the epoch's statistics vector, on the host.
    """
    return float(layout.unflatten(statistics).get(stats_lib.NON_FINITE, 0.0)) > 0


def stop_message(epoch: int, done: int, group: int) -> str:
    """`NON_FINITE_GRADIENTS` for the (0-based) ``epoch`` after ``done`` batches run
    ``group`` at a time: the batch, or the range of the group it was in."""
    batch = done - 1 if group == 1 else f"in {done - min(group, done)}..{done - 1}"
    return NON_FINITE_GRADIENTS.format(epoch=epoch + 1, batch=batch)



class Trainer(StepLoops, TrainingLoop):
    """The loops of one model: ``predict`` always, ``fit``/``evaluate`` once configured.

    It implements `TrainingLoop`, the part of it callbacks use (``model.trainer``); the
    compiled steps, ``evaluate`` and ``predict`` are those of `StepLoops`.

    Args:
        strategy: the strategy (a `DeviceMesh`) whose mesh the steps run on.
        adapter, predict_step: as `StepLoops`.

    Attributes:
        progress: `Progress` after the newest train step of ``fit``; ``None`` outside it.
        train_data: the training data adapter of the running ``fit``; ``None`` outside it.
        train_fn: the newest compiled train step ``(state, statistics, batch)``.
    """

    def __init__(self, strategy: DeviceMesh, adapter: ModuleAdapter, predict_step: Callable):
        super().__init__(strategy, adapter, predict_step)
        self.progress: Progress | None = None
        self.train_data: DataAdapter | None = None
        self.train_fn: Callable | None = None
        # The model train_fn last trained, and `step_cost.shapes_of` its statistics and batch.
        self._train_call: tuple[Any, Any] | None = None
        self._resume_point: ResumePoint | None = None
        self.check_numerics = False  # this fit's steps check gradients (TerminateOnNaN)

    def resume_from(self, point: ResumePoint) -> None:
        """Makes the running ``fit`` start at ``point``; call it in ``on_train_begin``."""
        self._resume_point = point

    def fingerprints(self) -> dict[str, Any]:
        """The running ``fit`` 's data and compile fingerprints, JSON
        (`mirrorfit._src.trainers.fingerprint`)."""
        data = self.train_data
        return {"data": None if data is None else fingerprint.data_fingerprint(data),
                "compile": fingerprint.compile_fingerprint(self.config)}

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """The running ``fit`` 's row order in ``epoch`` (``None``: in order, or no fixed order)."""
        return None if self.train_data is None else self.train_data.epoch_order(epoch)

    def train_step_cost(self) -> StepCost:
        """`StepCost` of one train step of the running ``fit``, from the compiled step
        (`mirrorfit._src.trainers.step_cost`); call it after the first train call.

        Raises:
            RuntimeError: before any train step of ``fit`` has been compiled.
        """
        shapes = self._train_shapes
        if self.train_fn is None or shapes is None or self.config is None:
            raise RuntimeError("train_step_cost() reads the compiled train step: call it in "
                               "fit after the first train step (on_train_batch_end or later). "
                               "Received: a call before any train step was compiled")
        family = self.config.family
        single = (sharded_state.on_param_blocks(  # sharded params: as the fused steps get them
            self.strategy, family.train_step(self.config), shapes[0], "train",
            family.takes_param_blocks) if self.steps_per_execution > 1 else None)
        return step_cost.step_cost(self.strategy, self.train_fn, shapes, single)

    def audit_train_step(self, platform: str | None = None) -> list[ProgramTrap]:
        """`ProgramTrap` s of the running ``fit`` 's train step (`mirrorfit._src.trainers.audit`)."""
        return audit.program_traps(audit.train_step_program(self), platform)

    @property
    def _train_shapes(self) -> Any:
        """`step_cost.shapes_of` train_fn's newest ``(state, statistics, batch)``, ``None``
        before; the state's as the model holds it now (a step keeps its shapes and
        shardings), read only when asked: a walk over every state leaf."""
        call = self._train_call
        return None if call is None else (step_cost.shapes_of(call[0].state), *call[1])

    def _epoch_start(self, data: DataAdapter, epoch: int, point: ResumePoint | None = None):
        """``(`_placed` batches of ``epoch`` from ``point`` on, the first of them or None)``."""
        batches = self._placed(data, epoch, 0 if point is None else point.step,
                               self.steps_per_execution)
        return batches, next(batches, None)


    def fit(self, model, train: DataAdapter, *, epochs: int, initial_epoch: int, callbacks,
            verbose: int, validation: DataAdapter | None = None, validation_freq: int = 1
            ) -> History:
        """Runs epochs ``initial_epoch .. epochs - 1`` of training, validating as asked.

        Args:
            model: the `Model` whose ``state`` is trained (written after every step).
            train: the training data (its ``steps`` per epoch may be ``None``: unknown).
            epochs: index of the last epoch + 1.
            initial_epoch: first epoch, unless a callback calls `resume_from`.
            callbacks: the user's callbacks, or ``None``.
            verbose: 0 silent, 1 progress bar, 2 one line per epoch.
            validation: the data evaluated after every ``validation_freq`` epochs.
            validation_freq: epochs between validations.

        Returns:
            The `History` of this fit (also set as ``model.history``).
        """
        # Several processes: fail fast, before any collective, unless all train alike.
        self.strategy.check_same_across_processes({
            "global batch_size": train.batch_size,
            "steps per epoch": train.steps, "epochs": epochs, **input_fingerprint(train),
            "input shapes": model.input_spec,
            "param shapes": jax.tree.map(lambda a: tuple(a.shape), model.params)})
        history = History()
        callback_list = self.callback_list(model, callbacks, verbose=verbose, steps=train.steps,
                                           epochs=epochs, history=history,
                                           batch_size=train.batch_size)
        if self.config is not None and train.steps is not None:
            unapplied = sharded_state.no_update_warning(
                self.config.optimizer, model.opt_state, train.steps * (epochs - initial_epoch))
            if unapplied is not None:
                warnings.warn(unapplied, MirrorfitWarning, stacklevel=3)
        # TerminateOnNaN: this fit's steps check their updates' gradients (a step flag).
        self.check_numerics = (self.config is not None
                               and wants_check_numerics(callback_list, self.config))
        model.stop_training = False
        model.history = history
        self._warned = set()
        self.train_data, self._resume_point = train, None
        upcoming = None  # in-memory arrays: the next epoch's `_epoch_start`, read ahead
        try:
            if self.runs_objects:
                # Before on_train_begin: a restore there needs the whole state.
                upcoming = self._epoch_start(train, initial_epoch)
                if upcoming[1] is not None:
                    self.symbolic_build(model, upcoming[1])
            callback_list.on_train_begin()
            resume, self._resume_point = self._resume_point, None
            if resume is not None and upcoming is not None:  # read for another position
                upcoming[0].close()
                upcoming = None
            first = initial_epoch if resume is None else resume.epoch
            logs: dict[str, float] = {}
            for epoch in range(first, epochs):
                point = resume if epoch == first else None
                placed, batch = upcoming or self._epoch_start(train, epoch, point)
                with contextlib.closing(placed) as batches:
                    if batch is None:  # a one-shot source ran dry at an epoch boundary
                        warnings.warn(RAN_OUT_OF_DATA, MirrorfitWarning, stacklevel=3)
                        break
                    callback_list.on_epoch_begin(epoch)
                    ahead = (functools.partial(self._epoch_start, train, epoch + 1)
                             if train.arrays() is not None and epoch + 1 < epochs else None)
                    logs, done, upcoming = self._train_epoch(model, train, epoch, callback_list,
                                                             batches, batch, point, ahead)
                if train.steps is None and history.params["steps"] is None:
                    history.params["steps"] = done  # learned (params are shared by every
                    #                                 callback): later bars have a total
                elif train.steps is not None and done < train.steps and not model.stop_training:
                    warnings.warn(RAN_OUT_OF_DATA, MirrorfitWarning, stacklevel=3)
                    model.stop_training = True
                if validation is not None and (epoch + 1 - initial_epoch) % validation_freq == 0:
                    val_logs = self.evaluate(model, validation, callback_list)
                    logs.update({f"val_{k}": v for k, v in val_logs.items()})
                callback_list.on_epoch_end(epoch, logs)
                if model.stop_training:
                    break
            if first < epochs:  # as Keras: an optimizer with use_ema ends with the EMA weights
                state = model.state
                model.state = state._replace(params=sharded_state.finalized(self.strategy, state))
            callback_list.on_train_end(logs)
        except BaseException as error:  # a crash or an interrupt: callbacks close their runs
            callback_list.on_train_error(error)
            raise
        finally:
            if upcoming is not None:  # read ahead for an epoch that did not run
                upcoming[0].close()
            self.train_data = self.progress = None
        return history

    def _train_epoch(self, model, data, epoch, callbacks, batches, batch,
                     resume: ResumePoint | None = None, ahead: Callable | None = None
                     ) -> tuple[dict[str, float], int, Any]:
        """One epoch from its first placed ``batch``; returns its logs, steps done and what
        ``ahead()`` returned (``None`` without it, or once training stops)."""
        group = self.steps_per_execution
        step = 0 if resume is None else resume.step
        statistics = self._fresh_statistics(model.state, batch,
                                            check_numerics=self.check_numerics)
        train_fn = self.train_fn = self._compiled_train_step(model.state, statistics, batch,
                                                             self.check_numerics)
        self._train_call = model, step_cost.shapes_of((statistics, batch))
        if resume is not None and resume.restore_statistics is not None:
            statistics = self.strategy.replicate_arrays(
                resume.restore_statistics(self._layouts["train"][1]))
        in_flight = InFlight()
        while batch is not None:
            callbacks.on_train_batch_begin(step)
            model.state, statistics = train_fn(model.state, statistics, batch)
            batch = next(batches, None)  # the next transfer overlaps this step
            in_flight.push(statistics)
            step += group
            done = step if data.steps is None else min(step, data.steps)
            self.progress = Progress(epoch, done, batch is None, statistics)
            check = self.check_numerics
            logged = self.strategy.fetch(statistics) if check else statistics  # one host read
            if check and non_finite_seen(self._layouts["train"][0], logged):
                chief_print(stop_message(epoch, done, group))
                model.stop_training = True
            callbacks.on_train_batch_end(done - 1, LazyLogs(logged, self._decode))
            if model.stop_training:
                break
        if batch is None:  # exhausted: the steps the source really gave (no group fillers)
            step = data.steps_seen
        # The next epoch's first batch is gathered and placed while the last steps run:
        # reading the logs waits for them, and the devices would idle for that host work.
        upcoming = ahead() if ahead is not None and not model.stop_training else None
        done = step if data.steps is None else min(step, data.steps)
        return self._decode(statistics), done, upcoming

    @property
    def runs_objects(self) -> bool:
        """Whether the compiled step runs the model's own step on objects (`ObjectStep`),
        whose other variables `symbolic_build` finds."""
        return self.config is not None and self.config.family.runs_objects

    def symbolic_build(self, model, batch) -> None:
        """Traces one train step on ``batch`` 's shapes (the statistics' layout) and makes the
        model carry every other variable its own ``train_step`` reads or assigns (another
        optimizer's state, built by that trace: `TrainState.other_variables`), as Keras'
        symbolic build creates what the step will update before it runs."""
        with object_step.discovering() as found:
            self._fresh_statistics(model.state, batch, check_numerics=self.check_numerics)
        if found:
            model._carry(found)

    def train_on_batch(self, model, data: DataAdapter) -> dict[str, float]:
        """One train step on the one batch of ``data`` (``Model.train_on_batch``); its logs.

        The step is the one ``fit`` compiles, so calls with the same shapes never recompile.
        """
        group = self.steps_per_execution
        batch = next(place_batches(data.batches(0, group=group), self.strategy,
                                   stacked=group > 1))
        if self.runs_objects:
            self.symbolic_build(model, batch)
        self.check_numerics = False
        statistics = self._fresh_statistics(model.state, batch)
        train_fn = self._compiled_train_step(model.state, statistics, batch)
        model.state, statistics = train_fn(model.state, statistics, batch)
        return self._decode(statistics)

