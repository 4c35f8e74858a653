"""A model's own ``train_step`` on objects (`mirrorfit._src.trainers.object_step`): keras-io's
DCGAN renamed to ``mf`` (the one gradient line aside) trains under ``fit`` with its two
optimizer objects carried in the step's state (`TrainState.other_variables`), counts their
iterations, continues them in a second ``fit`` and resumes bit for bit after a crash."""

import re

import jax
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import layers, ops
from mirrorfit._src.trainers.audit import lowered, train_step_program
from tests.helpers import Interrupt, interrupt_after, tree_equal

keras = mf  # the example's ``keras.`` prefix, renamed
LATENT_DIM, ROWS, BATCH = 8, 48, 16  # 3 steps per epoch


class GAN(keras.Model):
    """keras-io's ``examples/generative/dcgan_overriding_train_step.py``, tf.keras version,
    with its two ``tf.GradientTape`` blocks written as the documented gradient line."""

    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = keras.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        generated_images = self.generator(random_latent_vectors)
        combined_images = ops.concatenate([generated_images, real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))],
                                 axis=0)
        labels += 0.05 * keras.random.uniform(ops.shape(labels), seed=self.seed_generator)
        d_loss, grads = mf.value_and_grad(
            lambda: self.loss_fn(labels, self.discriminator(combined_images)),
            self.discriminator.trainable_weights)()
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        random_latent_vectors = keras.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        misleading_labels = ops.zeros((batch_size, 1))
        g_loss, grads = mf.value_and_grad(
            lambda: self.loss_fn(misleading_labels,
                                 self.discriminator(self.generator(random_latent_vectors))),
            self.generator.trainable_weights)()
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def _gan(replicas, shard_optimizer_state=False, shard_params=False):
    strategy = mf.MirroredStrategy(jax.devices()[:replicas],
                                   shard_optimizer_state=shard_optimizer_state,
                                   shard_params=shard_params)
    with strategy.scope():
        discriminator = keras.Sequential([
            keras.Input(shape=(8, 8, 1)),
            layers.Conv2D(4, kernel_size=3, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Flatten(),
            layers.Dense(1, activation="sigmoid"),
        ], name="discriminator", seed=1)
        generator = keras.Sequential([
            keras.Input(shape=(LATENT_DIM,)),
            layers.Dense(4 * 4 * 4),
            layers.Reshape((4, 4, 4)),
            layers.Conv2DTranspose(4, kernel_size=3, strides=2, padding="same"),
            layers.LeakyReLU(negative_slope=0.2),
            layers.Conv2D(1, kernel_size=3, padding="same", activation="sigmoid"),
        ], name="generator", seed=2)
        gan = GAN(discriminator=discriminator, generator=generator, latent_dim=LATENT_DIM)
        gan.compile(d_optimizer=keras.optimizers.Adam(learning_rate=0.001),
                    g_optimizer=keras.optimizers.Adam(learning_rate=0.001),
                    loss_fn=keras.losses.BinaryCrossentropy())
    return gan


IMAGES = np.random.default_rng(0).uniform(size=(ROWS, 8, 8, 1)).astype(np.float32)


def _state(gan):
    """Everything a resumed run must reproduce: both models' weights, both optimizers'
    variables (iterations and slots), read through the objects as a user would."""
    return ([v.numpy() for v in gan.discriminator.weights + gan.generator.weights],
            [v.numpy() for v in gan.d_optimizer.variables + gan.g_optimizer.variables])


@pytest.mark.parametrize("replicas", [1, 8])
def test_dcgan_trains_and_both_optimizers_count_the_steps(replicas):
    gan = _gan(replicas)
    before = [w.copy() for w in _state(gan)[0]]
    history = gan.fit(IMAGES, epochs=2, batch_size=BATCH, verbose=0)
    assert set(history.history) == {"d_loss", "g_loss"}
    assert all(np.isfinite(history.history["d_loss"] + history.history["g_loss"]))
    assert int(gan.d_optimizer.iterations) == int(gan.g_optimizer.iterations) == 2 * 3
    weights, _ = _state(gan)
    assert all(not np.array_equal(a, b) for a, b in zip(weights, before))
    gan.fit(IMAGES, epochs=1, batch_size=BATCH, verbose=0)  # a second fit continues them
    assert int(gan.d_optimizer.iterations) == int(gan.g_optimizer.iterations) == 3 * 3


def test_the_optimizers_iteration_counts_cost_no_all_reduce():
    """Every replica advances ``iterations`` alike, so the one update keeps it as it is: no
    integer all-reduce for its Keras ``aggregation="only_first_replica"`` (issue 40's GAN
    benchmark)."""
    gan = _gan(8)
    gan.fit(IMAGES[:BATCH], epochs=1, batch_size=BATCH, verbose=0)
    compiled = lowered(train_step_program(gan.trainer)).compile().as_text()
    reduced = re.findall(r"= (\(?[^=]*?\)?) all-reduce\(", compiled)
    assert reduced, "the step all-reduces its gradients"
    assert not [types for types in reduced if "s32" in types], reduced
    assert int(gan.d_optimizer.iterations) == int(gan.g_optimizer.iterations) == 1


def test_dcgan_splits_both_optimizers_state_under_shard_optimizer_state():
    gan = _gan(8, shard_optimizer_state=True)
    history = gan.fit(IMAGES, epochs=1, batch_size=BATCH, verbose=0)
    assert all(np.isfinite(history.history["d_loss"]))
    for name in ("d_optimizer", "g_optimizer"):
        leaves = jax.tree.leaves(gan.state.other_variables[name])
        split = [leaf for leaf in leaves if leaf.addressable_shards[0].data.size < leaf.size]
        assert split, f"no leaf of {name}'s state is split"
        assert all(leaf.addressable_shards[0].data.size == leaf.size // 8 for leaf in split)
    assert int(gan.g_optimizer.iterations) == 3


@pytest.mark.slow  # two GANs compiled at 8 replicas: about 20 s
def test_dcgan_under_shard_params_equals_mirrored_with_both_models_split():
    # Each step gathers both models' weights for the user's code (the generator step reads
    # the discriminator as the first optimizer left it) and keeps their blocks.
    runs = []
    for shard in (False, True):
        gan = _gan(8, shard_params=shard)
        history = gan.fit(IMAGES, epochs=1, batch_size=BATCH, verbose=0)
        runs.append((gan, history.history))
    (mirrored, expected), (sharded, got) = runs
    for key in ("d_loss", "g_loss"):
        np.testing.assert_allclose(got[key], expected[key], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(_state(sharded)), jax.tree.leaves(_state(mirrored))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for model in (sharded.discriminator, sharded.generator):
        assert any(not leaf.sharding.is_fully_replicated for leaf in jax.tree.leaves(model.params))


def test_dcgan_resumes_bit_for_bit_after_a_crash(tmp_path):
    uninterrupted = _gan(2)
    uninterrupted.fit(IMAGES, epochs=2, batch_size=BATCH, verbose=0)

    crashed = _gan(2)
    backup = mf.callbacks.BackupAndRestore(tmp_path, save_freq=2)
    with pytest.raises(Interrupt):
        crashed.fit(IMAGES, epochs=2, batch_size=BATCH, verbose=0,
                    callbacks=[backup, interrupt_after(crashed, 4)])
    resumed = _gan(2)  # new objects: the optimizers' state comes from the backup
    resumed.fit(IMAGES, epochs=2, batch_size=BATCH, verbose=0,
                callbacks=[mf.callbacks.BackupAndRestore(tmp_path, save_freq=2)])
    tree_equal(_state(resumed), _state(uninterrupted))
    assert int(resumed.d_optimizer.iterations) == 6


def test_model_without_call_trains_its_parts_but_predict_names_call():
    gan = _gan(1)
    with pytest.raises(NotImplementedError, match=r"GAN defines no call\(self, inputs"):
        gan.predict(IMAGES[:4], verbose=0)
    assert jax.tree.leaves(gan.generator.predict(np.zeros((2, LATENT_DIM), np.float32),
                                                 verbose=0))[0].shape == (2, 8, 8, 1)


class WGAN(keras.Model):
    """keras-io's ``examples/generative/wgan_gp.py``, renamed: a gradient penalty (the
    critic's gradient with respect to its inputs, differentiated again for its weights) and
    ``d_steps`` critic updates per generator update, keyed on the critic's iteration count
    with ``ops.cond`` (whose branch updates the generator)."""

    def __init__(self, discriminator, generator, latent_dim, discriminator_extra_steps=5,
                 gp_weight=10.0):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_steps = discriminator_extra_steps
        self.gp_weight = gp_weight
        self.seed_generator = keras.random.SeedGenerator(7)

    def compile(self, d_optimizer, g_optimizer, d_loss_fn, g_loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.d_loss_fn = d_loss_fn
        self.g_loss_fn = g_loss_fn

    def gradient_penalty(self, batch_size, real_images, fake_images):
        alpha = keras.random.uniform([batch_size, 1, 1, 1], 0.0, 1.0, seed=self.seed_generator)
        interpolated = real_images + alpha * (fake_images - real_images)
        grads = jax.grad(lambda x: ops.sum(self.discriminator(x, training=True)))(interpolated)
        norm = ops.sqrt(ops.sum(ops.square(grads), axis=[1, 2, 3]))
        return ops.mean((norm - 1.0) ** 2)

    def train_step(self, real_images):
        batch_size = ops.shape(real_images)[0]
        noise = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)

        def critic_loss():
            fake_images = self.generator(noise, training=True)
            fake_logits = self.discriminator(fake_images, training=True)
            real_logits = self.discriminator(real_images, training=True)
            d_cost = self.d_loss_fn(real_img=real_logits, fake_img=fake_logits)
            gp = self.gradient_penalty(batch_size, real_images, fake_images)
            return d_cost + gp * self.gp_weight

        d_loss, d_gradient = mf.value_and_grad(critic_loss,
                                               self.discriminator.trainable_variables)()
        self.d_optimizer.apply_gradients(zip(d_gradient,
                                             self.discriminator.trainable_variables))

        def generator_step():
            latent = keras.random.normal(shape=(batch_size, self.latent_dim),
                                         seed=self.seed_generator)
            g_loss, gen_gradient = mf.value_and_grad(
                lambda: self.g_loss_fn(self.discriminator(self.generator(latent, training=True),
                                                          training=True)),
                self.generator.trainable_variables)()
            self.g_optimizer.apply_gradients(zip(gen_gradient,
                                                 self.generator.trainable_variables))
            return g_loss

        g_loss = ops.cond(self.d_optimizer.iterations % self.d_steps == 0, generator_step,
                          lambda: ops.zeros(()))
        return {"d_loss": d_loss, "g_loss": g_loss}


def test_wgan_gp_trains_with_a_nested_gradient_and_a_generator_step_every_five():
    gan = _gan(2)  # its discriminator and generator, in a WGAN
    with gan.strategy.scope():
        wgan = WGAN(gan.discriminator, gan.generator, LATENT_DIM)
        wgan.compile(d_optimizer=keras.optimizers.Adam(learning_rate=0.0002, beta_1=0.5),
                     g_optimizer=keras.optimizers.Adam(learning_rate=0.0002, beta_1=0.5),
                     d_loss_fn=lambda real_img, fake_img: ops.mean(fake_img) - ops.mean(real_img),
                     g_loss_fn=lambda fake_img: -ops.mean(fake_img))
    generator = [w.numpy().copy() for w in wgan.generator.weights]
    history = wgan.fit(IMAGES, epochs=4, batch_size=BATCH, verbose=0)  # 12 critic steps
    assert all(np.isfinite(history.history["d_loss"]))
    assert int(wgan.d_optimizer.iterations) == 12
    assert int(wgan.g_optimizer.iterations) == 2  # after critic updates 5 and 10
    assert all(not np.array_equal(w.numpy(), old)
               for w, old in zip(wgan.generator.weights, generator))


def test_audit_step_lowers_a_model_own_train_step_on_images_alone():
    """``mf.utils.audit_step`` asks for targets as ``fit`` does: none for a model whose own
    ``train_step`` takes the images alone; the GAN's one-replica program has no trap."""
    assert mf.utils.audit_step(_gan(1), IMAGES, batch_size=BATCH, platform="cuda") == []
