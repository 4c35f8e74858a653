"""Keras 3's hooks on subclassed models inside fit/evaluate/predict's compiled steps
(mirrorfit/_src/trainers/keras_steps.py, object_step.py): ``train_step(self, data)``,
``test_step(self, data)``, ``predict_step(self, data)``, ``compute_loss`` in both
signatures, ``self.optimizer.apply``, metric trackers, and keras-io examples ported by
renaming (the gradient is the one changed line: ``mf.value_and_grad``); Keras 3's stateless
JAX ``train_step(self, state, data)``/``test_step(self, state, data)`` (jax_steps.py), from
keras-io's custom_train_step_in_jax guide ported by renaming alone."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mirrorfit as mf
from mirrorfit import ops
from tests.helpers import count_step_compiles, mirrored_strategy, tree_allclose

L = mf.layers
RNG = np.random.default_rng(0)
# 27 rows in global batches of 16: the last batch (11 rows) is padded on 8 replicas.
X = RNG.normal(size=(27, 4)).astype(np.float32)
Y = RNG.normal(size=(27, 3)).astype(np.float32)


class Regressor(mf.Model):
    """Dense layers as attributes; Keras' "customizing fit" train_step, metrics by name."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = L.Dense(8, activation="tanh")
        self.out = L.Dense(3)

    def call(self, x):
        return self.out(self.hidden(x))

    def train_step(self, data):
        x, y = data

        def forward():
            y_pred = self(x, training=True)
            return self.compute_loss(x=x, y=y, y_pred=y_pred), y_pred

        (loss, y_pred), grads = mf.value_and_grad(forward, self.trainable_variables,
                                                  has_aux=True)()
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


class FunctionalRegressor(mf.Model):
    """The same step on a functional model, as Keras' guide builds it: ``Model(inputs,
    outputs)``."""

    train_step = Regressor.train_step


def _regressor(replicas, kind="subclassed", **compile_kwargs):
    with mirrored_strategy(replicas).scope():
        if kind == "subclassed":
            model = Regressor(seed=4)
        else:
            inputs = mf.Input(shape=(4,))
            outputs = L.Dense(3)(L.Dense(8, activation="tanh")(inputs))
            model = FunctionalRegressor(inputs, outputs, seed=4)
        model.compile(**{"optimizer": mf.optimizers.SGD(0.1), "loss": "mse",
                         "metrics": ["mae"], **compile_kwargs})
    return model


@pytest.mark.parametrize("kind", ["subclassed", "functional"])
def test_custom_train_step_trains_to_the_same_weights_on_1_and_8_replicas(kind):
    runs = {}
    for replicas in (1, 8):
        model = _regressor(replicas, kind)
        with count_step_compiles() as compiles:
            history = model.fit(X, Y, batch_size=16, epochs=3, shuffle=False, verbose=0)
        assert compiles == [1]  # one compile per fit: every step and epoch reuses it
        runs[replicas] = model.get_weights(), history.history
    tree_allclose(runs[8][0], runs[1][0], rtol=1e-5, atol=1e-6)
    for key in ("loss", "mae"):  # trackers: per-step running results, the same globally
        np.testing.assert_allclose(runs[8][1][key], runs[1][1][key], rtol=1e-5)
    assert list(runs[8][1]) == ["loss", "mae"]
    assert runs[8][1]["loss"][-1] < runs[8][1]["loss"][0]


def test_trackers_reset_each_epoch_and_history_is_their_numpy_epoch_means():
    class Frozen(Regressor):  # learning rate 0: the per-batch losses are NumPy's below
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.step_loss = mf.metrics.Mean(name="step_loss")
            self.rows = mf.metrics.Sum(name="rows")

        @property
        def metrics(self):
            return [self.step_loss, self.rows]

        def train_step(self, data):
            x, y = data
            loss = self.compute_loss(y=y, y_pred=self(x, training=True))
            self.step_loss.update_state(loss)  # a scalar: one value per step and replica
            self.rows.update_state(jnp.ones(x.shape[0]))  # padding rows are left out
            return {"loss": self.step_loss.result(), "rows": self.rows.result()}

    with mirrored_strategy(8).scope():
        model = Frozen(seed=4)
        model.compile(mf.optimizers.SGD(0.0), "mse", steps_per_execution=2)
    history = model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    y_pred = np.asarray(model.predict(X, verbose=0))
    batch_losses = [np.mean((y_pred[i:i + 16] - Y[i:i + 16]) ** 2) for i in (0, 16)]
    np.testing.assert_allclose(history.history["loss"], [np.mean(batch_losses)] * 2,
                               rtol=1e-5)
    assert history.history["rows"] == [27.0, 27.0]  # reset at each epoch's start
    assert float(model.rows.result()) == 27.0  # the variables hold the last logged values
    assert model.weights == model.trainable_weights  # the trackers are no weights
    assert len(model.weights) == 4 and model.layers == [model.hidden, model.out]


