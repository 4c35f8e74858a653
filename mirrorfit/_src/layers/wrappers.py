"""Layer wrappers, as ``keras.layers``: `Bidirectional` (an RNN both ways) and
`TimeDistributed` (a layer on every timestep).

A wrapper keeps the wrapped layers' weights under Keras' names:
``bidirectional/forward_lstm/...`` and ``bidirectional/backward_lstm/...`` (the wrapped
layer's ``name``, else its Keras default name, prefixed; a ``backward_layer`` given keeps
its own), and ``time_distributed/dense/...``.
Their configs hold the wrapped layers' configs, as Keras' (``{"class_name", "config", ...}``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from mirrorfit._src.layers.base import LAYERS, FlaxLayer, register
from mirrorfit._src.layers.graph import mask_flow
from mirrorfit._src.layers.graph.functional import mode_kwargs
from mirrorfit._src.utils import registry
from mirrorfit._src.utils.naming import snake_case

_MERGE_MODES = ("sum", "mul", "ave", "concat", None)


def _base_name(layer: nn.Module) -> str:
    return layer.name or snake_case(type(layer).__name__)


def _check_layer(layer: Any, argument: str, wrapper: str) -> None:
    if not isinstance(layer, FlaxLayer):
        raise ValueError(f"Please initialize `{wrapper}` with a `mirrorfit.layers` layer "
                         f"instance for `{argument}`. Received: {argument}={layer!r}")


def _direction(layer: Any, name: str, **changes: Any) -> Any:
    """An unbound copy of ``layer`` named ``name``; an RNN's masked steps output zeros when
    it returns sequences (Keras' ``force_zero_output_for_mask``)."""
    if hasattr(layer, "zero_output_for_mask"):
        changes["zero_output_for_mask"] = layer.return_sequences
    return layer.clone(parent=None, name=name, **changes)


def _wrapped_config(layer: FlaxLayer) -> dict[str, Any]:
    return registry.serialize(layer)


@register
class Bidirectional(FlaxLayer):
    """Runs a recurrent layer forwards and backwards and merges the two outputs, as
    ``keras.layers.Bidirectional``.

    Args:
        layer: an `LSTM`, `GRU` or `SimpleRNN` (its config makes the forward layer, and the
            backward one with ``go_backwards=True``; its own weights are not reused).
        merge_mode: ``"concat"`` (default: ``[batch, ..., 2 * units]``), ``"sum"``,
            ``"mul"``, ``"ave"``, or ``None`` (the two outputs as a list).
        weights: not supported (``None``).
        backward_layer: the backward layer, instead of a copy of ``layer``; it must have
            ``go_backwards=True`` and the same ``return_sequences`` and ``return_state``.

    ``__call__(sequences, initial_state=None, mask=None, training=False)``: ``sequences
    [batch, timesteps, features]``; ``initial_state``: the forward layer's states, then the
    backward layer's; ``mask`` bool ``[batch, timesteps]`` goes to both directions. With
    ``return_sequences`` the backward outputs are flipped back to input order, and masked
    steps output zeros (Keras forces ``zero_output_for_mask``). With ``return_state`` the
    output is ``[merged, *forward_states, *backward_states]``.

    Raises:
        ValueError: a layer that is not a ``mirrorfit.layers`` layer, an unknown
            ``merge_mode``, ``weights``, or a backward layer that does not match.
    """

    supports_masking: ClassVar[bool] = True

    layer: Any
    merge_mode: str | None = "concat"
    weights: Any = None
    backward_layer: Any = None

    def __post_init__(self) -> None:
        _check_layer(self.layer, "layer", "Bidirectional")
        if self.backward_layer is not None:
            _check_layer(self.backward_layer, "backward_layer", "Bidirectional")
        if self.merge_mode not in _MERGE_MODES:
            raise ValueError(f"Invalid merge mode. Merge mode should be one of "
                             f"{_MERGE_MODES}. Received: merge_mode={self.merge_mode!r}")
        if self.weights is not None:
            raise ValueError("Bidirectional(weights=...) is not supported: set the weights "
                             "after building the model (model.set_weights). Received: "
                             f"weights of length {len(self.weights)}")
        # Names read before Flax adopts the field layers (its copies are named after the
        # fields).
        names = ("forward_" + _base_name(self.layer).removeprefix("forward_"),
                 "backward_" + _base_name(self.layer).removeprefix("backward_")
                 if self.backward_layer is None else _base_name(self.backward_layer))
        object.__setattr__(self, "_direction_names", names)
        super().__post_init__()
        forward, backward = self._directions()
        if forward.go_backwards == backward.go_backwards:
            raise ValueError("Forward layer and backward layer should have different "
                             "`go_backwards` value. Received: forward_layer.go_backwards="
                             f"{forward.go_backwards}, backward_layer.go_backwards="
                             f"{backward.go_backwards}")
        for attribute in ("return_sequences", "return_state"):
            f, b = getattr(forward, attribute), getattr(backward, attribute)
            if f != b:
                raise ValueError("Forward layer and backward layer are expected to have the "
                                 f"same value for attribute \"{attribute}\", got \"{f}\" for "
                                 f"forward layer and \"{b}\" for backward layer")

    @property
    def return_sequences(self) -> bool:
        """The wrapped layer's ``return_sequences``."""
        return self.layer.return_sequences

    @property
    def return_state(self) -> bool:
        """The wrapped layer's ``return_state``."""
        return self.layer.return_state

    @nn.nowrap
    def _directions(self) -> tuple[Any, Any]:
        """The forward and backward layers, unbound, with Keras' names and masking output."""
        forward_name, backward_name = self._direction_names
        forward = _direction(self.layer, forward_name)
        if self.backward_layer is None:
            backward = _direction(self.layer, backward_name, go_backwards=True)
        else:
            backward = _direction(self.backward_layer, backward_name)
        return forward, backward

    @nn.nowrap
    def compute_mask(self, inputs: Any, mask: Any) -> Any:
        """As Keras' ``Bidirectional.compute_mask``."""
        del inputs
        mask = jax.tree.leaves(mask)[0] if jax.tree.leaves(mask) else None
        if self.return_sequences:
            output_mask: Any = [mask, mask] if self.merge_mode is None else mask
        else:
            output_mask = [None, None] if self.merge_mode is None else None
        if not self.return_state:
            return output_mask
        states = [None] * 2 * self.layer.state_count
        return (output_mask if self.merge_mode is None else [output_mask]) + states

    @nn.compact
    def __call__(self, sequences: jax.Array, initial_state: Any = None,
                 mask: jax.Array | None = None, training: bool = False) -> Any:
        forward, backward = (layer.clone(parent=self, name=layer.name)
                             for layer in self._directions())
        states: list[Any] = [None, None]
        if initial_state is not None:
            half = len(initial_state) // 2
            states = [list(initial_state[:half]), list(initial_state[half:])]
        kwargs = {"training": training} if mode_kwargs(forward, training) else {}
        y = forward(sequences, initial_state=states[0], mask=mask, **kwargs)
        y_rev = backward(sequences, initial_state=states[1], mask=mask, **kwargs)
        extra: list[Any] = []
        if self.return_state:
            extra = [*y[1:], *y_rev[1:]]
            y, y_rev = y[0], y_rev[0]
        y, y_rev = self.cast(y), self.cast(y_rev)
        if self.return_sequences:
            y_rev = jnp.flip(y_rev, axis=1)
        if self.merge_mode == "concat":
            output: Any = jnp.concatenate([y, y_rev], axis=-1)
        elif self.merge_mode == "sum":
            output = y + y_rev
        elif self.merge_mode == "ave":
            output = (y + y_rev) / 2
        elif self.merge_mode == "mul":
            output = y * y_rev
        else:
            output = [y, y_rev]
        if not self.return_state:
            return output
        return (output if self.merge_mode is None else [output]) + extra

    def get_config(self) -> dict[str, Any]:
        """Keras' config: ``merge_mode`` and the forward and backward layers' configs."""
        forward, backward = self._directions()
        config = {"merge_mode": self.merge_mode, "layer": _wrapped_config(forward),
                  "backward_layer": _wrapped_config(backward)}
        return {"trainable": self.trainable, "dtype": self.dtype, **config}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Bidirectional:
        """The layer of a `get_config` output, the forward and backward layers rebuilt
        from their configs.
        """
        config = dict(config)
        config["layer"] = LAYERS.deserialize(config["layer"])
        if config.get("backward_layer") is not None:
            config["backward_layer"] = LAYERS.deserialize(config["backward_layer"])
        return cls(**config)


@register
class TimeDistributed(FlaxLayer):
    """Applies ``layer`` to every timestep, as ``keras.layers.TimeDistributed``.

    Input ``[batch, timesteps, ...]``; each ``[batch, ...]`` slice goes through the same
    ``layer`` (one set of weights, under the layer's name), and the outputs are stacked to
    ``[batch, timesteps, ...]``. The steps run as one call on ``[batch * timesteps, ...]``,
    which is the same for layers that treat rows independently (not BatchNormalization in
    training, whose batch statistics Keras takes per timestep). A Keras ``mask [batch,
    timesteps]`` goes to a layer that takes one (per step) and passes on.

    Raises:
        ValueError: a ``layer`` that is not a ``mirrorfit.layers`` layer, or inputs of
            fewer than 3 dimensions.
    """

    supports_masking: ClassVar[bool] = True

    layer: Any

    def __post_init__(self) -> None:
        _check_layer(self.layer, "layer", "TimeDistributed")
        # Read before Flax adopts the field layer (its copy is named "layer").
        object.__setattr__(self, "_inner_name", _base_name(self.layer))
        super().__post_init__()

    @nn.compact
    def __call__(self, inputs: jax.Array, training: bool = False,
                 mask: jax.Array | None = None) -> jax.Array:
        if jnp.ndim(inputs) < 3:
            raise ValueError("`TimeDistributed` Layer should be passed an `input_shape` with "
                             f"at least 3 dimensions, received: {jnp.shape(inputs)}")
        inner = self.layer.clone(parent=self, name=self._inner_name)
        batch, steps = inputs.shape[:2]
        kwargs = dict(mode_kwargs(inner, training))
        if mask is not None:
            kwargs |= mask_flow.mask_kwargs(inner, (inputs,), {},
                                            lambda _: jnp.reshape(mask, (batch * steps,)),
                                            lambda _: True)
        y = inner(jnp.reshape(inputs, (batch * steps, *inputs.shape[2:])), **kwargs)
        return jax.tree.map(lambda a: jnp.reshape(a, (batch, steps, *a.shape[1:])), y)

    def get_config(self) -> dict[str, Any]:
        """Keras' config: the wrapped layer's config under ``layer``."""
        return {"trainable": self.trainable, "dtype": self.dtype,
                "layer": _wrapped_config(self.layer)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> TimeDistributed:
        """The layer of a `get_config` output, the wrapped layer rebuilt from its config."""
        return cls(**{**config, "layer": LAYERS.deserialize(config["layer"])})
