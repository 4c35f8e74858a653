"""The program audit: a model's compiled train step checked for traps that cost an accelerator
time or memory, on any machine (a step lowers for CUDA without a GPU: ``lowering_platforms``).

`audit_step` (``mf.utils.audit_step``) lowers ``fit``'s train step for a batch of the user's
data; ``mf.callbacks.ThroughputMonitor(audit=True)`` lowers the running ``fit``'s step
(`mirrorfit._src.callbacks.contract.TrainingLoop.audit_train_step`). Both read the StableHLO
program (`program_traps`) and name, for each trap, the layer (the Flax module path in the
op's name stack) or the state leaf it concerns (issue 42):

* ``logits_scatter``: a scatter into a buffer shaped like the logits (the targets' shape
  plus a class axis, per replica): autodiff of a gather of each label's logit, as optax's
  ``softmax_cross_entropy_with_integer_labels``, zeroes and scatters into a logits-sized
  buffer on every step (6.6 GB float32 for GPT-2 at 32 x 1024 tokens);
* ``half_scatter_add``: a bfloat16/float16 scatter into a buffer shaped like a float32 param:
  an embedding table looked up after a policy cast it whole, whose gradient is then
  accumulated in half precision;
* ``table_convert``: a gather from a half-precision copy of a float32 param: the whole
  table converted every step to read a few rows (Keras' ``Embedding`` gathers the float32
  rows and casts those; so does ``mf.layers.Embedding``);
* ``collective``: an all-reduce (or any collective) in a step of one replica;
* ``undonated``: a state leaf the step does not donate (``fit`` donates the whole state,
  so its new values reuse the old buffers).

`train_step_program` is the one function here that reaches into the trainer.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import jax
import numpy as np

from mirrorfit._src.callbacks.contract import ProgramTrap
from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.trainers.resident import batch_shapes
from mirrorfit._src.utils.checks import MirrorfitWarning

HALF = ("bf16", "f16")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
               "collective_broadcast")
MESSAGES = {
    "logits_scatter": (
        "{where}the train step scatters into a zeroed {shape} buffer shaped like the logits, "
        "the gradient of a gather of each label's logit (e.g. optax's "
        "softmax_cross_entropy_with_integer_labels): use "
        "mf.losses.SparseCategoricalCrossentropy(from_logits=True), whose gradient is "
        "written elementwise."),
    "half_scatter_add": (
        "{where}the gradient of {param} ({shape}) is a {dtype} scatter-add into a copy of "
        "it, converted whole: the table is looked up after the policy cast it whole. Use "
        "mf.layers.Embedding (as Keras' Embedding, it gathers float32 rows and casts them)."),
    "table_convert": (
        "{where}rows are gathered from a {dtype} copy of {param} ({shape}), so the whole "
        "table is converted on every step: use mf.layers.Embedding (as Keras' Embedding, it "
        "gathers float32 rows and casts them)."),
    "collective": (
        "{where}the step of one replica runs a collective ({op}), a device round trip for "
        "nothing."),
    "undonated": (
        "the train step does not donate the state leaf {param}: its old and new buffers both "
        "stay in memory."),
}
"""The `ProgramTrap` messages by kind, formatted with the trap's details."""

_LOCATION = re.compile(r'loc\("([^"]*)"')
_TENSOR = re.compile(r"tensor<((?:\d+x)*)([a-z]\w*)>")
_NOT_A_NAME = re.compile(r"[()\[\]:<> ]")


class StepProgram(NamedTuple):
    """``fit``'s compiled train step and arguments of its shapes, `train_step_program`'s."""

    fn: Any  # the jitted ``(state, statistics, batch) -> (state, statistics)``
    args: tuple[Any, Any, Any]  # arrays or ``jax.ShapeDtypeStruct`` s: state, statistics, batch
    replicas: int  # replicas of the step's mesh


