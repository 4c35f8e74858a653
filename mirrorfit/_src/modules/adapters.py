"""Module adapters: one pure ``init``/``apply`` interface over ``flax.linen`` and ``flax.nnx``.

The steps never see a Flax module, only a `ModuleAdapter`:

* ``init(rng, x) -> (params, model_state)``
* ``apply(params, model_state, x, *, train, rng) -> (y_pred, new_model_state)``
* ``apply_with_losses(...) -> (y_pred, new_model_state, losses)``: also the values the module
  sowed into the ``"losses"`` collection (``self.sow("losses", name, value)``), never kept in
  ``model_state``;
* ``apply_with_mask(...) -> (y_pred, new_model_state, losses, mask)``: also the Keras mask of
  the output (bool ``[batch, timesteps]``) that a functional or Sequential model sows
  (`mirrorfit._src.layers.graph.mask_flow.sow_output_mask`), or ``None``.

``params`` is the trainable ``"params"`` collection; ``model_state`` holds every other
collection (BatchNorm ``batch_stats``, nnx RNG counters, ...). This module also owns the
training-mode convention: a module whose ``__call__`` takes ``train`` (Flax) or ``training``
(Keras) gets ``True`` in fit and ``False`` in evaluate and predict.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
from flax import nnx

from mirrorfit._src.layers.flax_bridge import SOWN_LOSSES
from mirrorfit._src.layers.graph.mask_flow import OUTPUT_MASK

_TRAIN_KWARGS = ("train", "training")
_INFERENCE_KWARGS = ("deterministic", "use_running_average")


def call_inputs(x: Any) -> tuple[Any, ...]:
    """Positional arguments for a module call: a tuple/list of inputs is unpacked."""
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


@functools.cache
def _call_params(cls: type) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(cls.__call__).parameters)
    except (TypeError, ValueError):
        return frozenset()


def _mode_kwargs(layer: Any, train: bool) -> dict[str, bool]:
    """Keyword args that put ``layer`` in training or inference mode."""
    names = _call_params(type(layer))
    for name in _TRAIN_KWARGS:
        if name in names:
            return {name: train}
    # Flax's Dropout/BatchNorm style: only when the attribute is left to the call site,
    # since flax refuses a value given both as attribute and argument.
    return {
        name: not train
        for name in _INFERENCE_KWARGS
        if name in names and getattr(layer, name, None) is None
    }


class KerasSequential(nn.Sequential):
    """``flax.linen.Sequential`` that tells every layer whether it is training.

    Plain ``nn.Sequential`` forwards call arguments to its first layer only. Here each layer
    gets its own mode argument (``train``/``training``, or ``deterministic`` and
    ``use_running_average`` as Dropout and BatchNorm expect), as a Keras ``Sequential`` does.
    """

    def __call__(self, *args, train: bool = False):  # type: ignore[override]
        outputs = args
        for layer in self.layers:
            kwargs = _mode_kwargs(layer, train) if isinstance(layer, nn.Module) else {}
            outputs = layer(*outputs, **kwargs) if isinstance(outputs, tuple) else layer(
                outputs, **kwargs
            )
        return outputs


class ModuleAdapter:
    """Pure ``init``/``apply`` over a Flax module; see the module docstring."""

    def init(self, rng: jax.Array, x: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def apply(self, params: Any, model_state: Any, x: Any, *, train: bool, rng: jax.Array):
        y, model_state, _ = self.apply_with_losses(params, model_state, x, train=train, rng=rng)
        return y, model_state

    def apply_with_losses(self, params: Any, model_state: Any, x: Any, *, train: bool,
                          rng: jax.Array) -> tuple[Any, Any, Any]:
        raise NotImplementedError

    def apply_with_mask(self, params: Any, model_state: Any, x: Any, *, train: bool,
                        rng: jax.Array) -> tuple[Any, Any, Any, jax.Array | None]:
        """`apply_with_losses` and the output's mask (here ``None``: no mask is known)."""
        return (*self.apply_with_losses(params, model_state, x, train=train, rng=rng), None)

    def tabulate(self, rng: jax.Array, x: Any) -> str:
        raise NotImplementedError


