"""The loops that only run steps (``evaluate``, ``predict``), and what every loop shares.

`StepLoops` is the base of `mirrorfit._src.trainers.trainer.Trainer`, which adds ``fit``. It
owns the model's compiled steps and the host side of running them. Every loop places the next
batch on the devices while the current step runs (on one device, a small or aligned batch is
passed to the step as NumPy, whose call transfers it more cheaply:
`mirrorfit._src.distribute.batch.takes_host_batch`), compiles its step through
`compile_per_replica` (the one compile path ``strategy.run`` uses too), once per input shape
(`PerShapeStep`, which warns past `MANY_SHAPES` shapes), and pushes each step's outputs to an `InFlight`
bound, so at most two steps are queued: on the CPU backend with several devices, XLA's
in-process all-reduce deadlocks when many collective executions are queued ("Termination
timeout for all reduce").

A source that runs user code (a generator, ``__getitem__``, a loader) is run ahead on a
background thread (`mirrorfit._src.trainers.prefetch`). Arrays are gathered and placed on the
calling thread right after the step is dispatched, which overlaps the step as well (a thread
was 6-14% slower at one device: ``benchmarks/README.md``).

Metric statistics accumulate on the devices; the host reads them only when they are shown
(a progress-bar refresh, an epoch end), decoding them into logs with the layout of their step
kind (`_decode`), and warns of what they counted once per ``fit`` (or per ``compile``).
"""

from __future__ import annotations

import contextlib
import functools
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
)
from mirrorfit._src.callbacks.progbar import ProgbarLogger
from mirrorfit._src.distribute.batch import Batch, place_batches
from mirrorfit._src.distribute.mesh import BATCH_AXIS, DeviceMesh, InFlight
from mirrorfit._src.distribute.replica_context import get_replica_context, replica_context
from mirrorfit._src.distribute.run import compile_per_replica, specs_like
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.trainers import resident, sharded_state
from mirrorfit._src.trainers import statistics as stats_lib
from mirrorfit._src.trainers.data_adapters import DataAdapter
from mirrorfit._src.trainers.prefetch import prefetch
from mirrorfit._src.trainers.resident import ResidentBatch
from mirrorfit._src.trainers.step_family import StepConfig
from mirrorfit._src.utils.checks import MirrorfitWarning

MANY_SHAPES = 4  # distinct input shapes of one step past which a fit warns

MANY_SHAPES_WARNING = (
    "The {kind} step has compiled for {count} distinct input shapes (per-example shapes "
    "{shapes}, ...): each new shape compiles the step again, which takes seconds. Pad the "
    "sequences to a few bucket lengths (e.g. mirrorfit.utils.pad_sequences(..., maxlen=L) "
    "for each bucket L) so that few shapes reach the model.")


def _input_shapes(batch: Batch | ResidentBatch) -> tuple[Any, ...]:
    # A resident data set's rows all have the stored arrays' (one) shape.
    x = batch.arrays.x if isinstance(batch, ResidentBatch) else batch.x
    return tuple(getattr(leaf, "shape", None) for leaf in jax.tree.leaves(x))


class PerShapeStep:
    """A compiled step ``fn(*args)`` whose last argument is a `Batch`; it records the input
    shapes it has run on (each one compile of ``fn``).

    Args:
        fn: the compiled (``jax.jit``) step.
        kind: ``"train"``, ``"eval"`` or ``"predict"``, for the warning.
        warned: the trainer's set of warning keys of the running ``fit`` (a warning is
            given once per fit).
    """

    def __init__(self, fn: Callable[..., Any], kind: str,
                 warned: Callable[[], set[str]]) -> None:
        self.fn = fn
        self.kind = kind
        self.shapes: list[tuple[Any, ...]] = []  # the distinct batch input shapes, in order
        self._warned = warned
        self._last: tuple[Any, ...] | None = None

    def __call__(self, *args: Any) -> Any:
        shapes = _input_shapes(args[-1])
        if shapes != self._last:  # cheap on the common path: one shape for every batch
            self._last = shapes
            if shapes not in self.shapes:
                self.shapes.append(shapes)
                self._maybe_warn()
        return self.fn(*args)

    def _maybe_warn(self) -> None:
        key = f"many_shapes_{self.kind}"
        warned = self._warned()
        if len(self.shapes) > MANY_SHAPES and key not in warned:
            warned.add(key)
            examples = [[s[1:] for s in shapes] for shapes in self.shapes[:3]]
            warnings.warn(MANY_SHAPES_WARNING.format(kind=self.kind, count=len(self.shapes),
                                                     shapes=examples),
                          MirrorfitWarning, stacklevel=4)

    def compile_count(self) -> int:
        """How many programs ``fn`` has compiled (``jax.jit`` 's cache entries)."""
        return self.fn._cache_size()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        # The rest of ``jax.jit`` 's surface (``lower``, ``_cache_size``, ...) is ``fn`` 's.
        if name == "fn":  # not set yet (an object being copied): no recursion
            raise AttributeError(name)
        return getattr(self.fn, name)


