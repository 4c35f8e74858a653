"""The trainer: fit/evaluate/predict loops, callbacks and progress, over compiled steps.

It owns the host side of training. Every loop places the next batch on the devices while
the current step runs (on one device, a small or aligned batch is passed to the step as
NumPy, whose call transfers it more cheaply: `mirrorfit._src.distribute.batch.takes_host_batch`),
compiles its step through `compile_per_replica` (the one compile path ``strategy.run`` uses
too), and pushes each step's outputs to an `InFlight` bound, so at most two steps are
queued: on the CPU backend with several devices, XLA's in-process all-reduce deadlocks when
many collective executions are queued ("Termination timeout for all reduce").

A source that runs user code (a generator, ``__getitem__``, a loader) is run ahead on a
background thread (`mirrorfit._src.trainers.prefetch`). Arrays are gathered and placed on the
calling thread right after the step is dispatched, which overlaps the step as well (a thread
was 6-14% slower at one device: ``benchmarks/README.md``).

A source of unknown length ends an epoch when exhausted; one that runs dry before ``fit``
is done warns as Keras (`RAN_OUT_OF_DATA`) and stops training.

Metric statistics accumulate on the devices; the host reads them only when they are shown
(a progress-bar refresh, an epoch end). After every step the model's state is the newest
one, so an exception leaves the model at its last good state.

For fault tolerance, ``fit`` publishes its position (`Progress`) before each
``on_train_batch_end``, and a callback may call `Trainer.resume_from` in ``on_train_begin``
to continue mid-epoch (``BackupAndRestore`` does): `mirrorfit._src.callbacks.contract`.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from mirrorfit._src.callbacks.callback import (
    Callback,
    CallbackList,
    History,
    LazyLogs,
    checked_callbacks,
    chief_print,
)
from mirrorfit._src.callbacks.contract import Progress, ResumePoint, StepCost, TrainingLoop
from mirrorfit._src.callbacks.progbar import ProgbarLogger
from mirrorfit._src.distribute.batch import Batch, place_batches
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh, InFlight
from mirrorfit._src.distribute.run import compile_per_replica, specs_like
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.trainers import (
    fingerprint,
    numerics,
    resident,
    shape_cache,
    sharded_state,
    step_cost,
)
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.data_adapters import DataAdapter, input_fingerprint
from mirrorfit._src.trainers.prefetch import prefetch
from mirrorfit._src.trainers.step_family import StepConfig
from mirrorfit._src.utils.checks import MirrorfitWarning

RAN_OUT_OF_DATA = (
    "Your input ran out of data; interrupting training. Make sure that your dataset or "
    "generator can generate at least `steps_per_epoch * epochs` batches. You may need to "
    "use the `.repeat()` function when building your dataset.")
"""Keras' warning when a source runs dry before ``fit`` is done (a `MirrorfitWarning`)."""