class _Interrupt(mf.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if self.model.trainer.progress[:2] == (1, 2):  # epoch 1, after its second step
            raise KeyboardInterrupt


@pytest.mark.slow
def test_trackers_resume_step_exactly_with_backup_and_restore(tmp_path):
    whole = _regressor(2)
    expected = whole.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    model = _regressor(2)
    backup = mf.callbacks.BackupAndRestore(tmp_path, save_freq=1)
    with pytest.raises(KeyboardInterrupt):  # stops after step 2 of epoch 1 (of 4)
        model.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                  callbacks=[backup, _Interrupt()])
    resumed = _regressor(2)
    history = resumed.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                          callbacks=[mf.callbacks.BackupAndRestore(tmp_path, save_freq=1)])
    # The trackers' sums of the epoch's first two steps came back with the statistics.
    assert history.history["loss"][-1] == expected.history["loss"][-1]
    assert history.history["mae"][-1] == expected.history["mae"][-1]
    tree_allclose(resumed.get_weights(), whole.get_weights(), rtol=0)


def test_keras_test_step_feeds_evaluate_and_validation():
    class WithTestStep(Regressor):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.abs_error = mf.metrics.MeanAbsoluteError(name="abs_error")

        def test_step(self, data):
            x, y = data
            self.abs_error.update_state(y, self(x, training=False))
            return {"abs_error": self.abs_error.result()}

    with mirrored_strategy(8).scope():
        model = WithTestStep(seed=4)
        model.compile(mf.optimizers.SGD(0.1), "mse")
    history = model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0,
                        validation_data=(X, Y))
    logs = model.evaluate(X, Y, batch_size=16, verbose=0, return_dict=True)
    expected = np.mean(np.abs(np.asarray(model.predict(X, verbose=0)) - Y))  # all 27 rows
    assert list(logs) == ["abs_error"]
    assert logs["abs_error"] == pytest.approx(float(expected), rel=1e-5)
    assert history.history["val_abs_error"][-1] == pytest.approx(logs["abs_error"], rel=1e-6)


@pytest.mark.parametrize("batch_size", [16, 8])  # 8: one row per replica on 8 replicas
def test_super_train_step_updates_the_loss_tracker_and_compiled_metrics(batch_size):
    class Extra(mf.Model):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.dense = L.Dense(3)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            return {**super().train_step(data), "extra": 2.0}

    histories = []
    for replicas in (1, 8):
        with mirrored_strategy(replicas).scope():
            model = Extra(seed=5)
            model.compile(mf.optimizers.SGD(0.0), "mse", metrics=["mae"])
        histories.append(model.fit(X, Y, batch_size=batch_size, epochs=1, shuffle=False,
                                   verbose=0).history)
    y_pred = np.asarray(model.predict(X, verbose=0))
    assert list(histories[1]) == ["loss", "mae", "extra"]
    for history in histories:  # the loss tracker weighs each batch by its rows
        assert history["loss"][0] == pytest.approx(float(np.mean((y_pred - Y) ** 2)), rel=1e-5)
        assert history["mae"][0] == pytest.approx(float(np.mean(np.abs(y_pred - Y))), rel=1e-5)
        assert history["extra"] == [2.0]


# -- keras-io examples by renaming ----------------------------------------------------