def train_step_program(trainer: Any, model: Any = None, x: Any = None, y: Any = None,
                       sample_weight: Any = None, batch_size: int | None = None) -> StepProgram:
    """``fit``'s train step for a first batch of ``x`` (``model`` 's), or the running ``fit`` 's
    (``model=None``).

    The one place that asks the trainer (``model.trainer``) for its compiled step, as ``fit``
    builds it: the data adapter and its first placed batch (stacked with
    ``steps_per_execution``), the first statistics and the step compiled for them.

    Raises:
        ValueError: for an uncompiled model.
        RuntimeError: with ``model=None`` outside ``fit`` or before its first train step.
    """
    if model is None:
        shapes = trainer._train_shapes
        if trainer.train_fn is None or shapes is None:
            raise RuntimeError("The running fit's train step is audited after the first train "
                               "step (on_train_batch_end or later). Received: a call before "
                               "any train step was compiled")
        return StepProgram(trainer.train_fn, shapes, trainer.strategy.num_replicas_in_sync)
    model._require_compiled("audit_step")
    data = model._adapter_for(x, y, sample_weight, batch_size,
                              with_targets=model._with_targets(y, "train_step"))
    with contextlib.closing(trainer._placed(data, group=trainer.steps_per_execution)) as placed:
        batch = next(placed)
    if trainer.runs_objects:
        trainer.symbolic_build(model, batch)  # builds the step's other optimizers, as fit does
    statistics = trainer._fresh_statistics(model.state, batch)
    fn = trainer._compiled_train_step(model.state, statistics, batch)
    return StepProgram(fn, (model.state, statistics, batch), trainer.strategy.num_replicas_in_sync)


def lowered(program: StepProgram, platform: str | None = None) -> Any:
    """``program`` 's step lowered (``jax.stages.Lowered``) for ``platform`` (``"cuda"``,
    ``"rocm"``, ``"tpu"``, ``"cpu"``), or for its devices' own with ``None``."""
    traced = program.fn.trace(*program.args)
    return traced.lower(lowering_platforms=(platform,)) if platform else traced.lower()


def _shape(type_text: str) -> tuple[tuple[int, ...], str] | None:
    """``(shape, element type)`` of a ``tensor<4x8xbf16>`` type's text; None for others."""
    match = _TENSOR.fullmatch(type_text.strip())
    if match is None:
        return None
    dims = match.group(1)
    return tuple(int(d) for d in dims.split("x")[:-1]) if dims else (), match.group(2)


def _stack(location: Any) -> str:
    match = _LOCATION.search(str(location))
    return match.group(1) if match else ""


def _layer(stack: str) -> str:
    """The module path in an op's name stack (``jit(step)/jvp(M)/wte/jit(_take)/gather`` ->
    ``wte``): its plain names, the op's own (the last) left out."""
    return "/".join(p for p in stack.split("/")[:-1] if p and not _NOT_A_NAME.search(p))


def _functions(module: Any) -> dict[str, Any]:
    """The functions of a StableHLO module by name (``"main"``, the called ones)."""
    return {str(op.attributes["sym_name"]).strip('"'): op
            for op in module.body.operations if "sym_name" in op.attributes}


def _ops(module: Any) -> Iterator[tuple[Any, str]]:
    """Every operation of ``module`` reachable from ``main``, with its full name stack (calls
    followed into their functions, each function's ops under its call site's stack)."""
    functions = _functions(module)
    seen: set[tuple[str, str]] = set()

    def walk(op: Any, prefix: str) -> Iterator[tuple[Any, str]]:
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    stack = "/".join(filter(None, (prefix, _stack(child.location))))
                    yield child, stack
                    if child.operation.name == "func.call":
                        callee = str(child.attributes["callee"]).lstrip("@")
                        if (callee, stack) not in seen and callee in functions:
                            seen.add((callee, stack))
                            yield from walk(functions[callee].operation, stack)
                    else:
                        yield from walk(child.operation, prefix)

    yield from walk(functions["main"].operation, "")


def _undonated(main: Any, state_leaves: int) -> list[str]:
    """Names of ``main`` 's state arguments neither aliased to an output nor a buffer donor
    (the state is ``fit``'s first argument, so its leaves come first)."""
    attrs = main.attributes.get("arg_attrs", None)
    arguments = main.regions[0].blocks[0].arguments
    names = []
    for i in range(min(state_leaves, len(arguments))):
        text = str(attrs[i]) if attrs is not None else ""
        if "tf.aliasing_output" not in text and "jax.buffer_donor" not in text:
            names.append(_stack(getattr(arguments[i], "location", "")) or f"argument {i}")
    return names


def _where(stack: str) -> str:
    layer = _layer(stack)
    return f"In layer {layer!r}, " if layer else ""