class Trainer(TrainingLoop):
    """The loops of one model: ``predict`` always, ``fit``/``evaluate`` once configured.

    It implements `TrainingLoop`, the part of it callbacks use (``model.trainer``).

    Args:
        strategy: the strategy (a `DeviceMesh`) whose mesh the steps run on.
        adapter, predict_step: the module's adapter, ``predict``'s ``(state, batch) -> y``.

    Attributes:
        config: the steps' loss, metrics, optimizer and step family (`configure`),
            ``None`` before.
        steps_per_execution: train steps fused into one device call (``lax.scan``).
        progress: `Progress` after the newest train step of ``fit``; ``None`` outside it.
        train_data: the training data adapter of the running ``fit``; ``None`` outside it.
        train_fn: the newest compiled train step ``(state, statistics, batch)``.
        prefetch: whether a thread produces and places the next batches of a source that runs
            user code while a step runs (`prefetch`); ``False``: between steps. Not for arrays.
    """

    def __init__(self, strategy: DeviceMesh, adapter: ModuleAdapter, predict_step: Callable):
        self.strategy = strategy
        self.adapter = adapter
        self.config: StepConfig | None = None
        self.steps_per_execution = 1
        self.progress: Progress | None = None
        self.train_data: DataAdapter | None = None
        self.train_fn: Callable | None = None
        self.prefetch = True
        self._train_shapes: Any = None  # `step_cost.shapes_of` train_fn's newest arguments
        self._resume_point: ResumePoint | None = None
        # Per step kind ("train", "eval"): the statistics layout and its zero vector. The two
        # differ only for a model that overrides train_step or test_step.
        self._layouts: dict[str, tuple[stats_lib.StatsLayout, np.ndarray]] = {}
        self._warned: set[str] = set()
        self._train_step: Callable | None = None
        self._eval_step: Callable | None = None
        self._predict_step = resident.accepting_indices(predict_step)
        # A PerShapeStep per step and argument structure (with or without sample weights).
        self._compiled: dict[Any, Callable] = {}

    def configure(self, config: StepConfig, steps_per_execution: int = 1) -> None:
        """Sets the loss, metrics, optimizer and step family (``compile``); later fits
        compile anew. Every train and eval step is built by ``config.family``."""
        self.config = config = sharded_state.configured(config, self.strategy)
        self.steps_per_execution = steps_per_execution
        self._layouts = {}
        self._warned = set()
        self._compiled = {key: fn for key, fn in self._compiled.items()
                          if key[0] is self._predict_step}
        self._train_step = resident.accepting_indices(
            config.family.multi_train_step(config) if steps_per_execution > 1
            else config.family.train_step(config))
        self._eval_step = resident.accepting_indices(config.family.eval_step(config))

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
        if self.train_fn is None or self._train_shapes is None or self.config is None:
            raise RuntimeError("train_step_cost() reads the compiled train step: call it in "
                               "fit after the first train step (on_train_batch_end or later). "
                               "Received: a call before any train step was compiled")
        single = (self.config.family.train_step(self.config) if self.steps_per_execution > 1
                  else None)
        return step_cost.step_cost(self.strategy, self.train_fn, self._train_shapes, single)

    def callback_list(self, model, callbacks: Sequence[Callback] | None, *, verbose: int,
                      steps: int | None, epochs: int = 1, history: History | None = None,
                      batch_size: int | None = None) -> CallbackList:
        """The callbacks of one loop: the user's, then ``history``, then a progress bar.

        Their ``params`` are ``epochs``, ``steps`` (per epoch), ``verbose`` and
        ``batch_size`` (``fit``'s global batch; ``None`` for a source of batches, and in
        ``evaluate`` and ``predict``).

        History comes after the user's callbacks, as in Keras, so it records what they add
        to the epoch logs (e.g. ``learning_rate``). A progress bar is added for
        ``verbose=1`` (and ``verbose=2`` in ``fit``) unless the user passed one.
        """
        cbs = checked_callbacks(callbacks)
        if history is not None:
            cbs.append(history)
        wants_bar = verbose == 1 or (verbose == 2 and history is not None)
        if wants_bar and not any(isinstance(cb, ProgbarLogger) for cb in cbs):
            cbs.append(ProgbarLogger(verbose))
        return CallbackList(cbs, model=model, params={"epochs": epochs, "steps": steps,
                                                      "verbose": verbose,
                                                      "batch_size": batch_size})

    # -- statistics -----------------------------------------------------------------------

    def _fresh_statistics(self, state, batch: Batch, kind: str = "train"):
        """The first statistics (float32 vector, mirrored) of ``kind`` steps on such batches."""
        assert self.config is not None  # set by configure (compile)
        if kind not in self._layouts:
            sample = resident.batch_shapes(batch)  # a resident batch: its gathered shapes
            if self.steps_per_execution > 1 and batch.mask.ndim == 2:
                # Shapes only: slicing the placed arrays would compile eager ops.
                sample = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), sample)
            layout = stats_lib.StatsLayout.from_shapes(
                self.config.family.statistics_shapes(self.config, state, sample, kind))
            self._layouts[kind] = (layout, np.zeros(layout.size, np.float32))
        return self.strategy.replicate_arrays(self.config.family.initial_statistics(
            self.config, self._layouts[kind][0], kind))

    def _decode(self, statistics, kind: str = "train") -> dict[str, Any]:
        """Metric values (Python floats, loss first) from a statistics snapshot.

        A metric with one value per class or threshold (e.g. ``F1Score(average=None)``)
        gives a NumPy array, as Keras does.
        """
        assert self.config is not None  # set by configure (compile)
        stats = self._layouts[kind][0].unflatten(np.asarray(self.strategy.fetch(statistics)))
        for key, message in stats_lib.statistics_warnings(self.config, stats).items():
            if key not in self._warned:  # once per fit (and per compile outside fit)
                self._warned.add(key)
                warnings.warn(message, MirrorfitWarning, stacklevel=5)
        return {key: float(value) if np.ndim(value) == 0 else np.asarray(value)
                for key, value in self.config.family.results(self.config, stats, kind).items()}

    def _compiled_step(self, step: Callable, example_args: tuple, out_specs: Any, *,
                       donate_argnums: int | tuple[int, ...] = ()) -> Callable:
        key = (step, jax.tree.structure(example_args))
        if key not in self._compiled:  # compiles once per input shape (shape_cache)
            kind = {id(self._train_step): "train", id(self._eval_step): "eval"}.get(id(step))
            self._compiled[key] = shape_cache.PerShapeStep(compile_per_replica(
                self.strategy, step, specs_like(self.strategy, example_args), out_specs,
                donate_argnums=donate_argnums), kind or "predict", lambda: self._warned)
        return self._compiled[key]

    # -- loops ----------------------------------------------------------------------------

    def _placed(self, data: DataAdapter, epoch: int = 0, start_step: int = 0, group: int = 1):
        """The epoch's batches placed on the mesh (ahead, on the prefetch thread for a source
        that runs user code; index batches of a resident data set); close it after use."""
        placed = (data.resident.batches(epoch, start_step, group) if data.resident is not None
                  else place_batches(data.batches(epoch, start_step=start_step, group=group),
                                     self.strategy, stacked=group > 1, local=data.local_rows))
        return contextlib.closing(prefetch(placed, self.prefetch and data.runs_user_code))

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
        if self.config is not None:  # TerminateOnNaN: check gradients inside the step
            checked = numerics.wants_check_numerics(callback_list, self.config)
            if self.config.check_numerics != checked:
                self.configure(self.config._replace(check_numerics=checked),
                               self.steps_per_execution)
        model.stop_training = False
        model.history = history
        self._warned = set()
        self.train_data, self._resume_point = train, None
        try:
            callback_list.on_train_begin()
            resume, self._resume_point = self._resume_point, None
            first = initial_epoch if resume is None else resume.epoch
            logs: dict[str, float] = {}
            for epoch in range(first, epochs):
                point = resume if epoch == first else None
                with self._placed(train, epoch, 0 if point is None else point.step,
                                  self.steps_per_execution) as batches:
                    batch = next(batches, None)
                    if batch is None:  # a one-shot source ran dry at an epoch boundary
                        warnings.warn(RAN_OUT_OF_DATA, MirrorfitWarning, stacklevel=3)
                        break
                    callback_list.on_epoch_begin(epoch)
                    logs, done = self._train_epoch(model, train, epoch, callback_list,
                                                   batches, batch, point)
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
            self.train_data = self.progress = None
        return history

    def _train_epoch(self, model, data, epoch, callbacks, batches, batch,
                     resume: ResumePoint | None = None) -> tuple[dict[str, float], int]:
        """One epoch from its first placed ``batch``; returns its logs and steps done."""
        group = self.steps_per_execution
        step = 0 if resume is None else resume.step
        statistics = self._fresh_statistics(model.state, batch)
        assert self._train_step is not None  # set by configure (compile)
        train_fn = self.train_fn = self._compiled_step(
            self._train_step, (model.state, statistics, batch),
            (sharded_state.state_out_specs(self.strategy, model.state), P()), donate_argnums=0)
        self._train_shapes = step_cost.shapes_of((model.state, statistics, batch))
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
            check = self.config is not None and self.config.check_numerics
            logged = self.strategy.fetch(statistics) if check else statistics  # one host read
            if check and numerics.non_finite_seen(self._layouts["train"][0], logged):
                chief_print(numerics.stop_message(epoch, done, group))
                model.stop_training = True
            callbacks.on_train_batch_end(done - 1, LazyLogs(logged, self._decode))
            if model.stop_training:
                break
        if batch is None:  # exhausted: the steps the source really gave (no group fillers)
            step = data.steps_seen
        return self._decode(statistics), step if data.steps is None else min(step, data.steps)

    def train_on_batch(self, model, data: DataAdapter) -> dict[str, float]:
        """One train step on the one batch of ``data`` (``Model.train_on_batch``); its logs.

        The step is the one ``fit`` compiles, so calls with the same shapes never recompile.
        """
        group = self.steps_per_execution
        batch = next(place_batches(data.batches(0, group=group), self.strategy,
                                   stacked=group > 1))
        statistics = self._fresh_statistics(model.state, batch)
        assert self._train_step is not None  # set by configure (compile)
        train_fn = self._compiled_step(
            self._train_step, (model.state, statistics, batch),
            (sharded_state.state_out_specs(self.strategy, model.state), P()), donate_argnums=0)
        model.state, statistics = train_fn(model.state, statistics, batch)
        return self._decode(statistics)

    def evaluate(self, model, data: DataAdapter, callbacks: CallbackList) -> dict[str, float]:
        """Loss and metrics over every batch of ``data``, in order.

        Args:
            model: the `Model` whose ``state`` is evaluated (not changed).
            data: the data to evaluate.
            callbacks: the loop's `CallbackList` (``on_test_*`` hooks).

        Returns:
            ``{"loss": ..., metric: ...}`` as Python floats, exact over the real rows.
        """
        callbacks.on_test_begin()
        with self._placed(data) as batches:
            batch = _first(batches, data)
            statistics = self._fresh_statistics(model.state, batch, "eval")
            assert self._eval_step is not None  # set by configure (compile)
            eval_fn = self._compiled_step(self._eval_step, (model.state, statistics, batch), P())
            in_flight = InFlight()
            step = 0
            while batch is not None:
                callbacks.on_test_batch_begin(step)
                statistics = eval_fn(model.state, statistics, batch)
                batch = next(batches, None)
                in_flight.push(statistics)
                callbacks.on_test_batch_end(
                    step, LazyLogs(statistics, lambda stats: self._decode(stats, "eval")))
                step += 1
        values = self._decode(statistics, "eval")
        callbacks.on_test_end(values)
        return values

    def predict(self, model, data: DataAdapter, callbacks: CallbackList) -> Any:
        """Model outputs for the real rows of every batch of ``data``, in order, as NumPy.

        Outputs of step ``k - 1`` are copied to the host after step ``k`` is dispatched.

        Args:
            model: the `Model` whose ``state`` predicts.
            data: the inputs (batches without targets).
            callbacks: the loop's `CallbackList` (``on_predict_*`` hooks).

        Returns:
            The module's output pytree with NumPy leaves ``[num_examples, ...]``.
        """
        callbacks.on_predict_begin()
        predict_fn = None
        in_flight = InFlight()
        outputs = []
        masks: list[Any] = [None, None]  # (device mask, host copy): full batches share one
        step = -1
        with self._placed(data) as batches:
            for step, batch in enumerate(batches):
                if predict_fn is None:
                    predict_fn = self._compiled_step(self._predict_step, (model.state, batch),
                                                     P(BATCH_AXIS))
                callbacks.on_predict_batch_begin(step)
                ready = in_flight.push((predict_fn(model.state, batch), batch.mask))
                if ready is not None:
                    outputs.append(self._to_host(*ready, masks=masks))
                    callbacks.on_predict_batch_end(step - 1)
        if step < 0:
            _first(iter(()), data)
        outputs.append(self._to_host(*in_flight.push(None), masks=masks))
        callbacks.on_predict_batch_end(step)
        callbacks.on_predict_end()
        return jax.tree.map(lambda *parts: np.concatenate(parts), *outputs)

    def _to_host(self, y_pred, mask, masks: list[Any]):
        # All rows on every process: several processes all-gather them, and the mask, which
        # marks the padding (in the middle of the batch when each process placed its rows).
        # One process fetches the mask once per distinct array (`masks` caches the last one);
        # several always fetch it, since the all-gather is collective and the processes'
        # masks need not repeat at the same batches.
        if mask is not masks[0] or jax.process_count() > 1:
            masks[:] = mask, self.strategy.fetch(mask)
        return jax.tree.map(lambda a: a[masks[1]], self.strategy.fetch(y_pred))


def _first(batches, data: DataAdapter) -> Batch:
    """The first batch of ``batches``.

    Raises:
        ValueError: if there is none (a one-shot source that an earlier loop used up).
    """
    batch = next(batches, None)
    if batch is None:
        raise ValueError("The input yielded no batch: a generator or iterator can be used "
                         "only once; pass a new one, or a re-iterable (list, PyDataset, "
                         f"dataset). Received: an exhausted {data.kind}")
    return batch