class Sampling(L.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a digit."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = mf.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = mf.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class VAE(mf.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = mf.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = mf.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = mf.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [
            self.total_loss_tracker,
            self.reconstruction_loss_tracker,
            self.kl_loss_tracker,
        ]

    def train_step(self, data):
        def forward():  # the one changed line: the tape block becomes a function
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = ops.mean(
                ops.sum(
                    mf.losses.binary_crossentropy(data, reconstruction),
                    axis=(1, 2),
                )
            )
            kl_loss = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            kl_loss = ops.mean(ops.sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
            return total_loss, (reconstruction_loss, kl_loss)

        (total_loss, (reconstruction_loss, kl_loss)), grads = mf.value_and_grad(
            forward, self.trainable_weights, has_aux=True)()
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {
            "loss": self.total_loss_tracker.result(),
            "reconstruction_loss": self.reconstruction_loss_tracker.result(),
            "kl_loss": self.kl_loss_tracker.result(),
        }

    def call(self, x):
        z_mean, z_log_var, z = self.encoder(x)  # noqa: RUF059 - the example's line
        return self.decoder(z)


def _digits(rows):
    """8x8 "digits": one of two stroke patterns per image, with a few pixels flipped."""
    rng = np.random.default_rng(1)
    strokes = np.zeros((2, 8, 8), np.float32)
    strokes[0, :, 3:5] = 1.0  # a vertical bar
    strokes[1, 3:5, :] = 1.0  # a horizontal bar
    images = strokes[rng.integers(0, 2, rows)]
    flip = rng.random(images.shape) < 0.05
    return np.where(flip, 1.0 - images, images)[..., None]


def _reconstruction_error(encoder, decoder, digits):
    z_mean, _, _ = encoder.predict(digits, verbose=0)
    reconstruction = np.clip(decoder.predict(z_mean, verbose=0), 1e-7, 1 - 1e-7)
    return float(-np.mean(digits * np.log(reconstruction)
                          + (1 - digits) * np.log(1 - reconstruction)))


def test_vae_example_trains_and_its_encoder_and_decoder_have_the_trained_weights():
    latent_dim = 2
    with mirrored_strategy(2).scope():
        encoder_inputs = mf.Input(shape=(8, 8, 1))
        x = L.Conv2D(8, 3, activation="relu", strides=2, padding="same")(encoder_inputs)
        x = L.Flatten()(x)
        x = L.Dense(16, activation="relu")(x)
        z_mean = L.Dense(latent_dim, name="z_mean")(x)
        z_log_var = L.Dense(latent_dim, name="z_log_var")(x)
        z = Sampling()([z_mean, z_log_var])
        encoder = mf.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")

        latent_inputs = mf.Input(shape=(latent_dim,))
        x = L.Dense(4 * 4 * 8, activation="relu")(latent_inputs)
        x = L.Reshape((4, 4, 8))(x)
        decoder_outputs = L.Conv2DTranspose(1, 3, activation="sigmoid", strides=2,
                                            padding="same")(x)
        decoder = mf.Model(latent_inputs, decoder_outputs, name="decoder")

        vae = VAE(encoder, decoder)
        vae.compile(optimizer=mf.optimizers.Adam(0.02))
    digits = _digits(96)
    untrained = _reconstruction_error(encoder, decoder, digits)
    history = vae.fit(digits, epochs=6, batch_size=32, verbose=0)  # fit(x): no targets

    assert list(history.history) == ["loss", "reconstruction_loss", "kl_loss"]
    assert history.history["loss"][-1] < 0.8 * history.history["loss"][0]
    # The encoder and decoder models share the VAE's trained weights: their own predict
    # reconstructs far better than before training.
    assert _reconstruction_error(encoder, decoder, digits) < 0.7 * untrained
    assert len(vae.weights) == len(encoder.weights) + len(decoder.weights)  # no trackers
    assert float(vae.total_loss_tracker.result()) == pytest.approx(history.history["loss"][-1])


class Distiller(mf.Model):
    def __init__(self, student, teacher):
        super().__init__()
        self.teacher = teacher
        self.student = student

    def compile(self, optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha=0.1,
                temperature=3):
        super().compile(optimizer=optimizer, metrics=metrics)
        self.student_loss_fn = student_loss_fn
        self.distillation_loss_fn = distillation_loss_fn
        self.alpha = alpha
        self.temperature = temperature

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, allow_empty=False):
        teacher_pred = self.teacher(x, training=False)
        student_loss = self.student_loss_fn(y, y_pred)
        distillation_loss = self.distillation_loss_fn(
            ops.softmax(teacher_pred / self.temperature, axis=1),
            ops.softmax(y_pred / self.temperature, axis=1),
        ) * (self.temperature**2)
        loss = self.alpha * student_loss + (1 - self.alpha) * distillation_loss
        return loss

    def call(self, x):
        return self.student(x)


