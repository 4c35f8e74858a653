"""``fit`` of keras-io's DCGAN (two models, two optimizer objects, its own ``train_step``) vs
the same GAN in a hand-written ``jax.jit(jax.shard_map(...))`` loop.

    python benchmarks/gan.py [--rounds 3] [--cases 1:64 8:64]

Issue 40 runs a model's own ``train_step`` in the one compiled step, with every optimizer
object's state carried in it, so the DCGAN's ``fit`` should run at the speed of the loop a
JAX expert writes for the same GAN. For each case ``D:B`` (D simulated CPU devices, global
batch B of 16x16x1 images) each round runs one fresh process per variant, interleaved, for
2 epochs of 4,096 random images (no shuffle) after a compiling warm-up, and prints images/s
and the ratio of the medians (fit / hand-written). Both variants draw the same random
tensors per step (latent vectors, label noise), compute the same losses and apply two Adam
updates with the gradients averaged over the replicas, with at most two steps in flight;
``fit`` also keeps the two Mean trackers and shows no progress bar (``verbose=0``).
Nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ONE_RUN = r"""
import os, sys, time
D, B, variant = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={D}"
os.environ["JAX_PLATFORMS"] = "cpu"
import flax.linen as nn, jax, jax.numpy as jnp, numpy as np, optax
from jax.sharding import NamedSharding, PartitionSpec as P
import mirrorfit as mf
from mirrorfit import layers, ops
keras, LATENT, ROWS = mf, 32, 4096
images = np.random.default_rng(0).uniform(size=(ROWS, 16, 16, 1)).astype(np.float32)


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator, self.generator, self.latent_dim = discriminator, generator, latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        batch_size = ops.shape(real_images)[0]
        z = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        combined = ops.concatenate([self.generator(z), real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)
        labels += 0.05 * keras.random.uniform(ops.shape(labels), seed=self.seed_generator)
        d_loss, grads = mf.value_and_grad(
            lambda: self.loss_fn(labels, self.discriminator(combined)),
            self.discriminator.trainable_weights)()
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        z = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        g_loss, grads = mf.value_and_grad(
            lambda: self.loss_fn(ops.zeros((batch_size, 1)),
                                 self.discriminator(self.generator(z))),
            self.generator.trainable_weights)()
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def mirrorfit_gan():
    with mf.MirroredStrategy(jax.devices()[:D]).scope():
        d = keras.Sequential([keras.Input(shape=(16, 16, 1)),
                              layers.Conv2D(16, 3, strides=2, padding="same"),
                              layers.LeakyReLU(negative_slope=0.2),
                              layers.Conv2D(32, 3, strides=2, padding="same"),
                              layers.LeakyReLU(negative_slope=0.2), layers.Flatten(),
                              layers.Dense(1, activation="sigmoid")])
        g = keras.Sequential([keras.Input(shape=(LATENT,)), layers.Dense(4 * 4 * 32),
                              layers.Reshape((4, 4, 32)),
                              layers.Conv2DTranspose(32, 3, strides=2, padding="same"),
                              layers.LeakyReLU(negative_slope=0.2),
                              layers.Conv2DTranspose(16, 3, strides=2, padding="same"),
                              layers.LeakyReLU(negative_slope=0.2),
                              layers.Conv2D(1, 3, padding="same", activation="sigmoid")])
        gan = GAN(d, g, LATENT)
        gan.compile(keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-4),
                    keras.losses.BinaryCrossentropy())
    return lambda epochs, rows: gan.fit(images[:rows], epochs=epochs, batch_size=B,
                                        verbose=0, shuffle=False)


class Disc(nn.Module):
    @nn.compact
    def __call__(self, x):
        for features in (16, 32):
            x = nn.leaky_relu(nn.Conv(features, (3, 3), strides=2, padding="SAME")(x), 0.2)
        return nn.sigmoid(nn.Dense(1)(x.reshape(x.shape[0], -1)))


