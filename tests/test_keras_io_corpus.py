"""A porting corpus: keras-io guides and examples (Keras 3 versions) ported by renaming only
(``import keras`` -> ``import mirrorfit as keras``, ``from keras import layers, ops`` ->
``from mirrorfit import layers, ops``), plus ``mf.value_and_grad`` where TensorFlow's
``GradientTape`` was, a ``strategy.scope()`` around model creation, and small synthetic data
in place of downloads (with the sizes scaled down so that each runs in seconds on a CPU).
Each must run and reach the metric its data allows (a learnable synthetic target: well
above chance, or a loss well below its start).

The ports keep the examples' code (classes, functions, names, compile and fit calls); lines
of the originals that only print, plot or download are left out. Examples that train with a
custom ``train_step`` on two optimizers (GANs) are not here.
"""

import numpy as np
import pytest

import mirrorfit as keras
from mirrorfit import layers, ops
from tests.helpers import mirrored_strategy

pytestmark = pytest.mark.slow
RNG = np.random.default_rng(0)


def _images(n, size, classes, channels=3, seed=0):
    """``n`` images ``[size, size, channels]`` in ``[0, 255]`` whose class shows as a brighter
    band at a class-dependent row, with noise; labels ``[n, 1]`` as CIFAR's."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=(n, 1))
    x = rng.uniform(0, 100, size=(n, size, size, channels))
    rows = (y[:, 0] * size) // classes
    for i, r in enumerate(rows):
        x[i, r:r + max(size // classes, 1)] += 150
    return x.astype("float32"), y


# -- guides/functional_api.py ---------------------------------------------------------------


def test_functional_api_guide_multi_input_multi_output_with_dict_losses():
    with mirrored_strategy(2).scope():
        inputs = keras.Input(shape=(784,))
        dense = layers.Dense(64, activation="relu")
        x = dense(inputs)
        x = layers.Dense(64, activation="relu")(x)
        outputs = layers.Dense(10)(x)
        model = keras.Model(inputs=inputs, outputs=outputs, name="mnist_model")
        assert inputs.shape == (None, 784) and model.name == "mnist_model"

        # The ticket model: three inputs, two outputs, losses keyed by output name.
        num_tags = 12  # Number of unique issue tags
        num_words = 100  # Size of vocabulary (the guide: 10000)
        num_departments = 4  # Number of departments for predictions
        title_input = keras.Input(shape=(None,), name="title")
        body_input = keras.Input(shape=(None,), name="body")
        tags_input = keras.Input(shape=(num_tags,), name="tags")
        title_features = layers.Embedding(num_words, 16)(title_input)
        body_features = layers.Embedding(num_words, 16)(body_input)
        title_features = layers.LSTM(16)(title_features)
        body_features = layers.LSTM(8)(body_features)
        x = layers.concatenate([title_features, body_features, tags_input])
        priority_pred = layers.Dense(1, name="priority")(x)
        department_pred = layers.Dense(num_departments, name="department")(x)
        model = keras.Model(inputs=[title_input, body_input, tags_input],
                            outputs=[priority_pred, department_pred])
        model.compile(
            optimizer=keras.optimizers.RMSprop(1e-2),
            loss={
                "priority": keras.losses.BinaryCrossentropy(from_logits=True),
                "department": keras.losses.CategoricalCrossentropy(from_logits=True),
            },
            loss_weights={"priority": 1.0, "department": 0.2},
        )

    # Learnable targets (the guide's are random): priority from the tags, the department
    # from the first title word.
    title_data = RNG.integers(num_words, size=(256, 10))
    body_data = RNG.integers(num_words, size=(256, 20))
    tags_data = RNG.integers(2, size=(256, num_tags)).astype("float32")
    priority_targets = (tags_data[:, :1] > 0).astype("float32")
    dept_targets = keras.utils.to_categorical(title_data[:, 0] % num_departments,
                                              num_departments)
    history = model.fit(
        {"title": title_data, "body": body_data, "tags": tags_data},
        {"priority": priority_targets, "department": dept_targets},
        epochs=6,
        batch_size=32,
        verbose=0,
    )
    assert set(history.history) == {"loss", "priority_loss", "department_loss"}
    # Both heads learn: the losses fall well below their first epoch's.
    assert history.history["priority_loss"][-1] < 0.5 * history.history["priority_loss"][0]
    assert history.history["loss"][-1] < 0.6 * history.history["loss"][0]


# -- examples/vision/mlp_image_classification.py (MLP-Mixer) ---------------------------------


class Patches(layers.Layer):
    def __init__(self, patch_size, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size

    def call(self, x):
        patches = keras.ops.image.extract_patches(x, self.patch_size)
        batch_size = keras.ops.shape(patches)[0]
        num_patches = keras.ops.shape(patches)[1] * keras.ops.shape(patches)[2]
        patch_dim = keras.ops.shape(patches)[3]
        out = keras.ops.reshape(patches, (batch_size, num_patches, patch_dim))
        return out


class MLPMixerLayer(layers.Layer):
    def __init__(self, num_patches, hidden_units, dropout_rate, *args, **kwargs):
        super().__init__(*args, **kwargs)

        self.mlp1 = keras.Sequential(
            [
                layers.Dense(units=num_patches, activation="gelu"),
                layers.Dense(units=num_patches),
                layers.Dropout(rate=dropout_rate),
            ]
        )
        self.mlp2 = keras.Sequential(
            [
                layers.Dense(units=num_patches, activation="gelu"),
                layers.Dense(units=hidden_units),
                layers.Dropout(rate=dropout_rate),
            ]
        )
        self.normalize = layers.LayerNormalization(epsilon=1e-6)

    def build(self, input_shape):
        return super().build(input_shape)

    def call(self, inputs):
        # Apply layer normalization.
        x = self.normalize(inputs)
        # Transpose inputs from [num_batches, num_patches, hidden_units] to [num_batches, hidden_units, num_patches].
        x_channels = keras.ops.transpose(x, axes=(0, 2, 1))
        # Apply mlp1 on each channel independently.
        mlp1_outputs = self.mlp1(x_channels)
        # Transpose mlp1_outputs from [num_batches, hidden_dim, num_patches] to [num_batches, num_patches, hidden_units].
        mlp1_outputs = keras.ops.transpose(mlp1_outputs, axes=(0, 2, 1))
        # Add skip connection.
        x = mlp1_outputs + inputs
        # Apply layer normalization.
        x_patches = self.normalize(x)
        # Apply mlp2 on each patch independtenly.
        mlp2_outputs = self.mlp2(x_patches)
        # Add skip connection.
        x = x + mlp2_outputs
        return x


def test_mlp_image_classification_mlp_mixer():
    num_classes = 4  # the example: CIFAR-100's 100
    input_shape = (16, 16, 3)  # the example: (32, 32, 3)
    (x_train, y_train), (x_test, y_test) = _images(320, 16, num_classes), _images(
        64, 16, num_classes, seed=1)
    weight_decay = 0.0001
    batch_size = 32
    num_epochs = 6
    dropout_rate = 0.2
    image_size = 16  # We'll resize input images to this size (the example: 64).
    patch_size = 4  # Size of the patches to be extracted from the input images.
    num_patches = (image_size // patch_size) ** 2  # Size of the data array.
    embedding_dim = 16  # Number of hidden units (the example: 256).
    num_blocks = 1  # Number of blocks (the example: 4).

    def build_classifier(blocks, positional_encoding=False):
        inputs = layers.Input(shape=input_shape)
        # Augment data.
        augmented = data_augmentation(inputs)
        # Create patches.
        patches = Patches(patch_size)(augmented)
        # Encode patches to generate a [batch_size, num_patches, embedding_dim] tensor.
        x = layers.Dense(units=embedding_dim)(patches)
        # Process x using the module blocks.
        x = blocks(x)
        # Apply global average pooling to generate a [batch_size, embedding_dim] representation tensor.
        representation = layers.GlobalAveragePooling1D()(x)
        # Apply dropout.
        representation = layers.Dropout(rate=dropout_rate)(representation)
        # Compute logits outputs.
        logits = layers.Dense(num_classes)(representation)
        # Create the Keras model.
        return keras.Model(inputs=inputs, outputs=logits)

    def run_experiment(model):
        # Create Adam optimizer with weight decay.
        optimizer = keras.optimizers.AdamW(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
        )
        # Compile the model.
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[
                keras.metrics.SparseCategoricalAccuracy(name="acc"),
                keras.metrics.SparseTopKCategoricalAccuracy(5, name="top5-acc"),
            ],
        )
        # Create a learning rate scheduler callback.
        reduce_lr = keras.callbacks.ReduceLROnPlateau(
            monitor="val_loss", factor=0.5, patience=5
        )
        # Create an early stopping callback.
        early_stopping = keras.callbacks.EarlyStopping(
            monitor="val_loss", patience=10, restore_best_weights=True
        )
        # Fit the model.
        history = model.fit(
            x=x_train,
            y=y_train,
            batch_size=batch_size,
            epochs=num_epochs,
            validation_split=0.1,
            callbacks=[early_stopping, reduce_lr],
            verbose=0,
        )

        _, accuracy, top_5_accuracy = model.evaluate(x_test, y_test, verbose=0)
        # Return history to plot learning curves.
        return history, accuracy

    with mirrored_strategy(2).scope():
        data_augmentation = keras.Sequential(
            [
                layers.Normalization(),
                layers.Resizing(image_size, image_size),
                layers.RandomFlip("horizontal"),
                layers.RandomZoom(height_factor=0.2, width_factor=0.2),
            ],
            name="data_augmentation",
        )
        # Compute the mean and the variance of the training data for normalization.
        data_augmentation.layers[0].adapt(x_train)

        mlpmixer_blocks = keras.Sequential(
            [MLPMixerLayer(num_patches, embedding_dim, dropout_rate) for _ in range(num_blocks)]
        )
        learning_rate = 0.005
        mlpmixer_classifier = build_classifier(mlpmixer_blocks)
        history, accuracy = run_experiment(mlpmixer_classifier)
    assert accuracy > 0.6  # 4 classes: chance is 0.25
    assert history.history["loss"][-1] < history.history["loss"][0]


# -- examples/generative/text_generation_with_miniature_gpt.py --------------------------------


def causal_attention_mask(batch_size, n_dest, n_src, dtype):
    """
    Mask the upper half of the dot product matrix in self attention.
    This prevents flow of information from future tokens to current token.
    1's in the lower triangle, counting from the lower right corner.
    """
    i = ops.arange(n_dest)[:, None]
    j = ops.arange(n_src)
    m = i >= j - n_src + n_dest
    mask = ops.cast(m, dtype)
    mask = ops.reshape(mask, [1, n_dest, n_src])
    mult = ops.concatenate(
        [ops.expand_dims(batch_size, -1), ops.convert_to_tensor([1, 1])], 0
    )
    return ops.tile(mask, mult)


class GPTTransformerBlock(layers.Layer):  # the example's TransformerBlock
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads, embed_dim)
        self.ffn = keras.Sequential(
            [
                layers.Dense(ff_dim, activation="relu"),
                layers.Dense(embed_dim),
            ]
        )
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        input_shape = ops.shape(inputs)
        batch_size = input_shape[0]
        seq_len = input_shape[1]
        causal_mask = causal_attention_mask(batch_size, seq_len, seq_len, "bool")
        attention_output = self.att(inputs, inputs, attention_mask=causal_mask)
        attention_output = self.dropout1(attention_output)
        out1 = self.layernorm1(inputs + attention_output)
        ffn_output = self.ffn(out1)
        ffn_output = self.dropout2(ffn_output)
        return self.layernorm2(out1 + ffn_output)


class TokenAndPositionEmbedding(layers.Layer):
    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        maxlen = ops.shape(x)[-1]
        positions = ops.arange(0, maxlen, 1)
        positions = self.pos_emb(positions)
        x = self.token_emb(x)
        return x + positions


def test_text_generation_with_miniature_gpt():
    vocab_size = 24  # the example: 20000
    maxlen = 12  # Max sequence size (the example: 80)
    embed_dim = 16  # Embedding size for each token (the example: 256)
    num_heads = 2  # Number of attention heads
    feed_forward_dim = 16  # Hidden layer size in feed forward network inside transformer

    def create_model():
        inputs = layers.Input(shape=(maxlen,), dtype="int32")
        embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)
        x = embedding_layer(inputs)
        transformer_block = GPTTransformerBlock(embed_dim, num_heads, feed_forward_dim)
        x = transformer_block(x)
        outputs = layers.Dense(vocab_size)(x)
        model = keras.Model(inputs=inputs, outputs=[outputs, x])
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        model.compile(
            "adam",
            loss=[loss_fn, None],
        )  # No loss and optimization based on word embeddings from transformer block
        return model

    class TextGenerator(keras.callbacks.Callback):
        """The example's callback: generates from a prompt at the end of each epoch."""

        def __init__(self, max_tokens, start_tokens, index_to_word, top_k=10, print_every=1):
            self.max_tokens = max_tokens
            self.start_tokens = start_tokens
            self.index_to_word = index_to_word
            self.print_every = print_every
            self.k = top_k
            self.texts = []

        def sample_from(self, logits):
            logits, indices = ops.top_k(logits, k=self.k, sorted=True)
            indices = np.asarray(indices).astype("int32")
            preds = keras.activations.softmax(ops.expand_dims(logits, 0))[0]
            preds = np.asarray(preds).astype("float32")
            return np.random.choice(indices, p=preds)

        def detokenize(self, number):
            return self.index_to_word[number]

        def on_epoch_end(self, epoch, logs=None):
            start_tokens = [_ for _ in self.start_tokens]
            if (epoch + 1) % self.print_every != 0:
                return
            num_tokens_generated = 0
            tokens_generated = []
            while num_tokens_generated <= self.max_tokens:
                pad_len = maxlen - len(start_tokens)
                sample_index = len(start_tokens) - 1
                if pad_len < 0:
                    x = start_tokens[:maxlen]
                    sample_index = maxlen - 1
                elif pad_len > 0:
                    x = start_tokens + [0] * pad_len
                else:
                    x = start_tokens
                x = np.array([x])
                y, _ = self.model.predict(x, verbose=0)
                sample_token = self.sample_from(y[0][sample_index])
                tokens_generated.append(sample_token)
                start_tokens.append(sample_token)
                num_tokens_generated = len(tokens_generated)
            self.texts.append([self.detokenize(_) for _ in self.start_tokens + tokens_generated])

    # A corpus with a rule (each word is followed by the next one, cyclically) in place of
    # IMDB: (x, y) are sequences shifted by one, as prepare_lm_inputs_labels makes them.
    vocab = ["", "[UNK]"] + [f"w{i}" for i in range(vocab_size - 2)]
    starts = RNG.integers(2, vocab_size, size=256)
    tokens = 2 + (starts[:, None] - 2 + np.arange(maxlen + 1)) % (vocab_size - 2)
    x, y = tokens[:, :-1].astype("int32"), tokens[:, 1:].astype("int32")
    word_to_index = {}
    for index, word in enumerate(vocab):
        word_to_index[word] = index
    start_prompt = "w3 w4 w5"
    start_tokens = [word_to_index.get(_, 1) for _ in start_prompt.split()]
    text_gen_callback = TextGenerator(5, start_tokens, vocab, top_k=1)
    with mirrored_strategy(2).scope():
        model = create_model()
    history = model.fit(x, y, batch_size=32, verbose=0, epochs=8, callbacks=[text_gen_callback])
    assert history.history["loss"][-1] < 0.3 * history.history["loss"][0]
    # With top_k=1 the generation follows the rule it learned: w6 w7 w8 ...
    assert text_gen_callback.texts[-1][3:7] == ["w6", "w7", "w8", "w9"]


