"""Tests for Model subclasses overriding compute_loss / train_step / test_step, run inside
fit's compiled step, at 1 and 8 replicas, and for mf.apply_gradients."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import mirrorfit as mf

_rng = np.random.default_rng(0)
X = _rng.normal(size=(13, 4)).astype(np.float32)  # 13 rows: padded on 8 replicas
Y = _rng.normal(size=(13, 3)).astype(np.float32)
RTOL, ATOL = 1e-5, 1e-6  # f32 sums reduced in a different order on 1 vs 8 replicas
PENALTY = 0.05


class L2InComputeLoss(mf.Model):
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        loss = super().compute_loss(x, y, y_pred, sample_weight, training)
        return loss + PENALTY * jnp.sum(self.params["kernel"] ** 2)


def _compiled(cls, n, module, **compile_kwargs):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = cls(module, input_shape=(4,))
        model.compile(**compile_kwargs)
    return model


@pytest.mark.parametrize("n", [1, 8])
def test_compute_loss_l2_term_equals_hand_computed_training(n, allclose):
    model = _compiled(L2InComputeLoss, n, nn.Dense(3), optimizer=mf.optimizers.SGD(0.1),
                      loss="mse", metrics=["mae"])
    initial = jax.device_get(model.params)
    history = model.fit(X, Y, batch_size=5, epochs=2, verbose=0, shuffle=False)

    def objective(p, x, y):  # the same training, written by hand on one device
        y_pred = nn.Dense(3).apply({"params": p}, x)
        return jnp.mean((y_pred - y) ** 2) + PENALTY * jnp.sum(p["kernel"] ** 2)

    grad = jax.jit(jax.grad(objective))
    params, losses = initial, []
    for _ in range(2):
        losses.append(0.0)
        for start in range(0, 13, 5):
            x, y = X[start:start + 5], Y[start:start + 5]
            losses[-1] += float(objective(params, x, y)) * len(x) / 13
            params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grad(params, x, y))
    allclose(model.params, params, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(history.history["loss"], losses, rtol=1e-5)
    assert set(history.history) == {"loss", "mae"}


class Gan(nn.Module):
    """A 2-D generator and a discriminator in one module (``method=`` picks one)."""

    def setup(self):
        self.generator = nn.Dense(2)
        self.discriminator = nn.Dense(1)

    def __call__(self, z):
        return self.discriminator(self.generator(z))

    def generate(self, z):
        return self.generator(z)

    def discriminate(self, x):
        return self.discriminator(x)[:, 0]


class GanModel(mf.Model):
    """GAN-style training: two optimizers, alternating updates, custom logs."""

    def compile(self, d_optimizer, g_optimizer):
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer
        # One optimizer state holding both; train_step updates each part with its optimizer.
        both = optax.GradientTransformation(
            lambda p: {"d": d_optimizer.init(p["discriminator"]),
                       "g": g_optimizer.init(p["generator"])}, None)
        super().compile(optimizer=both)

    def train_step(self, state, batch):
        real, z = batch.x, batch.y  # the noise comes with the batch: replica-independent
        apply = self.module.apply

        def logits(p, x):
            return apply({"params": p}, x, method=Gan.discriminate)

        def fake(p):
            return apply({"params": p}, z, method=Gan.generate)

        def bce(lg, label):
            return mf.compute_average_loss(optax.sigmoid_binary_cross_entropy(
                lg, jnp.full_like(lg, label)), batch.sample_weight)

        params = state.params

        def d_loss(d):
            p = {**params, "discriminator": d}
            return bce(logits(p, real), 1.0) + bce(logits(p, fake(p)), 0.0)

        d_value, d_grads = jax.value_and_grad(d_loss)(params["discriminator"])
        d_params, d_state = mf.apply_gradients(self.d_optimizer, d_grads, state.opt_state["d"],
                                               params["discriminator"])
        params = {**params, "discriminator": d_params}

        def g_loss(g):
            p = {**params, "generator": g}
            return bce(logits(p, fake(p)), 1.0)

        g_value, g_grads = jax.value_and_grad(g_loss)(params["generator"])
        g_params, g_state = mf.apply_gradients(self.g_optimizer, g_grads, state.opt_state["g"],
                                               params["generator"])
        context = mf.get_replica_context()
        logs = {"d_loss": context.all_reduce("sum", d_value),
                "g_loss": context.all_reduce("sum", g_value)}
        return state._replace(params={"generator": g_params, "discriminator": d_params},
                              opt_state={"d": d_state, "g": g_state}), logs


def _gan(n):
    with mf.MirroredStrategy(jax.devices()[:n]).scope():
        model = GanModel(Gan(), input_shape=(2,))
        model.compile(mf.optimizers.Adam(0.05), mf.optimizers.Adam(0.05))
    return model


def test_gan_train_step_with_two_optimizers_trains_identically_on_8_replicas(allclose):
    real = (np.random.default_rng(1).normal(size=(37, 2)) + 3.0).astype(np.float32)
    noise = np.random.default_rng(2).normal(size=(37, 2)).astype(np.float32)
    runs = {}
    for n in (1, 8):
        model = _gan(n)
        initial = jax.device_get(model.params)
        history = model.fit(real, noise, batch_size=16, epochs=3, verbose=0, shuffle=False)
        runs[n] = (model, history.history)
    model, logs = runs[8]
    assert set(logs) == {"d_loss", "g_loss"}
    assert int(model.optimizer.iterations) == 9  # 3 steps per epoch, counted by fit
    assert all(np.isfinite(logs["d_loss"])) and all(np.isfinite(logs["g_loss"]))
    allclose(model.params, runs[1][0].params, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(logs["d_loss"], runs[1][1]["d_loss"], rtol=1e-5)
    for part in ("generator", "discriminator"):  # both optimizers moved their part
        assert not np.allclose(model.params[part]["kernel"], initial[part]["kernel"])


def test_test_step_override_gives_evaluate_logs():
    class CountsRows(mf.Model):
        def test_step(self, state, batch):
            rows = mf.get_replica_context().all_reduce("sum", jnp.sum(batch.mask))
            return {"rows": rows, "loss": super().test_step(state, batch)["loss"]}

    model = _compiled(CountsRows, 8, nn.Dense(3), optimizer="sgd", loss="mse")
    logs = model.evaluate(X, Y, batch_size=5, verbose=0, return_dict=True)
    # rows: per-batch real rows (5, 5, 3) averaged over rows: (5*5 + 5*5 + 3*3) / 13
    assert logs["rows"] == pytest.approx((25 + 25 + 9) / 13)
    y_pred = np.asarray(model(X))
    assert logs["loss"] == pytest.approx(float(np.mean((y_pred - Y) ** 2)), rel=1e-5)


def test_apply_gradients_all_reduces_inside_run(allclose):
    strategy = mf.MirroredStrategy(jax.devices()[:8])
    opt = optax.sgd(0.5)
    params = strategy.replicate({"w": jnp.zeros(3)})
    opt_state = strategy.replicate(opt.init({"w": jnp.zeros(3)}))
    data = np.arange(48, dtype=np.float32).reshape(16, 3)
    batch = next(iter(strategy.experimental_distribute_dataset([data])))

    def step(params, opt_state, x):
        loss = lambda p: mf.compute_average_loss(jnp.sum((x - p["w"]) ** 2, -1))
        return mf.apply_gradients(opt, jax.grad(loss)(params), opt_state, params)[0]

    new = strategy.run(step, (params, opt_state, batch))["w"]
    expected = 0.5 * 2 * data.mean(0)  # one SGD step on the global mean squared distance
    for replica in strategy.experimental_local_results(new):
        allclose(replica, expected, rtol=1e-6)


def test_compute_loss_hook_with_steps_per_execution_matches_one_step_per_call(allclose):
    runs = []
    for steps_per_execution in (1, 2):  # 3 steps per epoch: the second group has a filler
        model = _compiled(L2InComputeLoss, 8, nn.Dense(3), optimizer=mf.optimizers.SGD(0.1),
                          loss="mse", steps_per_execution=steps_per_execution)
        history = model.fit(X, Y, batch_size=5, epochs=2, verbose=0, shuffle=False)
        runs.append((history.history["loss"], model.params, int(model.optimizer.iterations)))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    allclose(runs[1][1], runs[0][1], rtol=1e-6)
    assert runs[0][2] == runs[1][2] == 6


class _Interrupt(mf.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if self.model.trainer.progress[:2] == (1, 2):  # epoch 1, after its second step
            raise KeyboardInterrupt


@pytest.mark.slow
def test_gan_train_step_resumes_step_exactly_with_backup_and_restore(tmp_path, allclose):
    real = (np.random.default_rng(1).normal(size=(48, 2)) + 3.0).astype(np.float32)
    noise = np.random.default_rng(2).normal(size=(48, 2)).astype(np.float32)
    whole = _gan(2)
    expected = whole.fit(real, noise, batch_size=16, epochs=2, verbose=0, shuffle=False)
    model = _gan(2)
    backup = mf.callbacks.BackupAndRestore(tmp_path, save_freq=1)
    with pytest.raises(KeyboardInterrupt):  # stops after step 2 of epoch 1
        model.fit(real, noise, batch_size=16, epochs=2, verbose=0, shuffle=False,
                  callbacks=[backup, _Interrupt()])
    resumed, steps_run = _gan(2), []
    counter = mf.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: steps_run.append(b))
    history = resumed.fit(real, noise, batch_size=16, epochs=2, verbose=0, shuffle=False,
                          callbacks=[mf.callbacks.BackupAndRestore(tmp_path, save_freq=1),
                                     counter])
    assert steps_run == [2]  # only the last step of epoch 1 ran again
    allclose(resumed.params, whole.params, rtol=0)
    assert history.history["d_loss"][-1] == expected.history["d_loss"][-1]
    assert int(resumed.optimizer.iterations) == 6


def test_compute_loss_returning_none_names_the_missing_return():
    class Forgets(mf.Model):
        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            super().compute_loss(x, y, y_pred, sample_weight, training)  # no return

    with mf.MirroredStrategy(jax.devices()[:2]).scope():
        model = Forgets(nn.Dense(2), input_shape=(4,))
        model.compile("sgd", "mse")
    with pytest.raises(TypeError, match=r"Forgets.compute_loss returned None: it must return "
                                        r"the loss.*Received: None"):
        model.fit(np.ones((8, 4), np.float32), np.ones((8, 2), np.float32), verbose=0)