def _convnet(filters, name):
    return mf.Sequential([
        mf.Input(shape=(6, 6, 1)),
        L.Conv2D(filters, (3, 3), strides=(2, 2), padding="same"),
        L.Activation("relu"),
        L.Flatten(),
        L.Dense(4),
    ], name=name)


def test_distiller_example_trains_the_student_against_a_frozen_teacher():
    x = RNG.normal(size=(48, 6, 6, 1)).astype(np.float32)
    y = RNG.integers(0, 4, size=48)
    with mirrored_strategy(2).scope():
        teacher, student = _convnet(8, "teacher"), _convnet(4, "student")
        teacher.compile(mf.optimizers.Adam(), mf.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        teacher.fit(x, y, epochs=1, verbose=0)
        teacher.trainable = False
        distiller = Distiller(student=student, teacher=teacher)
        distiller.compile(
            optimizer=mf.optimizers.Adam(0.01),
            metrics=[mf.metrics.SparseCategoricalAccuracy()],
            student_loss_fn=mf.losses.SparseCategoricalCrossentropy(from_logits=True),
            distillation_loss_fn=mf.losses.KLDivergence(),
            alpha=0.1,
            temperature=10,
        )
    teacher_weights, student_weights = teacher.get_weights(), student.get_weights()
    history = distiller.fit(x, y, epochs=3, batch_size=16, verbose=0)

    assert list(history.history) == ["loss", "sparse_categorical_accuracy"]
    assert history.history["loss"][-1] < history.history["loss"][0]
    tree_allclose(teacher.get_weights(), teacher_weights, rtol=0)  # frozen: unchanged
    assert not np.allclose(student.get_weights()[0], student_weights[0])
    np.testing.assert_array_equal(distiller.predict(x, verbose=0), student.predict(x, verbose=0))
    # One global batch: evaluate's loss is compute_loss's formula over all rows, in NumPy.
    logits_t = np.asarray(teacher.predict(x, verbose=0), np.float64)
    logits_s = np.asarray(student.predict(x, verbose=0), np.float64)

    def softmax(v):
        e = np.exp(v - v.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    student_loss = -np.mean(np.log(softmax(logits_s)[np.arange(48), y]))
    p, q = softmax(logits_t / 10), softmax(logits_s / 10)
    distillation = np.mean(np.sum(p * np.log(p / q), axis=1)) * 100
    loss = distiller.evaluate(x, y, batch_size=48, verbose=0, return_dict=True)["loss"]
    assert loss == pytest.approx(0.1 * student_loss + 0.9 * distillation, rel=1e-4)


# -- Keras 3's stateless JAX form: keras.io's custom_train_step_in_jax, ported by renaming --

class GuideModel(mf.Model):
    """keras.io's "Customizing what happens in fit() with JAX" ``CustomModel`` (its first
    ``train_step`` and its ``test_step``), ``keras`` renamed ``mf``."""

    def compute_loss_and_updates(
        self,
        trainable_variables,
        non_trainable_variables,
        metrics_variables,
        x,
        y,
        sample_weight,
        training=False,
    ):
        y_pred, non_trainable_variables = self.stateless_call(
            trainable_variables,
            non_trainable_variables,
            x,
            training=training,
        )
        loss, (
            trainable_variables,
            non_trainable_variables,
            metrics_variables,
        ) = self.stateless_compute_loss(
            trainable_variables,
            non_trainable_variables,
            metrics_variables,
            x=x,
            y=y,
            y_pred=y_pred,
            sample_weight=sample_weight,
            training=training,
        )
        return loss, (y_pred, non_trainable_variables, metrics_variables)

    def train_step(self, state, data):
        (
            trainable_variables,
            non_trainable_variables,
            optimizer_variables,
            metrics_variables,
        ) = state
        x, y, sample_weight = mf.utils.unpack_x_y_sample_weight(data)

        # Get the gradient function.
        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)

        # Compute the gradients.
        (loss, (y_pred, non_trainable_variables, metrics_variables)), grads = grad_fn(
            trainable_variables,
            non_trainable_variables,
            metrics_variables,
            x,
            y,
            sample_weight,
            training=True,
        )

        # Update trainable variables and optimizer variables.
        trainable_variables, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable_variables
        )

        # Update metrics.
        new_metrics_vars = []
        logs = {}
        for metric in self.metrics:
            this_metric_vars = metrics_variables[
                len(new_metrics_vars) : len(new_metrics_vars) + len(metric.variables)
            ]
            if metric.name == "loss":
                this_metric_vars = metric.stateless_update_state(
                    this_metric_vars, loss, sample_weight=sample_weight
                )
            else:
                this_metric_vars = metric.stateless_update_state(
                    this_metric_vars, y, y_pred, sample_weight=sample_weight
                )
            logs[metric.name] = metric.stateless_result(this_metric_vars)
            new_metrics_vars += this_metric_vars

        # Return metric logs and updated state variables.
        state = (
            trainable_variables,
            non_trainable_variables,
            optimizer_variables,
            new_metrics_vars,
        )
        return logs, state

    def test_step(self, state, data):
        # Unpack the data.
        x, y, sample_weight = mf.utils.unpack_x_y_sample_weight(data)
        (
            trainable_variables,
            non_trainable_variables,
            metrics_variables,
        ) = state

        # Compute predictions and loss.
        y_pred, non_trainable_variables = self.stateless_call(
            trainable_variables,
            non_trainable_variables,
            x,
            training=False,
        )
        loss, (
            trainable_variables,
            non_trainable_variables,
            metrics_variables,
        ) = self.stateless_compute_loss(
            trainable_variables,
            non_trainable_variables,
            metrics_variables,
            x=x,
            y=y,
            y_pred=y_pred,
            sample_weight=sample_weight,
            training=False,
        )

        # Update metrics.
        new_metrics_vars = []
        logs = {}
        for metric in self.metrics:
            this_metric_vars = metrics_variables[
                len(new_metrics_vars) : len(new_metrics_vars) + len(metric.variables)
            ]
            if metric.name == "loss":
                this_metric_vars = metric.stateless_update_state(
                    this_metric_vars, loss, sample_weight=sample_weight
                )
            else:
                this_metric_vars = metric.stateless_update_state(
                    this_metric_vars, y, y_pred, sample_weight=sample_weight
                )
            logs[metric.name] = metric.stateless_result(this_metric_vars)
            new_metrics_vars += this_metric_vars

        # Return metric logs and updated state variables.
        state = (
            trainable_variables,
            non_trainable_variables,
            new_metrics_vars,
        )
        return logs, state