# -- examples/vision/mnist_convnet.py ----------------------------------------------------------


def test_mnist_convnet():
    # Model / data parameters
    num_classes = 10
    input_shape = (28, 28, 1)
    # Band images in place of MNIST (the example loads it with keras.datasets.mnist).
    (x_train, y_train), (x_test, y_test) = _images(400, 28, num_classes, 1), _images(
        100, 28, num_classes, 1, seed=1)
    # Scale images to the [0, 1] range
    x_train = x_train.astype("float32") / 255
    x_test = x_test.astype("float32") / 255
    # convert class vectors to binary class matrices
    y_train = keras.utils.to_categorical(y_train, num_classes)
    y_test = keras.utils.to_categorical(y_test, num_classes)

    with mirrored_strategy(2).scope():
        model = keras.Sequential(
            [
                keras.Input(shape=input_shape),
                layers.Conv2D(8, kernel_size=(3, 3), activation="relu"),  # the example: 32
                layers.MaxPooling2D(pool_size=(2, 2)),
                layers.Conv2D(16, kernel_size=(3, 3), activation="relu"),  # the example: 64
                layers.MaxPooling2D(pool_size=(2, 2)),
                layers.Flatten(),
                layers.Dropout(0.5),
                layers.Dense(num_classes, activation="softmax"),
            ]
        )
    batch_size = 64  # the example: 128
    epochs = 8  # the example: 15
    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1,
              verbose=0)
    score = model.evaluate(x_test, y_test, verbose=0)
    assert score[1] > 0.8  # 10 classes: chance is 0.1


