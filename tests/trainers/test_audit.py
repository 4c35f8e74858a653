"""The program audit (issue 42): fit's train step lowered for CUDA on the CPU, for small
versions of benchmarks/gpu.py's ResNet-18 and GPT-2-style LM, is free of the traps; each trap
is found, naming its layer, by mf.utils.audit_step and ThroughputMonitor(audit=...); the
compiled step needs the memory of the hand-written loop's."""

import sys
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

import mirrorfit as mf
from mirrorfit._src.distribute.batch import Batch
from mirrorfit._src.trainers import audit
from tests.helpers import REPO_ROOT, mirrored_strategy

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

import handwritten
from workloads import DecoderLM, ResNet18, Workload

BATCH = 8
LM = Workload(DecoderLM(vocab=512, seq=32, layers=2, d_model=64, heads=4), (32,), jnp.int32)
RESNET = Workload(ResNet18(8, (1, 1)), (32, 32, 3))


def _data(workload):
    rng = np.random.default_rng(0)
    if workload is LM:
        x = rng.integers(0, 512, (BATCH, 32)).astype(np.int32)
        return x, np.roll(x, -1, axis=1)
    return rng.normal(size=(BATCH, 32, 32, 3)).astype(np.float32), np.arange(BATCH) % 10


def _model(workload, replicas=1, loss=None, policy="mixed_bfloat16"):
    """As gpu.py's mirrorfit_fit case: the policy, Adam, crossentropy from logits."""
    with mirrored_strategy(replicas).scope():
        model = mf.Model(workload.module, input_shape=workload.input_shape,
                         input_dtype=workload.input_dtype, dtype_policy=policy)
        model.compile("adam", loss or mf.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@pytest.mark.parametrize("workload, replicas", [
    pytest.param(RESNET, 1, id="resnet18-D1", marks=pytest.mark.slow),  # ~15 s: its build
    pytest.param(LM, 1, id="lm-D1"),
    pytest.param(LM, 2, id="lm-D2", marks=pytest.mark.slow)])
def test_fit_train_step_lowered_for_cuda_has_no_trap(workload, replicas):
    model = _model(workload, replicas)
    x, y = _data(workload)
    # Any trap would warn, and conftest turns mirrorfit's warnings into errors.
    assert mf.utils.audit_step(model, x, y, batch_size=BATCH, platform="cuda") == []
    program = audit.train_step_program(model.trainer, model, x, y, batch_size=BATCH)
    text = audit.lowered(program, "cuda").as_text()
    donated = text.count("tf.aliasing_output") + text.count("jax.buffer_donor")
    assert donated == len(jax.tree.leaves(model.state))  # the whole state, nothing else
    assert ("stablehlo.all_reduce" in text) == (replicas > 1)


@pytest.mark.slow
@pytest.mark.parametrize("workload, trainer", [(RESNET, handwritten.BatchNormTrainer),
                                               (LM, handwritten.LMTrainer)],
                         ids=["resnet18", "lm"])
def test_compiled_train_step_memory_within_5_percent_of_the_hand_written_step(workload,
                                                                             trainer):
    model = _model(workload)
    x, y = _data(workload)
    program = audit.train_step_program(model.trainer, model, x, y, batch_size=BATCH)
    ours = audit.lowered(program).compile().memory_analysis()
    hand = trainer(workload, handwritten.make_mesh(1), BATCH, compute_dtype=jnp.bfloat16)
    theirs = hand.step.trace(hand.state, *hand._placed(x, y)).lower().compile(
        ).memory_analysis()

    def footprint(m):  # the step's device bytes: inputs, outputs not aliased to them, temps
        return (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
                + m.temp_size_in_bytes)

    assert footprint(ours) == pytest.approx(footprint(theirs), rel=0.05)
    assert ours.temp_size_in_bytes == pytest.approx(theirs.temp_size_in_bytes, rel=0.05)


class EmbedLM(nn.Module):
    """A tied-embedding LM on Flax's ``nn.Embed``, which a policy casts whole (the traps)."""

    @nn.compact
    def __call__(self, tokens):
        embed = nn.Embed(300, 16, name="wte")
        return embed.attend(nn.Dense(16, name="mix")(embed(tokens)))


def _optax_loss(y_true, y_pred):
    return optax.losses.softmax_cross_entropy_with_integer_labels(y_pred, y_true).mean(-1)


def _tokens():
    x = np.random.default_rng(1).integers(0, 300, (BATCH, 8)).astype(np.int32)
    return x, np.roll(x, -1, axis=1)


def test_audit_step_names_the_embedding_layer_cast_whole_and_the_gathered_loss():
    model = _model(Workload(EmbedLM(), (8,), jnp.int32), loss=_optax_loss)
    with pytest.warns(mf.MirrorfitWarning) as warned:
        traps = mf.utils.audit_step(model, *_tokens(), batch_size=BATCH, platform="cuda")
    assert [str(w.message) for w in warned] == [trap.message for trap in traps]
    found = {(trap.kind, trap.layer) for trap in traps}
    assert found == {("table_convert", "wte"), ("half_scatter_add", "wte"),
                     ("logits_scatter", "")}
    scatter = next(trap for trap in traps if trap.kind == "logits_scatter")
    assert "[8, 8, 300] float32" in scatter.message  # per replica: batch, tokens, classes


def test_mf_embedding_in_the_same_model_has_no_trap():
    class LayersLM(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            embed = mf.layers.Embedding(300, 16, name="wte")
            h = nn.Dense(16, name="mix")(embed(tokens).astype(jnp.bfloat16))
            return h @ embed.variables["params"]["embeddings"].astype(h.dtype).T

    model = _model(Workload(LayersLM(), (8,), jnp.int32))
    assert mf.utils.audit_step(model, *_tokens(), batch_size=BATCH, platform="cuda") == []


class _State(NamedTuple):
    params: Any
    opt_state: Any


def _program(step, donate):
    """A hand-made `StepProgram` of one replica: ``step(state, statistics, batch)``."""
    state = _State({"dense": {"kernel": jnp.ones((4, 3))}}, jnp.zeros(3))
    batch = Batch(jnp.ones((BATCH, 4)), jnp.zeros(BATCH, jnp.int32), None, jnp.ones(BATCH, bool))
    fn = jax.jit(step, donate_argnums=0 if donate else ())
    return audit.StepProgram(fn, (state, jnp.zeros(2), batch), 1)


def test_program_traps_finds_a_collective_at_one_replica():
    mesh = jax.make_mesh((1,), ("batch",), devices=jax.devices()[:1])

    def step(state, statistics, batch):
        def body(state, batch):
            grad = jax.lax.psum(batch.x.sum(0)[:, None] * state.params["dense"]["kernel"],
                                "batch")
            return state._replace(params={"dense": {"kernel": grad}})
        return jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P())(
            state, batch), statistics

    traps = audit.program_traps(_program(step, donate=True), "cuda")
    assert [trap.kind for trap in traps] == ["collective"]
    assert "stablehlo.all_reduce" in traps[0].message


def test_program_traps_finds_every_undonated_state_leaf():
    def step(state, statistics, batch):
        return state._replace(opt_state=state.opt_state + 1), statistics

    assert audit.program_traps(_program(step, donate=True)) == []
    traps = audit.program_traps(_program(step, donate=False))
    assert [(trap.kind, trap.layer) for trap in traps] == [
        ("undonated", "state.params['dense']['kernel']"), ("undonated", "state.opt_state")]


def test_throughput_monitor_audit_warns_of_the_running_fits_traps():
    model = _model(Workload(EmbedLM(), (8,), jnp.int32))
    x, y = _tokens()
    with pytest.warns(mf.MirrorfitWarning) as warned:
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
                  callbacks=[mf.callbacks.ThroughputMonitor(audit="cuda")])
    messages = [str(w.message) for w in warned]
    assert len(messages) == 2 and all("layer 'wte'" in m for m in messages), messages
    assert "half_scatter_add" in messages[1] and "table_convert" in messages[0]


def test_throughput_monitor_rejects_a_bad_audit_argument():
    with pytest.raises(ValueError, match="audit=3"):
        mf.callbacks.ThroughputMonitor(audit=3)  # type: ignore[arg-type]