def _guide_model(replicas, cls=GuideModel, learning_rate=0.05):
    with mirrored_strategy(replicas).scope():
        inputs = mf.Input(shape=(4,))
        outputs = L.Dense(3)(L.Dense(8, activation="tanh")(inputs))
        model = cls(inputs, outputs, seed=4)
        model.compile(optimizer=mf.optimizers.Adam(learning_rate), loss="mse",
                      metrics=["mae"])
    return model


def test_keras_jax_guide_train_step_trains_as_on_one_replica_and_as_the_object_form():
    class ObjectForm(mf.Model):  # the same step on objects: train_step(self, data)
        train_step = Regressor.train_step

    runs = {}
    for name, replicas, cls in (("jax1", 1, GuideModel), ("jax8", 8, GuideModel),
                                ("object8", 8, ObjectForm)):
        model = _guide_model(replicas, cls)
        with count_step_compiles() as compiles:
            history = model.fit(X, Y, batch_size=16, epochs=3, shuffle=False, verbose=0)
        assert compiles == [1]
        runs[name] = model.get_weights(), history.history, model.optimizer.variables
    for name in ("jax8", "object8"):
        tree_allclose(runs[name][0], runs["jax1"][0], rtol=1e-5, atol=1e-6)
        tree_allclose(runs[name][2], runs["jax1"][2], rtol=1e-5, atol=1e-6)  # Adam's state
        assert list(runs[name][1]) == ["loss", "mae"]
        for key in ("loss", "mae"):
            np.testing.assert_allclose(runs[name][1][key], runs["jax1"][1][key], rtol=1e-5)
    assert runs["jax8"][1]["loss"][-1] < runs["jax8"][1]["loss"][0]
    assert int(model.optimizer.iterations) == 6  # 2 steps a epoch, 3 epochs