# -- examples/nlp/addition_rnn.py (its data is generated, as in the example) -------------------


class CharacterTable:
    """Given a set of characters:
    + Encode them to a one-hot integer representation
    + Decode the one-hot or integer representation to their character output
    + Decode a vector of probabilities to their character output
    """

    def __init__(self, chars):
        """Initialize character table.
        # Arguments
            chars: Characters that can appear in the input.
        """
        self.chars = sorted(set(chars))
        self.char_indices = dict((c, i) for i, c in enumerate(self.chars))
        self.indices_char = dict((i, c) for i, c in enumerate(self.chars))

    def encode(self, C, num_rows):
        """One-hot encode given string C.
        # Arguments
            C: string, to be encoded.
            num_rows: Number of rows in the returned one-hot encoding. This is
                used to keep the # of rows for each data the same.
        """
        x = np.zeros((num_rows, len(self.chars)))
        for i, c in enumerate(C):
            x[i, self.char_indices[c]] = 1
        return x

    def decode(self, x, calc_argmax=True):
        """Decode the given vector or 2D array to their character output.
        # Arguments
            x: A vector or a 2D array of probabilities or one-hot representations;
                or a vector of character indices (used with `calc_argmax=False`).
            calc_argmax: Whether to find the character index with maximum
                probability, defaults to `True`.
        """
        if calc_argmax:
            x = x.argmax(axis=-1)
        return "".join(self.indices_char[x] for x in x)


