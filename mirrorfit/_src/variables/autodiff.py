"""`value_and_grad` over `Variable` s: JAX's replacement for ``tf.GradientTape``.

JAX has no tape: a gradient is of a function. A tf.keras ``train_step`` or custom loop ports
to mirrorfit by renaming except for one line, the tape, which becomes a function of the
batch and a call of `value_and_grad` on it (`GRADIENT_TAPE_REPLACEMENT` shows both).
Everything around it (``optimizer.apply_gradients(zip(gradients,
model.trainable_variables))``, metric updates) stays as in TF. `GradientTape` exists only to
say so when ported code uses it.

It imports only its own package.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import jax

from mirrorfit._src.variables.stateless_scope import StatelessScope
from mirrorfit._src.variables.variable import Variable

GRADIENT_TAPE_REPLACEMENT = """\
mf.GradientTape does not exist: JAX differentiates functions, not recorded operations. \
Replace the tape block by a function and one call of mf.value_and_grad:

    # tf.keras
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)

    # mirrorfit
    def forward(images, labels):
        predictions = model(images, training=True)
        return compute_loss(labels, predictions), predictions

    (loss, predictions), gradients = mf.value_and_grad(
        forward, model.trainable_variables, has_aux=True)(images, labels)

In a Model's train_step(self, data), the same single change:

    # tf.keras
    with tf.GradientTape() as tape:
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
    grads = tape.gradient(loss, self.trainable_variables)

    # mirrorfit
    def forward():
        y_pred = self(x, training=True)
        return self.compute_loss(y=y, y_pred=y_pred), y_pred

    (loss, y_pred), grads = mf.value_and_grad(
        forward, self.trainable_variables, has_aux=True)()

    self.optimizer.apply(grads)  # as before, all-reduced across replicas inside fit

Received: GradientTape(...)"""


def value_and_grad(fn: Callable[..., Any], variables: Iterable[Variable], *,
                   has_aux: bool = False) -> Callable[..., tuple[Any, list[jax.Array]]]:
    """Differentiates ``fn`` with respect to ``variables``: the ``tf.GradientTape`` line.

    This is the single line of a tf.keras ``train_step`` or custom loop that does not port
    by renaming; its before and after are in ``docs/guides/porting.md`` ("The one line: the
    gradient").

    The returned function takes ``fn`` 's arguments, runs ``fn`` with the variables' values
    mapped in a `StatelessScope` (nested in any enclosing one, so it works inside
    ``strategy.run``, `mirrorfit.function` and a model's ``train_step``), differentiates with
    ``jax.value_and_grad`` and returns the value and one gradient per variable. Assignments
    ``fn`` makes to other variables (BatchNormalization's moving statistics, metric updates)
    are not lost: they are assigned again after the call (recorded in the enclosing scope, or
    assigned to the variables when there is none).

    Args:
        fn: ``fn(*args, **kwargs)`` returning a float scalar loss, or ``(loss, aux)`` with
            ``has_aux=True``.
        variables: the `Variable` s to differentiate, e.g. ``model.trainable_variables``
            (read when the returned function is called, so a list that fills as the model
            builds works).
        has_aux: whether ``fn`` returns ``(loss, aux)``, as ``jax.value_and_grad``.

    Returns:
        A function of ``fn`` 's arguments returning ``(loss, grads)`` (``((loss, aux),
        grads)`` with ``has_aux``), ``grads`` a list aligned with ``variables``: each the
        shape and dtype of its variable.

    Raises:
        TypeError: (when called) if ``variables`` holds something other than `Variable` s.
        ValueError: (when called) if ``variables`` is empty, e.g. an unbuilt model's
            ``trainable_variables``.

    Example:
        >>> w = mf.Variable(jnp.array([1.0, 2.0]))
        >>> loss, (grad,) = mf.value_and_grad(lambda x: jnp.sum((w * x) ** 2), [w])(3.0)
        >>> float(loss), grad.tolist()
        (45.0, [18.0, 36.0])
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function returning the loss. Received: fn={fn!r}")

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> tuple[Any, list[jax.Array]]:
        targets = _checked(variables)

        assigned: list[Variable] = []

        def pure(values):
            with StatelessScope(zip(targets, values)) as scope:
                out = fn(*args, **kwargs)
            loss, aux = out if has_aux else (out, None)
            assigned[:] = [variable for variable, _ in scope.updates]
            return loss, (aux, [value for _, value in scope.updates])

        (loss, (aux, new_values)), grads = jax.value_and_grad(pure, has_aux=True)(
            [v.value for v in targets])
        for variable, value in zip(assigned, new_values):
            variable.assign(value)
        return ((loss, aux) if has_aux else loss), list(grads)

    return wrapped


def _checked(variables: Iterable[Variable]) -> list[Variable]:
    targets = list(variables)
    bad = [type(v).__name__ for v in targets if not isinstance(v, Variable)]
    if bad:
        raise TypeError("value_and_grad differentiates with respect to mf.Variable s, e.g. "
                        f"model.trainable_variables. Received: variables with {bad[0]} items")
    if not targets:
        raise ValueError("value_and_grad needs at least one variable to differentiate: an "
                         "unbuilt model has no trainable_variables yet; call it once (or "
                         "model.build(input_shape)) first. Received: variables=[]")
    return targets


class GradientTape:
    """Not available in JAX: raises an error showing the `value_and_grad` replacement.

    Raises:
        NotImplementedError: always, with the before/after of the port.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(GRADIENT_TAPE_REPLACEMENT)