def program_traps(program: StepProgram, platform: str | None = None) -> list[ProgramTrap]:
    """The traps (see the module docstring) of ``program`` 's step lowered for ``platform``.

    Args:
        program: a `StepProgram` (`train_step_program`).
        platform: the platform to lower for (``"cuda"`` works on a machine without a GPU);
            ``None``: the step's own devices.

    Returns:
        One `ProgramTrap` per trap and place (layer, param or op), in program order.
    """
    state, _, batch = program.args
    table: dict[tuple[int, ...], str] = {}  # float32 params by shape: the first of each
    for path, leaf in jax.tree_util.tree_leaves_with_path(state.params):
        if np.dtype(leaf.dtype) == np.float32:
            table.setdefault(tuple(leaf.shape), "params" + jax.tree_util.keystr(path))
    seen: Batch = batch_shapes(batch)  # a device-resident data set's gathered rows
    stacked = len(seen.mask.shape) == 2  # [steps_per_execution, global batch]
    rows = seen.mask.shape[-1] // program.replicas
    logits_like = {(rows, *tuple(leaf.shape[2 if stacked else 1:]))
                   for leaf in jax.tree.leaves(seen.y)}
    logits_like = {shape[:-1] if len(shape) > 1 and shape[-1] == 1 else shape
                   for shape in logits_like}
    module = lowered(program, platform).compiler_ir("stablehlo")
    traps: dict[tuple[str, str, str], ProgramTrap] = {}

    def add(kind: str, stack: str, **details: Any) -> None:
        where = _where(stack)
        key = (kind, _layer(stack), str(details))
        traps.setdefault(key, ProgramTrap(kind, _layer(stack) or details.get("param", ""),
                                          _message(kind, where=where, **details)))

    for op, stack in _ops(module):
        name = op.operation.name
        if name == "stablehlo.scatter":
            result = _shape(str(op.results[0].type))
            if result is None:
                continue
            shape, dtype = result
            if shape[:-1] in logits_like and len(shape) > 1 and shape[-1] > 1:
                add("logits_scatter", stack, shape=_text(shape, dtype))
            if dtype in HALF and shape in table:
                add("half_scatter_add", stack, shape=_text(shape), dtype=_DTYPE[dtype],
                    param=table[shape])
        elif name == "stablehlo.gather":
            operand = _shape(str(op.operands[0].type))
            if operand is not None and operand[1] in HALF and operand[0] in table:
                add("table_convert", stack, shape=_text(operand[0]), dtype=_DTYPE[operand[1]],
                    param=table[operand[0]])
        elif program.replicas == 1 and name.split(".")[-1] in COLLECTIVES:
            add("collective", stack, op=name)
    for leaf in _undonated(_functions(module)["main"], len(jax.tree.leaves(state))):
        traps.setdefault(("undonated", leaf, ""),
                         ProgramTrap("undonated", leaf, _message("undonated", param=leaf)))
    return list(traps.values())


_DTYPE = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def _text(shape: tuple[int, ...], dtype: str | None = None) -> str:
    """``[8, 16] float32`` (the dtype left out without one)."""
    text = f"[{', '.join(map(str, shape))}]"
    return f"{text} {_DTYPE.get(dtype, dtype)}" if dtype else text


def _message(kind: str, **details: Any) -> str:
    return f"Program audit ({kind}): " + MESSAGES[kind].format(**details)


def audit_step(model: Any, x: Any, y: Any = None, sample_weight: Any = None, *,
               batch_size: int | None = None, platform: str | None = None) -> list[ProgramTrap]:
    """Checks the program ``fit`` would compile for ``model`` on batches of ``x``, ``y``.

    Lowers the train step (forward, loss, gradients, optimizer update) as ``fit`` builds it,
    without running or compiling it, and warns of each trap that costs an accelerator time
    or memory (issue 42), naming the layer:

    * a scatter into a logits-sized buffer (the gradient of a gathered crossentropy);
    * a bfloat16/float16 scatter-add into a float32 param (an embedding table cast whole);
    * a gather from a half-precision copy of a whole float32 table;
    * a collective (all-reduce, ...) in a one-replica step;
    * a state leaf not donated to the step.

    Args:
        model: a compiled `mirrorfit.Model` (built from ``x`` if it is not yet).
        x, y, sample_weight: training data as ``fit`` takes it; only its first global batch
            is read (for its shapes).
        batch_size: the global batch, as in ``fit`` (default 32).
        platform: the platform to lower for: ``"cuda"`` (works on a machine without a GPU),
            ``"rocm"``, ``"tpu"``, ``"cpu"``; ``None``: the model's devices.

    Returns:
        The `ProgramTrap` s found (``kind``, ``layer``, ``message``); empty for a clean step.

    Raises:
        ValueError: for an uncompiled model, or data ``fit`` would refuse.

    Example:
        >>> traps = mf.utils.audit_step(model, x, y, platform="cuda")  # warns for each
        >>> [trap.kind for trap in traps]
        []
    """
    traps = program_traps(
        train_step_program(model.trainer, model, x, y, sample_weight, batch_size), platform)
    for trap in traps:
        warnings.warn(trap.message, MirrorfitWarning, stacklevel=2)
    return traps