def test_addition_rnn():
    # Parameters for the model and dataset.
    TRAINING_SIZE = 2000  # the example: 50000
    DIGITS = 2  # the example: 3
    REVERSE = True
    # Maximum length of input is 'int + int' (e.g., '345+678'). Maximum length of
    # int is DIGITS.
    MAXLEN = DIGITS + 1 + DIGITS
    # All the numbers, plus sign and space for padding.
    chars = "0123456789+ "
    ctable = CharacterTable(chars)

    questions = []
    expected = []
    seen = set()
    rng = np.random.default_rng(0)  # the example: np.random
    while len(questions) < TRAINING_SIZE:

        def f():
            return int(
                "".join(rng.choice(list("0123456789")) for i in range(rng.integers(1, DIGITS + 1)))
            )

        a, b = f(), f()
        # Skip any addition questions we've already seen
        # Also skip any such that x+Y == Y+x (hence the sorting).
        key = tuple(sorted((a, b)))
        if key in seen:
            continue
        seen.add(key)
        # Pad the data with spaces such that it is always MAXLEN.
        q = "{}+{}".format(a, b)
        query = q + " " * (MAXLEN - len(q))
        ans = str(a + b)
        # Answers can be of maximum size DIGITS + 1.
        ans += " " * (DIGITS + 1 - len(ans))
        if REVERSE:
            # Reverse the query, e.g., '12+345  ' becomes '  543+21'. (Note the
            # space used for padding.)
            query = query[::-1]
        questions.append(query)
        expected.append(ans)

    x = np.zeros((len(questions), MAXLEN, len(chars)), dtype=bool)
    y = np.zeros((len(questions), DIGITS + 1, len(chars)), dtype=bool)
    for i, sentence in enumerate(questions):
        x[i] = ctable.encode(sentence, MAXLEN)
    for i, sentence in enumerate(expected):
        y[i] = ctable.encode(sentence, DIGITS + 1)

    # Shuffle (x, y) in unison as the later parts of x will almost all be larger
    # digits.
    indices = np.arange(len(y))
    rng.shuffle(indices)
    x = x[indices]
    y = y[indices]

    # Explicitly set apart 10% for validation data that we never train over.
    split_at = len(x) - len(x) // 10
    (x_train, x_val) = x[:split_at], x[split_at:]
    (y_train, y_val) = y[:split_at], y[split_at:]

    num_layers = 1  # Try to add more LSTM layers!
    with mirrored_strategy(2).scope():
        model = keras.Sequential()
        # "Encode" the input sequence using a LSTM, producing an output of size 128.
        # Note: In a situation where your input sequences have a variable length,
        # use input_shape=(None, num_feature).
        model.add(layers.Input((MAXLEN, len(chars))))
        model.add(layers.LSTM(64))  # the example: 128
        # As the decoder RNN's input, repeatedly provide with the last output of
        # RNN for each time step. Repeat 'DIGITS + 1' times as that's the maximum
        # length of output, e.g., when DIGITS=3, max output is 999+999=1998.
        model.add(layers.RepeatVector(DIGITS + 1))
        # The decoder RNN could be multiple layers stacked or a single layer.
        for _ in range(num_layers):
            # By setting return_sequences to True, return not only the last output but
            # all the outputs so far in the form of (num_samples, timesteps,
            # output_dim). This is necessary as TimeDistributed in the below expects
            # the first dimension to be the timesteps.
            model.add(layers.LSTM(64, return_sequences=True))
        # Apply a dense layer to the every temporal slice of an input. For each of step
        # of the output sequence, decide which character should be chosen.
        model.add(layers.Dense(len(chars), activation="softmax"))
        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])

    epochs = 7  # the example: 30
    batch_size = 32
    history = model.fit(x_train, y_train, batch_size=batch_size, epochs=epochs,
                        validation_data=(x_val, y_val), verbose=0)
    # Character accuracy: chance is about 1/12 (a few epochs of the example's 30).
    assert history.history["val_accuracy"][-1] > 0.3  # 0.4 after 7 epochs here
    preds = np.argmax(model.predict(x_val[:20], verbose=0), axis=-1)
    guess = [ctable.decode(preds[i], calc_argmax=False) for i in range(20)]
    assert all(len(g) == DIGITS + 1 for g in guess)