def test_keras_jax_guide_history_and_evaluate_are_the_numpy_means_of_the_trackers():
    model = _guide_model(8, learning_rate=0.0)  # frozen: NumPy's losses below are fit's
    history = model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    y_pred = np.asarray(model.predict(X, verbose=0))
    batch_losses = [np.mean((y_pred[i:i + 16] - Y[i:i + 16]) ** 2) for i in (0, 16)]
    # The loss tracker: one value per step (its per-replica shares combined); mae: per row.
    np.testing.assert_allclose(history.history["loss"], [np.mean(batch_losses)] * 2,
                               rtol=1e-5)
    np.testing.assert_allclose(history.history["mae"], [np.mean(np.abs(y_pred - Y))] * 2,
                               rtol=1e-5)
    results = model.evaluate(X, Y, batch_size=16, verbose=0, return_dict=True)
    np.testing.assert_allclose(results["loss"], np.mean(batch_losses), rtol=1e-5)
    np.testing.assert_allclose(results["mae"], np.mean(np.abs(y_pred - Y)), rtol=1e-5)
    assert float(model.metrics[0].result()) == pytest.approx(results["loss"], rel=1e-6)


class LowerLevelGuideModel(mf.Model):
    """The guide's "Going lower-level" ``CustomModel``: its own loss function and trackers,
    ``compile(optimizer=...)`` only (``keras`` renamed ``mf``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = mf.metrics.Mean(name="loss")
        self.mae_metric = mf.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = mf.losses.MeanSquaredError()

    def compute_loss_and_updates(
        self,
        trainable_variables,
        non_trainable_variables,
        x,
        y,
        sample_weight,
        training=False,
    ):
        y_pred, non_trainable_variables = self.stateless_call(
            trainable_variables,
            non_trainable_variables,
            x,
            training=training,
        )
        loss = self.loss_fn(y, y_pred, sample_weight=sample_weight)
        return loss, (y_pred, non_trainable_variables)

    def train_step(self, state, data):
        (
            trainable_variables,
            non_trainable_variables,
            optimizer_variables,
            metrics_variables,
        ) = state
        x, y, sample_weight = mf.utils.unpack_x_y_sample_weight(data)

        # Get the gradient function.
        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)

        # Compute the gradients.
        (loss, (y_pred, non_trainable_variables)), grads = grad_fn(
            trainable_variables,
            non_trainable_variables,
            x,
            y,
            sample_weight,
            training=True,
        )

        # Update trainable variables and optimizer variables.
        trainable_variables, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable_variables
        )

        # Update metrics.
        loss_tracker_vars = metrics_variables[: len(self.loss_tracker.variables)]
        mae_metric_vars = metrics_variables[len(self.loss_tracker.variables) :]

        loss_tracker_vars = self.loss_tracker.stateless_update_state(
            loss_tracker_vars, loss, sample_weight=sample_weight
        )
        mae_metric_vars = self.mae_metric.stateless_update_state(
            mae_metric_vars, y, y_pred, sample_weight=sample_weight
        )

        logs = {}
        logs[self.loss_tracker.name] = self.loss_tracker.stateless_result(
            loss_tracker_vars
        )
        logs[self.mae_metric.name] = self.mae_metric.stateless_result(mae_metric_vars)

        new_metrics_vars = loss_tracker_vars + mae_metric_vars

        # Return metric logs and updated state variables.
        state = (
            trainable_variables,
            non_trainable_variables,
            optimizer_variables,
            new_metrics_vars,
        )
        return logs, state

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


def test_keras_jax_guide_lower_level_train_step_trains_as_on_one_replica():
    runs = {}
    for replicas in (1, 8):
        with mirrored_strategy(replicas).scope():
            inputs = mf.Input(shape=(4,))
            model = LowerLevelGuideModel(inputs, L.Dense(3)(inputs), seed=4)
            model.compile(optimizer=mf.optimizers.Adam(0.05))
        # One full batch of 16 rows: equal shards, so the replicas' mean of their own
        # losses' gradients is the global batch's (loss_fn averages this replica's rows).
        history = model.fit(X[:16], Y[:16], batch_size=16, epochs=3, verbose=0)
        runs[replicas] = model.get_weights(), history.history
    tree_allclose(runs[8][0], runs[1][0], rtol=1e-5, atol=1e-6)
    for key in ("loss", "mae"):
        np.testing.assert_allclose(runs[8][1][key], runs[1][1][key], rtol=1e-5)
    assert runs[8][1]["loss"][-1] < runs[8][1]["loss"][0]


def test_keras_jax_stateless_apply_updates_the_values_it_is_given():
    class Shifted(mf.Model):  # zero gradients from weights + 1: the new weights are those
        def train_step(self, state, data):
            trainable, non_trainable, optimizer_variables, metrics_variables = state
            shifted = [t + 1.0 for t in trainable]
            trainable, optimizer_variables = self.optimizer.stateless_apply(
                optimizer_variables, [jnp.zeros_like(t) for t in trainable], shifted)
            return {}, (trainable, non_trainable, optimizer_variables, metrics_variables)

    model = _guide_model(2, Shifted)
    model.predict(X[:2], verbose=0)  # builds it
    before = model.get_weights()
    model.fit(X[:16], Y[:16], batch_size=16, epochs=1, verbose=0)
    tree_allclose(model.get_weights(), [w + 1.0 for w in before], rtol=1e-6)


def test_keras_jax_train_step_returning_a_short_state_says_what_it_must_return():
    class Short(mf.Model):
        def train_step(self, state, data):
            return {}, state[:3]

    model = _guide_model(2, Short)
    with pytest.raises(TypeError, match=r"returns \(logs, state\) with state = "
                       r"\(trainable_variables, .*Received: .*state of 3 items"):
        model.fit(X, Y, batch_size=16, epochs=1, verbose=0)


# -- signatures, errors, the smaller hooks ----------------------------------------------

def test_keras_jax_form_predict_step_is_refused_with_the_rename():
    class JaxForm(Regressor):
        def predict_step(self, state, data):
            return self.stateless_call(*state, data)

    with mirrored_strategy(1).scope(), pytest.raises(
            TypeError, match=r"rename it to `def predict_step\(self, data\):`"):
        JaxForm()


def test_gradient_tape_error_shows_the_train_step_form():
    with pytest.raises(NotImplementedError, match=r"(?s)train_step\(self, data\).*"
                       r"mf.value_and_grad\(\s*forward, self.trainable_variables, "
                       r"has_aux=True\)\(\).*self.optimizer.apply\(grads\)"):
        mf.GradientTape()


def test_fit_without_targets_needs_a_loss_of_the_model_own():
    with mirrored_strategy(1).scope():
        plain = mf.Sequential([L.Dense(3)], input_shape=(4,))
        plain.compile("sgd", "mse")
    with pytest.raises(ValueError, match="y is required"):
        plain.fit(X, epochs=1, verbose=0)

    class OwnLoss(Regressor):  # a train_step needs no y: fit(x) passes data = x
        def train_step(self, data):
            loss, grads = mf.value_and_grad(lambda: jnp.mean(self(data) ** 2),
                                            self.trainable_variables)()
            self.optimizer.apply(grads)
            return {"loss": loss}

    with mirrored_strategy(2).scope():
        model = OwnLoss(seed=2)
        model.compile(mf.optimizers.SGD(0.1))
    history = model.fit(X[:16], epochs=2, batch_size=16, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]


def test_predict_step_override_changes_what_predict_returns():
    class Classifier(Regressor):
        def predict_step(self, data):
            return jnp.argmax(super().predict_step(data), axis=-1)

    with mirrored_strategy(8).scope():
        model = Classifier(seed=3)
    labels = model.predict(X, batch_size=16, verbose=0)  # 27 rows: padding dropped
    logits = np.asarray(model(X))
    np.testing.assert_array_equal(labels, np.argmax(logits, axis=-1))


def test_stateless_apply_inside_a_step_gives_what_apply_assigns():
    class Checked(Regressor):
        def train_step(self, data):
            x, y = data
            loss, grads = mf.value_and_grad(
                lambda: self.compute_loss(y=y, y_pred=self(x, training=True)),
                self.trainable_variables)()
            values = [v.value for v in self.trainable_variables]
            new_values, new_state = self.optimizer.stateless_apply(
                self.optimizer.variables, grads, values)
            self.optimizer.apply(grads)
            gap = sum(jnp.max(jnp.abs(v.value - n)) for v, n in
                      zip(self.trainable_variables, new_values))
            state_gap = sum(jnp.max(jnp.abs(a - b)) for a, b in
                            zip(self.optimizer.variables, new_state))
            return {"loss": loss, "gap": gap, "state_gap": state_gap}

    with mirrored_strategy(2).scope():
        model = Checked(seed=1)
        model.compile(mf.optimizers.Adam(0.1), "mse")
    history = model.fit(X, Y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert history.history["gap"] == [0.0, 0.0]
    assert history.history["state_gap"] == [0.0, 0.0]


def test_optimizer_apply_outside_a_train_step_says_where_it_works():
    model = _regressor(1)
    with pytest.raises(RuntimeError, match="inside fit's compiled step"):
        model.optimizer.apply([jnp.zeros((4, 8))])


def test_stateless_call_is_the_forward_pass_on_given_values():
    model = _regressor(1)
    model.predict(X[:1], verbose=0)  # builds it
    trainable = [jnp.zeros_like(v.value) for v in model.trainable_variables]
    y_pred, non_trainable = model.stateless_call(trainable, [], X)
    np.testing.assert_array_equal(y_pred, np.zeros((27, 3)))  # zero weights, zero outputs
    assert non_trainable == []
    np.testing.assert_allclose(model.stateless_call(
        [v.value for v in model.trainable_variables], [], X)[0], model(X), rtol=1e-6)
    assert not np.allclose(model.trainable_variables[0].numpy(), 0.0)  # not assigned


def test_metrics_lists_the_loss_tracker_compiled_metrics_and_attribute_trackers():
    class Tracked(Regressor):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.tracker = mf.metrics.Mean(name="tracker")

    with mirrored_strategy(1).scope():
        model = Tracked()
        assert model.metrics_names == ["tracker"]
        model.compile("sgd", "mse", metrics=["mae"])
    assert model.metrics_names == ["loss", "mae", "tracker"]
    assert all(not isinstance(layer, mf.metrics.Metric) for layer in model.layers)


def test_a_variable_the_step_assigns_is_carried_even_when_the_model_does_not_hold_it():
    outside = mf.Variable(0.0, name="outside")  # held by no attribute of the model

    class Counts(Regressor):
        def train_step(self, data):
            outside.assign_add(1.0)
            return {"count": outside.value}

    with mirrored_strategy(2).scope():
        model = Counts()
        model.compile("sgd")
    history = model.fit(X, Y, batch_size=4, epochs=2, verbose=0)
    steps = -(-len(X) // 4)
    assert history.history["count"] == [float(steps), float(2 * steps)]  # live in the step
    assert float(outside.numpy()) == 2 * steps  # written back when fit ends


def test_batchnorm_moving_mean_in_a_keras_step_is_averaged_over_replicas():
    class Normalized(Regressor):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.norm = L.BatchNormalization(momentum=0.5)

        def call(self, x, training=False):
            return self.out(self.norm(x, training=training))

    with mirrored_strategy(8).scope():
        model = Normalized(seed=1)
        model.compile(mf.optimizers.SGD(0.1), "mse", metrics=["mae"])
    shifted = X[:16] * 3 + 5  # each replica's 2 rows have their own mean
    model.fit(shifted, Y[:16], batch_size=16, epochs=1, verbose=0)
    # One step from 0 with momentum 0.5: the mean of the replicas' batch means, that is
    # the global batch's (equal shards).
    moving_mean, = (v for v in model.non_trainable_variables if v.path.endswith("moving_mean"))
    np.testing.assert_allclose(moving_mean.numpy(), 0.5 * shifted.mean(0), rtol=1e-5)