class LinenAdapter(ModuleAdapter):
    """Adapter for ``flax.linen.Module``."""

    def __init__(self, module: nn.Module):
        self.module = module

    def _kwargs(self, train: bool) -> dict[str, Any]:
        names = _call_params(type(self.module))
        return {name: train for name in _TRAIN_KWARGS if name in names}

    def init(self, rng, x):
        params_rng, dropout_rng = jax.random.split(rng)
        variables = self.module.init(
            {"params": params_rng, "dropout": dropout_rng}, *call_inputs(x), **self._kwargs(False)
        )
        variables = dict(variables)
        variables.pop(SOWN_LOSSES, None)  # sown per forward pass, not state
        params = variables.pop("params", {})
        return params, variables

    def apply_with_losses(self, params, model_state, x, *, train, rng):
        return self.apply_with_mask(params, model_state, x, train=train, rng=rng)[:3]

    def apply_with_mask(self, params, model_state, x, *, train, rng):
        variables = {"params": params, **model_state}
        mutable = [*model_state, SOWN_LOSSES, OUTPUT_MASK] if train else [SOWN_LOSSES, OUTPUT_MASK]
        y, mutated = self.module.apply(variables, *call_inputs(x), rngs={"dropout": rng},
                                       mutable=mutable, **self._kwargs(train))
        mutated = dict(mutated)
        losses = mutated.pop(SOWN_LOSSES, {})
        mask = mutated.pop(OUTPUT_MASK, {}).get("mask")  # a nested model's own is left out
        return y, ({**model_state, **mutated} if train else model_state), losses, mask

    def tabulate(self, rng, x):
        return self.module.tabulate(
            {"params": rng, "dropout": rng},
            *call_inputs(x),
            **self._kwargs(False),
            console_kwargs={"width": 120, "force_terminal": False},
        )


class NnxAdapter(ModuleAdapter):
    """Adapter for ``flax.nnx.Module``: split into graph definition, params and other state.

    Training and inference use two graph definitions (after ``module.train()`` and
    ``module.eval()``). RNG streams are reseeded per step and per replica from the trainer's
    key, and their stored state is left unchanged, so the state stays mirrored.
    """

    def __init__(self, module: nnx.Module):
        self.module = module
        module.train()
        self._train_def, params, rest = nnx.split(module, nnx.Param, ...)
        module.eval()
        self._eval_def = nnx.graphdef(module)
        self._initial = (nnx.to_pure_dict(params), rest)

    def init(self, rng, x):
        del rng, x  # nnx modules are created with their variables.
        return self._initial

    def _merge(self, params, model_state, train):
        graphdef = self._train_def if train else self._eval_def
        state = nnx.State(params)
        return nnx.merge(graphdef, state, model_state, copy=True)

    def apply_with_losses(self, params, model_state, x, *, train, rng):
        keys = itertools.count()

        def reseed(variable):
            if isinstance(variable, nnx.RngKey):
                key = jax.random.fold_in(rng, next(keys))
                return variable.replace(jax.random.wrap_key_data(key))
            return variable

        seeded = jax.tree.map(reseed, model_state, is_leaf=_is_variable)
        module = self._merge(params, seeded, train)
        y = module(*call_inputs(x))
        # RNG state is restored: randomness comes from ``rng``, not from stored streams.
        new_state = jax.tree.map(
            lambda new, old: old if isinstance(new, nnx.RngState) else new,
            nnx.split(module, nnx.Param, ...)[2],
            model_state,
            is_leaf=_is_variable,
        )
        return y, new_state, {}  # nnx modules sow nnx.Intermediate, not "losses"

    def tabulate(self, rng, x):
        del rng
        return nnx.tabulate(self.module, *call_inputs(x))


def _is_variable(value: Any) -> bool:
    return isinstance(value, nnx.Variable)


def adapt(module: Any) -> ModuleAdapter:
    """Returns the adapter for a linen or nnx module.

    Raises:
        TypeError: if ``module`` is neither a ``flax.linen.Module`` nor a ``flax.nnx.Module``.
    """
    if isinstance(module, nn.Module):
        return LinenAdapter(module)
    if isinstance(module, nnx.Module):
        return NnxAdapter(module)
    raise TypeError(
        "module must be a flax.linen.Module or a flax.nnx.Module (for a list of layers use "
        f"mf.Sequential). Received: module={module!r} of type {type(module).__name__}"
    )


def sequential(layers: Sequence[Callable[..., Any]]) -> KerasSequential:
    """Builds the linen module behind ``mf.Sequential``.

    Raises:
        TypeError: if ``layers`` is not a non-empty list of callables.
    """
    if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or not layers:
        raise TypeError(
            "layers must be a non-empty list of Flax modules or functions, e.g. "
            f"[nn.Dense(128), nn.relu, nn.Dense(10)]. Received: layers={layers!r}"
        )
    bad = [layer for layer in layers if not callable(layer)]
    if bad:
        raise TypeError(f"every layer must be callable. Received: layers with {bad!r}")
    return KerasSequential(list(layers))
