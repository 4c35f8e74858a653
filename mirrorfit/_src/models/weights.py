"""A model's variables as data: reading, writing, saving and printing them.

`ModelVariables` is the part of `mirrorfit.Model` that does not train: ``params``,
``get_weights``/``set_weights`` (Keras' flat list), ``save``/``save_weights``/``load_weights``
(through `mirrorfit._src.models.model_saving`; ``save_checkpoint`` is the form callbacks use)
and ``summary``. It reads the model's state and writes it only through ``Model.assign_state``.

The weights are every numeric leaf of ``(params, model_state)``; RNG key state of nnx modules
is not a weight. The order is Keras' for models of ``mirrorfit.layers`` (per layer: kernel,
bias; BatchNorm: gamma, beta, moving_mean, moving_variance) and the params' creation order
for other Flax modules (a Dense layer's kernel before its bias), params first; see
`mirrorfit._src.models.weight_order`. It is stable across runs and processes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mirrorfit._src.distribute import fsdp
from mirrorfit._src.distribute.mesh import DeviceMesh
from mirrorfit._src.export.archive import export_model
from mirrorfit._src.layers.graph import summary as summary_lib
from mirrorfit._src.layers.graph.model_info import is_layers_model
from mirrorfit._src.models import keras_models, model_saving, weight_order
from mirrorfit._src.models.weight_order import WeightPath
from mirrorfit._src.modules.adapters import ModuleAdapter
from mirrorfit._src.saving.background import BackgroundWriter
from mirrorfit._src.saving.directory_lock import DirectoryLock
from mirrorfit._src.trainers.state import TrainState, require_state


def _weight_leaves(state: TrainState, order: Sequence[WeightPath]
                   ) -> tuple[list[Any], Any, list[int]]:
    """Leaves and treedef of (params, model_state), and the indices of the weights, listed
    in ``order`` (paths as `mirrorfit._src.models.weight_order`; unlisted ones last)."""
    tree = (state.params, state.model_state)
    leaves, treedef = jax.tree.flatten(tree)
    rank = {path: i for i, path in enumerate(order)}
    paths = weight_order.tree_paths(tree)
    numeric = [i for i, leaf in enumerate(leaves)
               if not jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)]
    numeric.sort(key=lambda i: (rank.get(paths[i], len(rank)), i))
    return leaves, treedef, numeric


def get_weights(state: TrainState, order: Sequence[WeightPath] = ()) -> list[np.ndarray]:
    """The weights of ``state`` as NumPy arrays, in ``order``."""
    leaves, _, numeric = _weight_leaves(state, order)
    return [np.asarray(leaves[i]) for i in numeric]


def set_weights(state: TrainState, weights: Sequence[Any],
                order: Sequence[WeightPath] = ()) -> tuple[Any, Any]:
    """``(params, model_state)`` of ``state`` with the leaves replaced by ``weights`` (host),
    given in ``order``.

    Raises:
        ValueError: if the count or any shape differs, listing the mismatches.
    """
    leaves, treedef, numeric = _weight_leaves(state, order)
    weights = list(weights)
    if len(weights) != len(numeric):
        raise ValueError(f"set_weights expected a list of {len(numeric)} arrays (as returned "
                         f"by get_weights). Received: {len(weights)} arrays")
    bad = [(i, leaves[i].shape, np.shape(w)) for i, w in zip(numeric, weights)
           if tuple(leaves[i].shape) != tuple(np.shape(w))]
    if bad:
        lines = "; ".join(f"#{i}: expected {e}, received {r}" for i, e, r in bad[:5])
        raise ValueError(f"set_weights got arrays of the wrong shape: {lines}")
    new = list(leaves)
    for i, w in zip(numeric, weights):
        new[i] = np.asarray(w, dtype=leaves[i].dtype)
    return jax.tree.unflatten(treedef, new)


class ModelVariables:
    """Reading, writing, saving and printing a model's variables; mixed into `Model`."""

    # Its own: (module, the params' creation order for it), cached by _weight_order.
    _creation_order: tuple[Any, list[WeightPath]] | None = None
    # Read here, owned by `Model`:
    _state: TrainState | None  # the variables (None before the model is built)
    module: Any  # the Flax module (a layers model has Keras' weight order and summary)
    _adapter: ModuleAdapter  # the module's init and tabulate
    _input_spec: Any  # per-example input shapes: the sample batch of init and summary
    seed: int  # the init seed (creation order, summary)
    assign_state: Callable[..., None]  # set_weights's only write path
    _host_layers: Sequence[Any]  # owned by `HostInputs`: the summary's first rows
    _strategy: DeviceMesh  # the summary's last line under shard_params

    @property
    def params(self) -> Any:
        """The Flax ``"params"`` pytree of replicated ``jax.Array`` s."""
        return None if self._state is None else self._state.params

    @property
    def opt_state(self) -> Any:
        """The optax state, replicated like the params (``None`` before compile)."""
        return None if self._state is None else self._state.opt_state

    def _sample_batch(self) -> Any:
        """Zeros ``[1, ...]`` shaped as the model's input spec."""
        return jax.tree.map(lambda spec: np.zeros((1, *spec.shape), spec.dtype),
                            self._input_spec)

    def _weight_order(self) -> list[WeightPath]:
        state = require_state(self._state)
        if is_layers_model(self.module):
            return weight_order.keras_order(self.module, state.params, state.model_state)
        if self.module is self:  # a subclassed model: its ``weights`` order, as Keras
            return weight_order.variables_order(self, state.params)
        cached = self._creation_order
        if cached is None or cached[0] is not self.module:
            order = weight_order.creation_order(self._adapter, jax.random.PRNGKey(self.seed),
                                                self._sample_batch())
            cached = self._creation_order = (self.module, order)
        return cached[1]

    def get_weights(self) -> list[np.ndarray]:
        """The weights as NumPy arrays, in Keras' order (see `mirrorfit._src.models.weights`).

        Under ``MultiWorkerMirroredStrategy(shard_params=True)`` the params are all-gathered
        from every process's devices: every process calls it at the same point.

        Raises:
            ValueError: for an unbuilt model.
        """
        state = require_state(self._state)
        if self._strategy.shard_params:  # split over processes: every process gathers them
            state = state._replace(params=self._strategy.fetch(state.params))
        return get_weights(state, self._weight_order())

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Sets weights from a list in `get_weights` order; nothing changes on a mismatch.

        Raises:
            ValueError: if the model is unbuilt, or the count or any shape differs.
        """
        params, model_state = set_weights(require_state(self._state), weights,
                                          self._weight_order())
        self.assign_state(params=params, model_state=model_state)

    def save_weights(self, path: str | os.PathLike) -> None:
        """Saves params and non-param collections to directory ``path`` with orbax.

        Writes a new version and then deletes the previous one, so a crash mid-save leaves
        the previous weights loadable. No pickle is involved.
        """
        model_saving.save_weights(self, path)

    def load_weights(self, path: str | os.PathLike) -> None:
        """Loads weights saved by `save_weights` or `save`, mirrored on this model's devices.

        ``path`` is a checkpoint directory or, as in Keras, a ``.keras`` file from `save`.

        The checkpoint may come from any number of devices. An unbuilt model is built with
        the saved input shape first.

        Raises:
            ValueError: if the saved tree or shapes differ from the model's, listing the first
                mismatching paths with expected and received shapes; nothing is loaded.
            mirrorfit._src.saving.checkpoint_format.CheckpointError: (a ``ValueError``) naming the
                checkpoint if it is missing, truncated or corrupted.
        """
        model_saving.load_weights(self, path)

    def save(self, path: str | os.PathLike) -> None:
        """Saves the whole model to ``path``: weights, optimizer state, step, RNG, and the
        compile configuration and module fields as JSON (`mirrorfit._src.saving.saved_config`).

        ``path`` is a directory, or a ``.keras`` file (one zip). Compile arguments are stored
        as names or through their ``get_config``; objects without one (a raw optax
        transformation) are not (that would need pickle) and are passed again to
        `load_model`.
        """
        model_saving.save_model(self, path)

    def save_checkpoint(self, path: str | os.PathLike, *, weights_only: bool = False,
                        argument: str = "path", lock: DirectoryLock | None = None,
                        writer: BackgroundWriter | None = None) -> Path | None:
        """Saves as `save_weights` (``weights_only``) or `save` do, naming ``argument`` in
        errors; the interface `mirrorfit.callbacks.ModelCheckpoint` saves through.

        Args:
            path: the checkpoint directory (or, without ``weights_only``, a ``.keras`` file).
            weights_only: params and non-param collections only, as `save_weights`.
            argument: how the caller's user names ``path`` in error messages
                (``"ModelCheckpoint filepath"``).
            lock: the caller's held `DirectoryLock` of directory ``path``, which it holds
                for a whole ``fit``; without it, the directory is locked for this save.
            writer: a `BackgroundWriter`: the state is copied to the host here and a
                directory ``path`` written on the writer's thread (see
                `mirrorfit._src.saving.background`); its errors come at its next call.

        Returns:
            The new version directory ``<path>/ckpt-<n>``, or the ``.keras`` file; None
            when written in the background.

        Raises:
            ValueError: for an unbuilt model, a path that is an existing file, or a
                ``.keras`` path with ``weights_only``.
            mirrorfit._src.saving.checkpoint_files.CheckpointWriteError: naming ``argument``
                and the fix, if the write fails (a full disk, no permission).
        """
        save = model_saving.save_weights if weights_only else model_saving.save_model
        return save(self, path, argument, lock, writer)

    def export(self, filepath: str | os.PathLike, format: str = "tf_saved_model",
               input_signature: Any = None, verbose: bool = True) -> None:
        """Writes the forward pass in inference mode for serving, as ``keras.Model.export``.

        The artifact needs neither the model's code nor mirrorfit: dropout is off, BatchNorm
        uses its moving statistics, the dtype policy's compute dtype is kept, the weights are
        inside, and any batch size is accepted. A mirrored model exports the single-device
        program (one replica's weights, no mesh). The endpoint is ``serve``; for several,
        use `mirrorfit.export.ExportArchive`.

        Args:
            filepath: the file (``"stablehlo"``, ``"onnx"``) or directory
                (``"tf_saved_model"``) to write.
            format: ``"tf_saved_model"`` (a SavedModel for TF Serving,
                ``tf.saved_model.load(path)`` 's ``serve(x)``; needs ``mirrorfit[export]``),
                ``"stablehlo"`` (``jax.export``; read with `mirrorfit.export.load` or
                plain JAX) or ``"onnx"`` (for ONNX Runtime; needs ``mirrorfit[export]``).
            input_signature: a list with one entry per positional input, each a pytree of
                ``jax.ShapeDtypeStruct`` whose first dimension is the batch; default the
                model's own input spec (a model with several inputs takes them as
                positional arguments, ``serve(x1, x2)``; a dict input is one argument).
            verbose: print where the artifact was written.

        Raises:
            ValueError: for an unbuilt model, an unknown format, or a layer that cannot be
                exported (``exportable = False``, e.g. host-side text preprocessing).
            ImportError: naming the ``export`` extra, if the format's converter is missing.

        Example:
            >>> model.export("model.stablehlo", format="stablehlo",
            ...              verbose=False)
            >>> served = mf.export.load("model.stablehlo")
            >>> bool(np.allclose(served(x[:5]), model.predict(x[:5], verbose=0), atol=1e-6))
            True
        """
        export_model(self, filepath, format=format, input_signature=input_signature,
                     verbose=verbose)

    def summary(self, print_fn: Callable[[str], Any] = print) -> None:
        """Prints Keras' layer table for a model of ``mirrorfit.layers`` or a subclassed model
        (one row per layer attribute, output shapes ``?``), else the table from Flax's own
        ``tabulate``; under ``MirroredStrategy(shard_params=True)`` one more line says how
        the params are split over the replicas and names the leaves that stay mirrored.

        Raises:
            ValueError: for an unbuilt model.
        """
        state = require_state(self._state)
        if is_layers_model(self.module):
            print_fn(keras_models.summary_text(self.module, state.params, state.model_state,
                                               self._sample_batch(), self._host_layers))
        elif self.module is self:  # a subclassed model: Keras' table of its layers
            print_fn(summary_lib.format_summary(summary_lib.layer_summary(self),
                                                name=getattr(self, "name", None)))
        else:
            print_fn(self._adapter.tabulate(jax.random.PRNGKey(self.seed),
                                            self._sample_batch()))
        sharded = fsdp.summary_line(self._strategy, state.params)
        if sharded is not None:
            print_fn(sharded)
