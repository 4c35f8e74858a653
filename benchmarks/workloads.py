"""Benchmark workloads: the Flax modules, their input shapes and the random data sets.

Every case (hand-written, mirrorfit, Keras) trains the same architecture on the same
seeded data (``synthetic.make_data``, ``synthetic.make_tokens``), so throughputs within one
run are comparable. The GPU benchmark's models (`ResNet18`, `DecoderLM`) are float32 modules:
bf16 compute comes from the dtype policy, or from the same casts in the hand-written loop;
their Keras 3 twins are in ``peers.py``.
"""

import functools
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import mirrorfit as mf
from synthetic import input_shape


class CNN(nn.Module):
    """Two strided 3x3 convolutions and a dense softmax head.

    Inputs ``[batch, 32, 32, 3]``, outputs class probabilities ``[batch, 10]``.
    """

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3), strides=2)(x))
        x = nn.relu(nn.Conv(32, (3, 3), strides=2)(x))
        x = x.reshape(x.shape[0], -1)
        return nn.softmax(nn.Dense(10)(x))


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with BatchNorm and an identity (or 1x1) shortcut.

    Computes in its inputs' and params' dtype (Flax's ``dtype=None``), so a dtype policy
    decides: bf16 under ``"mixed_bfloat16"``, float32 otherwise.
    """

    filters: int
    strides: int = 1

    @nn.compact
    def __call__(self, x, train: bool):
        conv = functools.partial(nn.Conv, use_bias=False)
        norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9)
        y = nn.relu(norm()(conv(self.filters, (3, 3), self.strides)(x)))
        y = norm()(conv(self.filters, (3, 3))(y))
        if x.shape != y.shape:
            x = norm()(conv(self.filters, (1, 1), self.strides)(x))
        return nn.relu(x + y)


class ResNet18(nn.Module):
    """ResNet-18 for 32x32 images (CIFAR variant: 3x3 stem, no max-pool).

    Inputs ``[batch, 32, 32, 3]``, outputs logits ``[batch, 10]``. A float32 module: params
    are created float32 and every layer computes in the dtype of its inputs and params, so
    bf16 compute comes from outside, from ``mf.Model(..., dtype_policy="mixed_bfloat16")``
    or the same casts written by hand (``handwritten.BatchNormTrainer(compute_dtype=...)``).
    ``width`` scales the stages' channels (64, 128, 256, 512 at ``width=64``);
    ``stage_blocks`` gives the blocks per stage (ResNet-18: ``(2, 2, 2, 2)``); smaller values
    are for smoke tests.
    """

    width: int = 64
    stage_blocks: tuple = (2, 2, 2, 2)

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(self.width, (3, 3), use_bias=False)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9)(x))
        for stage, blocks in enumerate(self.stage_blocks):
            for block in range(blocks):
                strides = 2 if stage > 0 and block == 0 else 1
                x = BasicBlock(self.width * 2**stage, strides)(x, train)
        return nn.Dense(10)(x.mean(axis=(1, 2)))


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one fused QKV projection, `jax.nn.dot_product_attention`.

    ``implementation`` is passed to ``jax.nn.dot_product_attention``: ``"cudnn"`` (flash
    attention, GPU only, bf16/fp16; float32 calls fall back to XLA's) or ``None`` (XLA picks;
    on CPU the plain softmax).
    """

    heads: int
    implementation: str | None = None

    @nn.compact
    def __call__(self, x):
        batch, seq, d_model = x.shape
        qkv = nn.Dense(3 * d_model)(x).reshape(batch, seq, 3, self.heads, d_model // self.heads)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        # cuDNN's fused attention takes only fp16/bf16: a float32 call (the init trace, a
        # float32 run) uses XLA's
        half = q.dtype in (jnp.bfloat16, jnp.float16)
        y = jax.nn.dot_product_attention(q, k, v, is_causal=True,
                                         implementation=self.implementation if half else None)
        return nn.Dense(d_model)(y.reshape(batch, seq, d_model))


class DecoderLM(nn.Module):
    """A GPT-2-style decoder-only language model (GPT-2 small at the defaults: 124M params).

    Token and learned position embeddings, ``layers`` pre-LayerNorm blocks (causal
    self-attention, then a GELU MLP of width ``4 * d_model``, each with a residual), a final
    LayerNorm, and the output layer tied to the token embedding (``logits = h @ E^T``, as
    GPT-2). Inputs int tokens ``[batch, seq]``, outputs logits ``[batch, seq, vocab]``. A
    float32 module like `ResNet18`: bf16 compute comes from the policy (or the hand-written
    casts). LayerNorm epsilon 1e-5 and GELU's tanh approximation, as GPT-2.

    The token embedding is ``mf.layers.Embedding`` (``wte``, initialized as GPT-2's, N(0,
    0.02)), as Keras' ``Embedding`` in the Keras twin: a dtype policy leaves its table float32,
    the rows looked up are cast to the compute dtype (that of the position table, which the
    policy casts), and only the tied output layer reads the table whole, cast as a Dense
    kernel would be. (``nn.Embed`` would get a bf16 copy of the whole table and its gradient
    as a bf16 scatter-add: issue 42.) The hand-written loop leaves ``wte`` uncast too.
    """

    vocab: int = 50_304  # GPT-2's 50,257 padded to a multiple of 64
    seq: int = 1024
    layers: int = 12
    d_model: int = 768
    heads: int = 12
    attention: str | None = None  # ``jax.nn.dot_product_attention``'s implementation

    @nn.compact
    def __call__(self, tokens):
        embed = mf.layers.Embedding(self.vocab, self.d_model, name="wte",
                                    embeddings_initializer=nn.initializers.normal(0.02))
        positions = self.param("wpe", nn.initializers.normal(0.02), (self.seq, self.d_model))
        x = embed(tokens).astype(positions.dtype) + positions[:tokens.shape[1]]
        norm = functools.partial(nn.LayerNorm, epsilon=1e-5)
        for _ in range(self.layers):
            x = x + CausalSelfAttention(self.heads, self.attention)(norm()(x))
            h = nn.gelu(nn.Dense(4 * self.d_model)(norm()(x)))
            x = x + nn.Dense(self.d_model)(h)
        h = norm()(x)
        return h @ embed.variables["params"]["embeddings"].astype(h.dtype).T


def lm_params_for_mfu(module: DecoderLM) -> int:
    """N of the MFU formula: every param except the position embedding (as nanoGPT).

    The tied token embedding counts once, for its matmul as the output layer (its lookup,
    like the position embedding's, costs no FLOPs).
    """
    tokens = jax.ShapeDtypeStruct((1, module.seq), jnp.int32)
    params = jax.eval_shape(module.init, jax.random.key(0), tokens)["params"]
    total = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(params))
    return total - module.seq * module.d_model


def lm_train_flops_per_token(module: DecoderLM) -> float:
    """``6 N + 12 L H Q T`` (PaLM, appendix B), attention not halved for the causal mask.

    ``N`` from `lm_params_for_mfu`, ``L`` layers, ``H`` heads, ``Q`` head size, ``T``
    sequence length: ``6 N`` is the forward and backward matmuls of the weights, ``12 L H Q
    T`` those of the attention scores and the weighted values. The causal mask skips half of
    the score matrix in a flash kernel, but the convention (PaLM, nanoGPT) counts it whole.
    """
    head_size = module.d_model // module.heads
    return (6 * lm_params_for_mfu(module)
            + 12 * module.layers * module.heads * head_size * module.seq)


class Workload(NamedTuple):
    """A model and the shape and dtype of one example."""

    module: nn.Module  # maps ``[batch, *input_shape]`` to probabilities or logits
    input_shape: tuple  # one example's shape, without the batch dim
    input_dtype: Any = jnp.float32  # int32 for token inputs


def get_workload(name: str) -> Workload:
    """Returns the named workload: ``"mlp"`` (784->128 relu->10) or ``"cnn"`` (32x32x3)."""
    shape = input_shape(name)
    if name == "mlp":
        return Workload(nn.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax]), shape)
    return Workload(CNN(), shape)

