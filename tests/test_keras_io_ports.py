"""keras-io's text_classification_with_transformer.py ported by renaming only
(``keras`` -> ``mirrorfit``, ``keras.layers`` -> ``mirrorfit.layers``, ``keras.ops`` ->
``mirrorfit.ops``), on small synthetic data instead of IMDB."""

import numpy as np

import mirrorfit as keras
from mirrorfit import layers, ops
from tests.helpers import mirrored_strategy


class TransformerBlock(layers.Layer):
    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
        self.ffn = keras.Sequential(
            [layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)]
        )
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs):
        attn_output = self.att(inputs, inputs)
        attn_output = self.dropout1(attn_output)
        out1 = self.layernorm1(inputs + attn_output)
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
        positions = ops.arange(start=0, stop=maxlen, step=1)
        positions = self.pos_emb(positions)
        x = self.token_emb(x)
        return x + positions


def test_text_classification_with_transformer_ports_by_renaming():
    vocab_size, maxlen = 50, 12
    rng = np.random.default_rng(0)
    x_train = rng.integers(1, vocab_size, size=(256, maxlen))
    y_train = (x_train[:, 0] > 25).astype(np.int64)  # learnable from the first token
    embed_dim, num_heads, ff_dim = 16, 2, 16
    with mirrored_strategy(8).scope():
        inputs = layers.Input(shape=(maxlen,))
        embedding_layer = TokenAndPositionEmbedding(maxlen, vocab_size, embed_dim)
        x = embedding_layer(inputs)
        transformer_block = TransformerBlock(embed_dim, num_heads, ff_dim)
        x = transformer_block(x)
        x = layers.GlobalAveragePooling1D()(x)
        x = layers.Dropout(0.1)(x)
        x = layers.Dense(20, activation="relu")(x)
        x = layers.Dropout(0.1)(x)
        outputs = layers.Dense(2, activation="softmax")(x)
        model = keras.Model(inputs=inputs, outputs=outputs)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    history = model.fit(x_train, y_train, batch_size=32, epochs=20, verbose=0,
                        validation_data=(x_train[:64], y_train[:64]))
    # Keras' parameter counts: embeddings (50 + 12) * 16; attention 4 * (16 * 2 * 16) + 2 *
    # 16 * 2 + 16 (query/key/value/output kernels and biases); ffn 16 * 16 + 16 twice; two
    # layer norms 2 * 32; heads 16 * 20 + 20 and 20 * 2 + 2.
    attention = 3 * (16 * 2 * 16 + 2 * 16) + (2 * 16 * 16 + 16)
    assert model.count_params() == (62 * 16 + attention + 2 * (16 * 16 + 16) + 2 * 32
                                    + 16 * 20 + 20 + 20 * 2 + 2)
    assert transformer_block.count_params() == attention + 2 * (16 * 16 + 16) + 2 * 32
    assert history.history["loss"][-1] < 0.8 * history.history["loss"][0]
    assert history.history["val_accuracy"][-1] > 0.7  # chance: about 0.5
    # The layer objects share the trained weights: the embedding table is the model's.
    trained = np.asarray(model.params[embedding_layer.name]["token_emb/embeddings"])
    np.testing.assert_array_equal(embedding_layer.token_emb.get_weights()[0], trained)
