"""Helpers shared by test files in several folders; the fixtures are in tests/conftest.py.

Import them as ``from tests.helpers import ...``: ``tests`` is a package (an empty
``__init__.py`` in every test folder), so test modules of the same name in different folders
do not clash.
"""

import contextlib
import logging
from pathlib import Path

import jax
import numpy as np

import mirrorfit as mf

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout: mirrorfit/, tests/, ...


def mirrored_strategy(n):
    """A `mf.MirroredStrategy` over the first ``n`` of the 8 simulated CPU devices."""
    return mf.MirroredStrategy(jax.devices()[:n])


def tree_allclose(a, b, *, rtol, atol=0.0):
    """Asserts two pytrees have the same structure and allclose leaves."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, f"tree structures differ: {ta} vs {tb}"
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def tree_equal(a, b):
    """Asserts two pytrees (e.g. two ``get_weights()`` lists) have the same structure and
    bitwise-equal leaves: same shapes and values (``np.array_equal``, so a NaN differs)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, f"tree structures differ: {ta} vs {tb}"
    for i, (x, y) in enumerate(zip(la, lb)):
        assert np.array_equal(x, y), f"leaf {i} differs"


def compiled_classifier(layers, *, seed, replicas=2, dtype_policy=None):
    """``mf.Sequential(layers)`` on 4 features over ``replicas`` replicas, compiled with
    SGD(0.1), sparse categorical crossentropy and accuracy, and its initial training state
    on the host: the shared model of a test module (a module-scoped ``compiled`` fixture)."""
    with mirrored_strategy(replicas).scope():
        model = mf.Sequential(layers, input_shape=(4,), seed=seed, dtype_policy=dtype_policy)
        model.compile(mf.optimizers.SGD(0.1), "sparse_categorical_crossentropy", ["accuracy"])
    return model, jax.device_get(model.state)


def reset_to_initial(compiled):
    """The model of a `compiled_classifier` result, back at its initial training state."""
    model, initial = compiled
    model.state = model.strategy.replicate_arrays(initial)
    return model


class Interrupt(Exception):
    """Raised by `interrupt_after`: a crash in the middle of fit."""


def interrupt_after(model, step):
    """A callback that raises `Interrupt` at the end of the first train batch after which the
    model's global ``step`` (a count of train steps) is ``step`` or more."""

    def check(batch, logs):
        if int(jax.device_get(model.state.step)) >= step:
            raise Interrupt

    return mf.callbacks.LambdaCallback(on_train_batch_end=check)


class _Log(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def jax_log_messages():
    """The messages JAX logs inside the block, with ``jax.log_compiles`` on: a list that
    fills as they come ("Compiling jit(...)", "Finished XLA compilation of ...")."""
    handler, logger = _Log(), logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield handler.messages
    finally:
        logger.removeHandler(handler)


@contextlib.contextmanager
def count_step_compiles():
    """Counts "Compiling jit(step)" records (jax.log_compiles) inside the block: XLA
    compilations of per-replica steps (during a fit without validation data, the train step).

    Yields a list that holds the count, as its one element, once the block has ended.
    """
    counter = []
    with jax_log_messages() as messages:
        try:
            yield counter
        finally:
            counter.append(sum(m.startswith("Compiling jit(step)") for m in messages))


def all_reduce_operands(hlo):
    """The operands of each all-reduce in compiled HLO text (``compiled.as_text()``): one list
    of operand names per all-reduce instruction, in program order."""
    lines = [line for line in hlo.splitlines() if " all-reduce(" in line]
    return [line.split(" all-reduce(")[1].split(")")[0].split(", ") for line in lines]


def cuda_ops(fn, *args):
    """``(op name, operand types, result types)`` of every op of ``jax.jit(fn)`` lowered for
    CUDA (no GPU needed), in every function of the module; types as text
    (``"tensor<50x8xbf16>"``)."""
    module = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).compiler_ir(
        "stablehlo")
    found = []

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    found.append((child.operation.name, [str(v.type) for v in child.operands],
                                  [str(v.type) for v in child.results]))
                    walk(child.operation)
    walk(module.operation)
    return found