# -- examples/timeseries/timeseries_classification_from_scratch.py ----------------------------


def test_timeseries_classification_from_scratch(tmp_path):
    # Sines (class 0) and square waves (class 1) with noise, in place of FordA's downloads.
    def readucr(n, seed):
        rng = np.random.default_rng(seed)
        y = rng.integers(0, 2, size=n)
        t = np.linspace(0, 4 * np.pi, 100)[None] * rng.uniform(0.8, 1.2, size=(n, 1))
        x = np.where(y[:, None] == 0, np.sin(t), np.sign(np.sin(t)))
        return x + rng.normal(scale=0.3, size=x.shape), y

    x_train, y_train = readucr(256, 0)
    x_test, y_test = readucr(64, 1)
    x_train = x_train.reshape((x_train.shape[0], x_train.shape[1], 1))
    x_test = x_test.reshape((x_test.shape[0], x_test.shape[1], 1))
    num_classes = len(np.unique(y_train))

    def make_model(input_shape):
        input_layer = keras.layers.Input(input_shape)

        conv1 = keras.layers.Conv1D(filters=16, kernel_size=3, padding="same")(input_layer)
        conv1 = keras.layers.BatchNormalization()(conv1)
        conv1 = keras.layers.ReLU()(conv1)

        conv2 = keras.layers.Conv1D(filters=16, kernel_size=3, padding="same")(conv1)
        conv2 = keras.layers.BatchNormalization()(conv2)
        conv2 = keras.layers.ReLU()(conv2)

        conv3 = keras.layers.Conv1D(filters=16, kernel_size=3, padding="same")(conv2)
        conv3 = keras.layers.BatchNormalization()(conv3)
        conv3 = keras.layers.ReLU()(conv3)

        gap = keras.layers.GlobalAveragePooling1D()(conv3)

        output_layer = keras.layers.Dense(num_classes, activation="softmax")(gap)

        return keras.models.Model(inputs=input_layer, outputs=output_layer)

    with mirrored_strategy(2).scope():
        model = make_model(input_shape=x_train.shape[1:])

    epochs = 8  # the example: 500
    batch_size = 8  # the example: 32 (BatchNormalization's statistics need the steps)
    callbacks = [
        keras.callbacks.ModelCheckpoint(
            str(tmp_path / "best_model.keras"), save_best_only=True, monitor="val_loss"
        ),
        keras.callbacks.ReduceLROnPlateau(
            monitor="val_loss", factor=0.5, patience=20, min_lr=0.0001
        ),
        keras.callbacks.EarlyStopping(monitor="val_loss", patience=50, verbose=1),
    ]
    model.compile(
        optimizer="adam",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    history = model.fit(
        x_train,
        y_train,
        batch_size=batch_size,
        epochs=epochs,
        callbacks=callbacks,
        validation_split=0.2,
        verbose=0,
    )
    with mirrored_strategy(2).scope():
        model = keras.models.load_model(str(tmp_path / "best_model.keras"))
    test_loss, test_acc = model.evaluate(x_test, y_test, verbose=0)
    assert test_acc > 0.9  # two classes: chance is 0.5
    assert history.history["loss"][-1] < history.history["loss"][0]


# -- guides/making_new_layers_and_models_via_subclassing.py -----------------------------------


class Linear(keras.layers.Layer):
    def __init__(self, units=32):
        super().__init__()
        self.units = units

    def build(self, input_shape):
        self.w = self.add_weight(
            shape=(input_shape[-1], self.units),
            initializer="random_normal",
            trainable=True,
        )
        self.b = self.add_weight(shape=(self.units,), initializer="random_normal",
                                 trainable=True)

    def call(self, inputs):
        return ops.matmul(inputs, self.w) + self.b


class ActivityRegularizationLayer(keras.layers.Layer):
    def __init__(self, rate=1e-2):
        super().__init__()
        self.rate = rate

    def call(self, inputs):
        self.add_loss(self.rate * ops.mean(inputs))
        return inputs


class Sampling(layers.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a digit."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class Encoder(layers.Layer):
    """Maps MNIST digits to a triplet (z_mean, z_log_var, z)."""

    def __init__(self, latent_dim=32, intermediate_dim=64, name="encoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_mean = layers.Dense(latent_dim)
        self.dense_log_var = layers.Dense(latent_dim)
        self.sampling = Sampling()

    def call(self, inputs):
        x = self.dense_proj(inputs)
        z_mean = self.dense_mean(x)
        z_log_var = self.dense_log_var(x)
        z = self.sampling((z_mean, z_log_var))
        return z_mean, z_log_var, z


class Decoder(layers.Layer):
    """Converts z, the encoded digit vector, back into a readable digit."""

    def __init__(self, original_dim, intermediate_dim=64, name="decoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dense_proj = layers.Dense(intermediate_dim, activation="relu")
        self.dense_output = layers.Dense(original_dim, activation="sigmoid")

    def call(self, inputs):
        x = self.dense_proj(inputs)
        return self.dense_output(x)


class VariationalAutoEncoder(keras.Model):
    """Combines the encoder and decoder into an end-to-end model for training."""

    def __init__(self, original_dim, intermediate_dim=64, latent_dim=32,
                 name="autoencoder", **kwargs):
        super().__init__(name=name, **kwargs)
        self.original_dim = original_dim
        self.encoder = Encoder(latent_dim=latent_dim, intermediate_dim=intermediate_dim)
        self.decoder = Decoder(original_dim, intermediate_dim=intermediate_dim)

    def call(self, inputs):
        z_mean, z_log_var, z = self.encoder(inputs)
        reconstructed = self.decoder(z)
        # Add KL divergence regularization loss.
        kl_loss = -0.5 * ops.mean(z_log_var - ops.square(z_mean) - ops.exp(z_log_var) + 1)
        self.add_loss(kl_loss)
        return reconstructed


def test_making_new_layers_and_models_via_subclassing():
    x = ops.ones((2, 2))
    linear_layer = Linear(4)
    y = linear_layer(x)
    assert y.shape == (2, 4) and len(linear_layer.weights) == 2

    class OuterLayer(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.activity_reg = ActivityRegularizationLayer(1e-2)

        def call(self, inputs):
            return self.activity_reg(inputs)

    layer = OuterLayer()
    _ = layer(ops.zeros((1, 1)))
    assert len(layer.losses) == 1  # the loss of this forward pass
    _ = layer(ops.zeros((1, 1)))
    assert len(layer.losses) == 1  # This is the loss created during the call above

    # The VAE on 8x8 "digits" (the guide: MNIST), with the guide's fit(x_train, x_train).
    original_dim = 64
    x_train = (np.random.default_rng(0).uniform(size=(512, original_dim)) > 0.7).astype(
        "float32") * np.linspace(0.2, 1.0, original_dim, dtype="float32")
    with mirrored_strategy(2).scope():
        vae = VariationalAutoEncoder(original_dim, 32, 8)
    optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    vae.compile(optimizer, loss=keras.losses.MeanSquaredError())
    history = vae.fit(x_train, x_train, epochs=6, batch_size=64, verbose=0)
    assert history.history["loss"][-1] < 0.8 * history.history["loss"][0]
    assert len(vae.weights) == 10 and vae.encoder.dense_proj.get_weights()[0].shape == (64, 32)


# -- guides/custom_train_step_in_tensorflow.py (one optimizer; the gradient line) -------------


class CustomModel(keras.Model):
    def train_step(self, data):
        # Unpack the data. Its structure depends on your model and
        # on what you pass to `fit()`.
        x, y = data

        def compute():  # was: with tf.GradientTape() as tape:
            y_pred = self(x, training=True)  # Forward pass
            # Compute the loss value
            # (the loss function is configured in `compile()`)
            return self.compute_loss(y=y, y_pred=y_pred)

        # Compute gradients
        trainable_vars = self.trainable_variables
        loss, gradients = keras.value_and_grad(compute, trainable_vars)()
        # Update weights
        self.optimizer.apply(gradients, trainable_vars)
        # Update metrics (includes the metric that tracks the loss)
        y_pred = self(x, training=False)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        # Return a dict mapping metric names to current value
        return {m.name: m.result() for m in self.metrics}


def test_customizing_what_happens_in_fit():
    # Construct and compile an instance of CustomModel
    with mirrored_strategy(2).scope():
        inputs = keras.Input(shape=(32,))
        outputs = keras.layers.Dense(1)(inputs)
        model = CustomModel(inputs, outputs)
    model.compile(optimizer="adam", loss="mse", metrics=["mae"])

    # Just use `fit` as usual
    x = np.random.random((1000, 32)).astype("float32")
    y = (x @ np.linspace(-1, 1, 32, dtype="float32"))[:, None]  # the guide: random targets
    history = model.fit(x, y, epochs=20, verbose=0)
    assert set(history.history) == {"loss", "mae"}
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0]


# -- examples/keras_recipes/antirectifier.py ---------------------------------------------------


class Antirectifier(layers.Layer):
    def __init__(self, initializer="he_normal", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        output_dim = input_shape[-1]
        self.kernel = self.add_weight(
            shape=(output_dim * 2, output_dim),
            initializer=self.initializer,
            name="kernel",
            trainable=True,
        )

    def call(self, inputs):
        inputs -= ops.mean(inputs, axis=-1, keepdims=True)
        pos = ops.relu(inputs)
        neg = ops.relu(-inputs)
        concatenated = ops.concatenate([pos, neg], axis=-1)
        mixed = ops.matmul(concatenated, self.kernel)
        return mixed

    def get_config(self):
        # Implement get_config to enable serialization. This is optional.
        base_config = super().get_config()
        config = {"initializer": keras.initializers.serialize(self.initializer)}
        return dict(list(base_config.items()) + list(config.items()))


def test_antirectifier():
    (x_train, y_train), (x_test, y_test) = _images(400, 28, 10, 1), _images(100, 28, 10, 1, 1)
    x_train = x_train.reshape(-1, 784)
    x_test = x_test.reshape(-1, 784)
    x_train = x_train.astype("float32")
    x_test = x_test.astype("float32")
    x_train /= 255
    x_test /= 255
    with mirrored_strategy(2).scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(784,)),
                layers.Dense(64),  # the example: 256
                Antirectifier(),
                layers.Dense(64),
                Antirectifier(),
                layers.Dropout(0.5),
                layers.Dense(10),
            ]
        )
    model.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=keras.optimizers.RMSprop(),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )
    model.fit(x_train, y_train, batch_size=64, epochs=5, validation_split=0.15, verbose=0)
    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    assert accuracy > 0.8  # 10 classes
    assert Antirectifier.from_config(model.layers[1].get_config()).initializer is not None


# -- examples/vision/autoencoder.py (denoising) -------------------------------------------------


def test_convolutional_denoising_autoencoder():
    def preprocess(array):
        """Normalizes the supplied array and reshapes it."""
        array = array.astype("float32") / 255.0
        array = np.reshape(array, (len(array), 28, 28, 1))
        return array

    def noise(array):
        """Adds random noise to each image in the supplied array."""
        noise_factor = 0.4
        noisy_array = array + noise_factor * np.random.normal(
            loc=0.0, scale=1.0, size=array.shape
        )
        return np.clip(noisy_array, 0.0, 1.0)

    train_data, _ = _images(256, 28, 7, 1)
    train_data = preprocess(train_data)
    noisy_train_data = noise(train_data)

    with mirrored_strategy(2).scope():
        input = layers.Input(shape=(28, 28, 1))
        # Encoder
        x = layers.Conv2D(16, (3, 3), activation="relu", padding="same")(input)  # the example: 32
        x = layers.MaxPooling2D((2, 2), padding="same")(x)
        x = layers.Conv2D(16, (3, 3), activation="relu", padding="same")(x)
        x = layers.MaxPooling2D((2, 2), padding="same")(x)
        # Decoder
        x = layers.Conv2DTranspose(16, (3, 3), strides=2, activation="relu", padding="same")(x)
        x = layers.Conv2DTranspose(16, (3, 3), strides=2, activation="relu", padding="same")(x)
        x = layers.Conv2D(1, (3, 3), activation="sigmoid", padding="same")(x)
        # Autoencoder
        autoencoder = keras.Model(input, x)
        autoencoder.compile(optimizer="adam", loss="binary_crossentropy")
    history = autoencoder.fit(
        x=noisy_train_data,
        y=train_data,
        epochs=6,  # the example: 100
        batch_size=64,  # the example: 128
        shuffle=True,
        verbose=0,
    )
    # Crossentropy against grey-level targets has a floor above 0: it falls, and the output
    # is closer to the clean images than the noisy inputs are.
    assert history.history["loss"][-1] < history.history["loss"][0]
    denoised = autoencoder.predict(noisy_train_data[:32], verbose=0)
    assert np.mean((denoised - train_data[:32]) ** 2) < np.mean(
        (noisy_train_data[:32] - train_data[:32]) ** 2)


# -- guides/writing_your_own_callbacks.py --------------------------------------------------------


class LossAndErrorPrintingCallback(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.lines = []

    def on_train_batch_end(self, batch, logs=None):
        self.lines.append(f"Up to batch {batch}, the average loss is {logs['loss']:7.2f}.")

    def on_test_batch_end(self, batch, logs=None):
        self.lines.append(f"Up to batch {batch}, the average loss is {logs['loss']:7.2f}.")

    def on_epoch_end(self, epoch, logs=None):
        self.lines.append(
            f"The average loss for epoch {epoch} is {logs['loss']:7.2f} "
            f"and mean absolute error is {logs['mean_absolute_error']:7.2f}.")


class EarlyStoppingAtMinLoss(keras.callbacks.Callback):
    """Stop training when the loss is at its min, i.e. the loss stops decreasing.

    Arguments:
        patience: Number of epochs to wait after min has been hit. After this
        number of no improvement, training stops.
    """

    def __init__(self, patience=0):
        super().__init__()
        self.patience = patience
        # best_weights to store the weights at which the minimum loss occurs.
        self.best_weights = None

    def on_train_begin(self, logs=None):
        # The number of epoch it has waited when loss is no longer minimum.
        self.wait = 0
        # The epoch the training stops at.
        self.stopped_epoch = 0
        # Initialize the best as infinity.
        self.best = np.inf

    def on_epoch_end(self, epoch, logs=None):
        current = logs.get("loss")
        if np.less(current, self.best):
            self.best = current
            self.wait = 0
            # Record the best weights if current results is better (less).
            self.best_weights = self.model.get_weights()
        else:
            self.wait += 1
            if self.wait >= self.patience:
                self.stopped_epoch = epoch
                self.model.stop_training = True
                # Restoring model weights from the end of the best epoch.
                self.model.set_weights(self.best_weights)


class CustomLearningRateScheduler(keras.callbacks.Callback):
    """Learning rate scheduler which sets the learning rate according to schedule.

    Arguments:
        schedule: a function that takes an epoch index
            (integer, indexed from 0) and current learning rate
            as inputs and returns a new learning rate as output (float).
    """

    def __init__(self, schedule):
        super().__init__()
        self.schedule = schedule
        self.rates = []

    def on_epoch_begin(self, epoch, logs=None):
        if not hasattr(self.model.optimizer, "learning_rate"):
            raise ValueError('Optimizer must have a "learning_rate" attribute.')
        # Get the current learning rate from model's optimizer.
        lr = self.model.optimizer.learning_rate
        # Call schedule function to get the scheduled learning rate.
        scheduled_lr = self.schedule(epoch, lr)
        # Set the value back to the optimizer before this epoch starts
        self.model.optimizer.learning_rate = scheduled_lr
        self.rates.append(float(np.array(scheduled_lr)))


def test_writing_your_own_callbacks():
    # Define the Keras model to add callbacks to
    def get_model():
        model = keras.Sequential()
        model.add(keras.layers.Input((8,)))
        model.add(keras.layers.Dense(1))
        model.compile(
            optimizer=keras.optimizers.RMSprop(learning_rate=0.1),
            loss="mean_squared_error",
            metrics=["mean_absolute_error"],
        )
        return model

    # A linear target in place of MNIST pixels and labels.
    x_train = np.random.default_rng(0).normal(size=(1000, 8)).astype("float32")
    y_train = x_train @ np.arange(1, 9, dtype="float32") / 8
    x_test, y_test = x_train[:200], y_train[:200]

    with mirrored_strategy(2).scope():
        model = get_model()
    printing = LossAndErrorPrintingCallback()
    model.fit(x_train, y_train, batch_size=128, epochs=2, verbose=0, callbacks=[printing])
    model.evaluate(x_test, y_test, batch_size=128, verbose=0, callbacks=[printing])
    assert len(printing.lines) == 2 * 8 + 2 + 2  # train batches, epoch ends, test batches
    assert printing.lines[-3].startswith("The average loss for epoch 1 is")

    with mirrored_strategy(2).scope():
        model = get_model()
    stopper = EarlyStoppingAtMinLoss()
    history = model.fit(x_train, y_train, batch_size=64, steps_per_epoch=5, epochs=30,
                        verbose=0, callbacks=[stopper])
    assert stopper.stopped_epoch == len(history.history["loss"]) - 1 < 29  # stopped early
    for restored, best in zip(model.get_weights(), stopper.best_weights):
        np.testing.assert_array_equal(restored, best)

    LR_SCHEDULE = [
        # (epoch to start, learning rate) tuples
        (3, 0.05),
        (6, 0.01),
        (9, 0.005),
        (12, 0.001),
    ]

    def lr_schedule(epoch, lr):
        """Helper function to retrieve the scheduled learning rate based on epoch."""
        if epoch < LR_SCHEDULE[0][0] or epoch > LR_SCHEDULE[-1][0]:
            return lr
        for i in range(len(LR_SCHEDULE)):
            if epoch == LR_SCHEDULE[i][0]:
                return LR_SCHEDULE[i][1]
        return lr

    with mirrored_strategy(2).scope():
        model = get_model()
    scheduler = CustomLearningRateScheduler(lr_schedule)
    history = model.fit(x_train, y_train, batch_size=64, steps_per_epoch=5, epochs=15,
                        verbose=0, callbacks=[scheduler])
    np.testing.assert_allclose(scheduler.rates, [0.1] * 3 + [0.05] * 3 + [0.01] * 3
                               + [0.005] * 3 + [0.001] * 3, rtol=1e-6)
    assert history.history["loss"][-1] < 0.1 * history.history["loss"][0]


# -- guides/understanding_masking_and_padding.py ------------------------------------------------


class TemporalSplit(keras.layers.Layer):
    """Split the input tensor into 2 tensors along the time dimension."""

    def call(self, inputs):
        # Expect the input to be 3D and mask to be 2D, split the input tensor into 2
        # subtensors along the time axis (axis 1).
        return ops.split(inputs, 2, axis=1)

    def compute_mask(self, inputs, mask=None):
        # Also split the mask into 2 if it presents.
        if mask is None:
            return None
        return ops.split(mask, 2, axis=1)


class CustomEmbedding(keras.layers.Layer):
    def __init__(self, input_dim, output_dim, mask_zero=False, **kwargs):
        super().__init__(**kwargs)
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.mask_zero = mask_zero

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            shape=(self.input_dim, self.output_dim),
            initializer="random_normal",
            dtype="float32",
        )

    def call(self, inputs):
        inputs = ops.cast(inputs, "int32")
        return ops.take(self.embeddings, inputs)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero:
            return None
        return ops.not_equal(inputs, 0)


class TemporalSoftmax(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, mask=None):
        assert mask is not None
        broadcast_float_mask = ops.expand_dims(ops.cast(mask, "float32"), -1)
        inputs_exp = ops.exp(inputs) * broadcast_float_mask
        inputs_sum = ops.sum(inputs_exp * broadcast_float_mask, axis=-1, keepdims=True)
        return inputs_exp / inputs_sum


def test_understanding_masking_and_padding():
    raw_inputs = [
        [711, 632, 71],
        [73, 8, 3215, 55, 927],
        [83, 91, 1, 645, 1253, 927],
    ]
    # By default, this will pad using 0s; it is configurable via the
    # "value" parameter.
    # Note that you could use "pre" padding (at the beginning) or
    # "post" padding (at the end).
    # We recommend using "post" padding when working with RNN layers
    # (in order to be able to use the
    # CuDNN implementation of the layers).
    padded_inputs = keras.utils.pad_sequences(raw_inputs, padding="post")
    np.testing.assert_array_equal(padded_inputs[0], [711, 632, 71, 0, 0, 0])

    with mirrored_strategy(2).scope():
        # A mask-consuming LSTM: the padded sequence gives the unpadded one's output.
        inputs = keras.Input(shape=(None,), dtype="int32")
        x = layers.Embedding(input_dim=5000, output_dim=16, mask_zero=True)(inputs)
        outputs = layers.LSTM(32)(x)
        model = keras.Model(inputs, outputs)
    padded = model.predict(padded_inputs, verbose=0)
    unpadded = model.predict(np.array([raw_inputs[0]]), verbose=0)
    np.testing.assert_allclose(padded[0], unpadded[0], rtol=1e-5, atol=1e-6)

    layer = CustomEmbedding(10, 32, mask_zero=True)
    x = np.random.random((3, 10)) * 9
    x = x.astype("int32")
    y = layer(x)
    mask = layer.compute_mask(x)
    np.testing.assert_array_equal(mask, x != 0)
    first, second = TemporalSplit().compute_mask(y, mask)
    np.testing.assert_array_equal(second, (x != 0)[:, 5:])

    with mirrored_strategy(2).scope():
        inputs = keras.Input(shape=(None,), dtype="int32")
        x = layers.Embedding(input_dim=10, output_dim=32, mask_zero=True)(inputs)
        x = layers.Dense(1)(x)
        outputs = TemporalSoftmax()(x)
        model = keras.Model(inputs, outputs)
    ids = np.random.default_rng(0).integers(0, 10, size=(32, 100))
    y = model.predict(ids, verbose=0)
    # Softmax over the one feature: 1 where unmasked; 0 / 0 where masked, as in Keras.
    np.testing.assert_array_equal(np.isnan(y[..., 0]), ids == 0)
    np.testing.assert_allclose(y[..., 0][ids != 0], 1.0, rtol=1e-6)