class Gen(nn.Module):
    @nn.compact
    def __call__(self, z):
        x = nn.Dense(4 * 4 * 32)(z).reshape(z.shape[0], 4, 4, 32)
        for features in (32, 16):
            x = nn.leaky_relu(nn.ConvTranspose(features, (3, 3), strides=(2, 2), padding="SAME",
                                               transpose_kernel=True)(x), 0.2)  # as Keras
        return nn.sigmoid(nn.Conv(1, (3, 3), padding="SAME")(x))


def bce(y, p):  # Keras' BinaryCrossentropy on probabilities, mean over the batch
    p = jnp.clip(p, 1e-7, 1 - 1e-7)
    return -jnp.mean(y * jnp.log(p) + (1 - y) * jnp.log(1 - p))


def handwritten_gan():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:D]), ("batch",))
    rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    disc, gen, tx = Disc(), Gen(), optax.adam(1e-4)
    dp = disc.init(jax.random.key(1), jnp.zeros((1, 16, 16, 1)))
    gp = gen.init(jax.random.key(2), jnp.zeros((1, LATENT)))
    state = jax.device_put((dp, gp, tx.init(dp), tx.init(gp), jax.random.key(0)), rep)

    def per_replica(state, real):
        dp, gp, do, go, key = state
        k1, k2, k3 = jax.random.split(jax.random.fold_in(key, jax.lax.axis_index("batch")), 3)
        b = real.shape[0]
        combined = jnp.concatenate([gen.apply(gp, jax.random.normal(k1, (b, LATENT))), real])
        labels = jnp.concatenate([jnp.ones((b, 1)), jnp.zeros((b, 1))])
        labels += 0.05 * jax.random.uniform(k2, labels.shape)
        d_loss, dg = jax.value_and_grad(lambda p: bce(labels, disc.apply(p, combined)))(dp)
        du, do = tx.update(jax.lax.pmean(dg, "batch"), do, dp)
        dp = optax.apply_updates(dp, du)
        z = jax.random.normal(k3, (b, LATENT))
        g_loss, gg = jax.value_and_grad(
            lambda p: bce(jnp.zeros((b, 1)), disc.apply(dp, gen.apply(p, z))))(gp)
        gu, go = tx.update(jax.lax.pmean(gg, "batch"), go, gp)
        gp = optax.apply_updates(gp, gu)
        key = jax.random.fold_in(key, 1)
        return (dp, gp, do, go, key), jax.lax.pmean(jnp.stack([d_loss, g_loss]), "batch")

    step = jax.jit(jax.shard_map(per_replica, mesh=mesh, in_specs=(P(), P("batch")),
                                 out_specs=P(), check_vma=False), donate_argnums=0)

    def epochs(n, rows):
        nonlocal state
        prev = None
        for _ in range(n):
            for i in range(0, rows - B + 1, B):
                state, losses = step(state, jax.device_put(images[i:i + B], shard))
                if prev is not None:  # two steps in flight (the CPU all-reduce hazard)
                    prev.block_until_ready()
                prev = losses
        jax.block_until_ready(state)

    return epochs


run = mirrorfit_gan() if variant == "fit" else handwritten_gan()
run(1, 4 * B + B // 2 if variant == "fit" else 4 * B)  # compile
start = time.perf_counter()
run(2, ROWS)
print(2 * ROWS / (time.perf_counter() - start))
"""


def _images_per_second(devices: int, batch: int, variant: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", ONE_RUN, str(devices), str(batch), variant],
                         cwd=REPO, env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=["1:64", "8:64"])
    args = parser.parse_args(argv)
    for case in args.cases:
        devices, batch = map(int, case.split(":"))
        runs: dict[str, list[float]] = {"handwritten": [], "fit": []}
        for _ in range(args.rounds):
            for variant in runs:
                runs[variant].append(_images_per_second(devices, batch, variant))
        medians = {variant: statistics.median(v) for variant, v in runs.items()}
        print(f"D={devices} batch={batch}: " + ", ".join(
            f"{variant} {[round(v) for v in values]}" for variant, values in runs.items())
            + f" images/s; fit/hand-written {medians['fit'] / medians['handwritten']:.2f}")


if __name__ == "__main__":
    main()