class StepLoops:
    """A model's compiled steps, and the loops that only run them: ``evaluate``, ``predict``.

    Args:
        strategy: the strategy (a `DeviceMesh`) whose mesh the steps run on.
        adapter, predict_step: the module's adapter, ``predict``'s ``(state, batch) -> y``.

    Attributes:
        config: the steps' loss, metrics, optimizer and step family (`configure`),
            ``None`` before.
        steps_per_execution: train steps fused into one device call (``lax.scan``).
        prefetch: whether a thread produces and places the next batches of a source that runs
            user code while a step runs (`prefetch`); ``False``: between steps. Not for arrays.
    """

    def __init__(self, strategy: DeviceMesh, adapter: ModuleAdapter, predict_step: Callable):
        self.strategy = strategy
        self.adapter = adapter
        self.config: StepConfig | None = None
        self.steps_per_execution = 1
        self.prefetch = True
        # Per step kind ("train", "eval"): the statistics layout and its zero vector. The two
        # differ only for a model that overrides train_step or test_step.
        # (layout, zeros, whether the train steps count non-finite updates).
        self._layouts: dict[str, tuple[stats_lib.StatsLayout, np.ndarray, bool]] = {}
        # Per step kind: the newest first statistics, on the host and mirrored. Every epoch
        # (and evaluate) of a built-in step starts from the same zeros: placed once.
        self._initial: dict[str, tuple[np.ndarray, jax.Array]] = {}
        self._warned: set[str] = set()
        # The train step per check_numerics flag (`train_step_for`), built on first use.
        self._train_steps: dict[bool, Callable] = {}
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
        self._initial = {}
        self._warned = set()
        self._compiled = {key: fn for key, fn in self._compiled.items()
                          if key[0] is self._predict_step}
        self._train_steps = {}
        self._eval_step = resident.accepting_indices(config.family.eval_step(config))

    def train_step_for(self, check_numerics: bool = False) -> Callable:
        """The train step (one, or ``steps_per_execution`` fused), built once per flag:
        with ``check_numerics`` (``fit`` with `mirrorfit.callbacks.TerminateOnNaN`) every
        optimizer update in it skips non-finite gradients and reports them in the
        statistics (the step's replica context carries the flag: `checking`)."""
        assert self.config is not None  # set by configure (compile)
        if check_numerics not in self._train_steps:
            config = self.config._replace(check_numerics=check_numerics)
            family = config.family
            step = (family.multi_train_step(config) if self.steps_per_execution > 1
                    else family.train_step(config))
            self._train_steps[check_numerics] = resident.accepting_indices(
                checking(step, check_numerics))
        return self._train_steps[check_numerics]

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

    def _fresh_statistics(self, state, batch: Batch, kind: str = "train",
                          check_numerics: bool = False):
        """The first statistics (float32 vector, mirrored) of ``kind`` steps on such batches
        (train steps with ``check_numerics`` count non-finite updates too)."""
        assert self.config is not None  # set by configure (compile)
        config = self.config._replace(check_numerics=check_numerics and kind == "train")
        if kind not in self._layouts or self._layouts[kind][2] != config.check_numerics:
            sample = resident.batch_shapes(batch)  # a resident batch: its gathered shapes
            if self.steps_per_execution > 1 and batch.mask.ndim == 2:
                # Shapes only: slicing the placed arrays would compile eager ops.
                sample = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), sample)
            layout = stats_lib.StatsLayout.from_shapes(config.family.statistics_shapes(
                config, sharded_state.whole_params(self.strategy, state), sample, kind))
            self._layouts[kind] = (layout, np.zeros(layout.size, np.float32),
                                   config.check_numerics)
        host = config.family.initial_statistics(config, self._layouts[kind][0], kind)
        placed = self._initial.get(kind)
        if placed is None or placed[0].tobytes() != host.tobytes():  # no step donates them
            placed = self._initial[kind] = host, self.strategy.replicate_arrays(host)
        return placed[1]

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
        """The compiled ``step`` for arguments like ``example_args``; ``out_specs`` may be a
        function that returns them, called only to compile."""
        key = (step, jax.tree.structure(example_args))
        if key not in self._compiled:  # compiles once per input shape (PerShapeStep)
            kinds = {id(self._eval_step): "eval",
                     **{id(fn): "train" for fn in self._train_steps.values()}}
            kind = kinds.get(id(step)) or "predict"
            blocks = kind == "train" and self.config is not None and (
                self.config.family.takes_param_blocks)
            self._compiled[key] = PerShapeStep(compile_per_replica(
                self.strategy, sharded_state.on_param_blocks(
                    self.strategy, step, example_args[0], kind, blocks),
                specs_like(self.strategy, example_args),
                out_specs() if callable(out_specs) else out_specs,
                donate_argnums=donate_argnums), kind, lambda: self._warned)
        return self._compiled[key]

    def _compiled_train_step(self, state, statistics, batch, check_numerics: bool = False
                             ) -> Callable:
        """The train step for such arguments: the state donated, and returned placed as it
        came (its out specs, a walk over every state leaf, are computed only to compile)."""
        return self._compiled_step(
            self.train_step_for(check_numerics), (state, statistics, batch),
            lambda: (sharded_state.state_out_specs(self.strategy, state), P()), donate_argnums=0)

    # -- loops ----------------------------------------------------------------------------

    def _placed(self, data: DataAdapter, epoch: int = 0, start_step: int = 0, group: int = 1):
        """The epoch's batches placed on the mesh (ahead, on the prefetch thread for a source
        that runs user code; index batches of a resident data set); close it after use."""
        placed = (data.resident.batches(epoch, start_step, group) if data.resident is not None
                  else place_batches(data.batches(epoch, start_step=start_step, group=group),
                                     self.strategy, stacked=group > 1, local=data.local_rows))
        return prefetch(placed, self.prefetch and data.runs_user_code)

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
        with contextlib.closing(self._placed(data)) as batches:
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
        with contextlib.closing(self._placed(data)) as batches:
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


def checking(step: Callable, check_numerics: bool) -> Callable:
    """``step`` (a per-replica train step) traced in a replica context with
    ``check_numerics`` set, which every optimizer update in it reads
    (`mirrorfit._src.optimizers.update.apply_update`); ``step`` itself when unset."""
    if not check_numerics:
        return step

    @functools.wraps(step)
    def checked(*args):
        with replica_context(get_replica_context().derived(check_numerics=True)):
            return step(*args)

    return checked


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
