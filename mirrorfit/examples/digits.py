"""The main job: a MirroredStrategy MLP or CNN on real handwritten digits.

Trains Dense(128) -> relu -> Dense(10) -> softmax (``--model mlp``, Flax layers) or
a Keras-style CNN from ``mf.layers`` (``--model cnn``: Conv2D(32, 3, "same", relu) ->
MaxPooling2D -> Flatten -> Dense(64, relu) -> Dense(10, softmax)) under ``mf.MirroredStrategy``
on the 1,797 8x8 handwritten digits that scikit-learn ships
(``sklearn.datasets.load_digits``), or on a local Keras-format ``mnist.npz``,
then evaluates on a held-out split and writes the history, a plot, the weights
and the test metrics into ``--out``.

Run it as ``mirrorfit-digits`` or ``python -m mirrorfit.examples.digits``;
``--cpu-devices 8`` simulates 8 replicas on the CPU. Importing JAX, Flax and
mirrorfit does not start JAX's backends, so :func:`main` can still set the
device count after parsing the arguments, before the first JAX computation.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import time
from collections.abc import Sequence

import flax.linen as nn
import numpy as np
from matplotlib.figure import Figure
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import mirrorfit as mf
from mirrorfit.utils import simulate_cpu_devices

# Adam at Keras' default learning rate reaches 0.95 test accuracy in ~15 epochs
# at global batch 32 (1 replica) but needs ~60 at global batch 256 (8 replicas,
# 6 steps per epoch); 80 clears the bar with a margin for both.
DEFAULT_EPOCHS = 80
# The CNN reaches ~0.95 after ~230 steps (10 epochs at global batch 64); at global
# batch 256 (8 replicas, 6 steps per epoch) 60 epochs leave a margin.
DEFAULT_CNN_EPOCHS = 60
DEFAULT_OUT = "mirrorfit-digits-run"
_PER_REPLICA_BATCH = 32
_MNIST_KEYS = ("x_train", "y_train", "x_test", "y_test")

Split = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mirrorfit-digits",
        description=(
            "Train a Dense(128)-relu-Dense(10)-softmax classifier (or, with --model cnn, "
            "a Keras-style CNN from mf.layers) with "
            "mf.MirroredStrategy on scikit-learn's handwritten digits (or a local "
            "mnist.npz), evaluate it on a held-out split, and write history.json, "
            "history.png, weights.npz and metrics.json into --out."
        ),
    )
    parser.add_argument(
        "--model", choices=("mlp", "cnn"), default="mlp",
        help=(
            "mlp: Flax Dense(128)-relu-Dense(10)-softmax; cnn: mf.layers Conv2D(32, 3, "
            "'same', relu)-MaxPooling2D-Flatten-Dense(64, relu)-Dense(10, softmax) on the "
            "images "
            "(default: %(default)s)."
        ),
    )
    parser.add_argument(
        "--epochs", type=int, default=None,
        help=(
            f"Number of epochs (default: {DEFAULT_EPOCHS} for mlp, "
            f"{DEFAULT_CNN_EPOCHS} for cnn)."
        ),
    )
    parser.add_argument(
        "--batch-size", type=int, default=None,
        help=(
            f"GLOBAL batch size, split across the replicas "
            f"(default: {_PER_REPLICA_BATCH} * num_replicas_in_sync)."
        ),
    )
    parser.add_argument(
        "--cpu-devices", type=int, default=None, metavar="N",
        help=(
            "Simulate N CPU devices (one replica each) by setting "
            "--xla_force_host_platform_device_count before JAX starts. "
            "Only affects the CPU backend (default: the real local devices)."
        ),
    )
    parser.add_argument(
        "--out", type=pathlib.Path, default=pathlib.Path(DEFAULT_OUT),
        help="Output directory (default: ./%(default)s).",
    )
    parser.add_argument(
        "--seed", type=int, default=0,
        help="Seed for the train/test split, parameter init and shuffling (default: 0).",
    )
    parser.add_argument(
        "--dataset", choices=("digits", "mnist"), default="digits",
        help="digits: sklearn.datasets.load_digits; mnist: --data-path (default: digits).",
    )
    parser.add_argument(
        "--data-path", type=pathlib.Path, default=None, metavar="PATH",
        help=(
            "Local Keras-format mnist.npz with arrays x_train, y_train, x_test, "
            "y_test (as written by keras.datasets.mnist). Required with "
            "--dataset mnist; nothing is downloaded."
        ),
    )
    parser.add_argument(
        "--verbose", type=int, choices=(0, 1, 2), default=2,
        help="0: silent, 1: progress bar, 2: one line per epoch (default: 2).",
    )
    args = parser.parse_args(argv)
    if args.epochs is None:
        args.epochs = DEFAULT_CNN_EPOCHS if args.model == "cnn" else DEFAULT_EPOCHS
    for name in ("epochs", "batch_size", "cpu_devices"):
        value = getattr(args, name)
        if value is not None and value < 1:
            flag = "--" + name.replace("_", "-")
            parser.error(f"{flag} must be a positive int. Received: {flag}={value}")
    if args.dataset == "mnist" and args.data_path is None:
        parser.error(
            "--dataset mnist needs --data-path PATH to a local Keras-format "
            "mnist.npz (x_train, y_train, x_test, y_test); nothing is downloaded. "
            "Received: --data-path=None"
        )
    if args.dataset == "mnist" and not args.data_path.is_file():
        parser.error(
            "--data-path must point to an existing Keras-format mnist.npz "
            "(x_train, y_train, x_test, y_test); nothing is downloaded. Download "
            "it yourself, e.g. with keras.datasets.mnist.load_data(), or use "
            f"--dataset digits. Received: --data-path={args.data_path}"
        )
    return args


def load_digits_split(seed: int) -> Split:
    """Loads scikit-learn's digits with a stratified 80/20 train/test split.

    Args:
        seed: ``random_state`` of ``sklearn.model_selection.train_test_split``.

    Returns:
        ``(x_train, y_train, x_test, y_test)``: float32 pixels in [0, 1] of shape
        ``[num_examples, 64]`` and int32 labels of shape ``[num_examples]``;
        1,437 train and 360 test examples.
    """
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)  # Pixel values are 0..16.
    y = y.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=seed
    )
    # sklearn ships no type stubs; pyright infers lists where it returns arrays.
    return x_train, y_train, x_test, y_test  # pyright: ignore[reportReturnType]


def load_mnist_npz(path: pathlib.Path) -> Split:
    """Loads a local Keras-format ``mnist.npz`` with its own train/test split.

    Args:
        path: File with uint8 arrays ``x_train`` ``[60000, 28, 28]``,
            ``y_train`` ``[60000]``, ``x_test`` ``[10000, 28, 28]`` and
            ``y_test`` ``[10000]``. Read with ``allow_pickle=False``.

    Returns:
        ``(x_train, y_train, x_test, y_test)``: float32 pixels in [0, 1] of shape
        ``[num_examples, 784]`` and int32 labels of shape ``[num_examples]``.

    Raises:
        ValueError: If the file lacks one of the four arrays.
    """
    with np.load(path, allow_pickle=False) as data:
        missing = [key for key in _MNIST_KEYS if key not in data.files]
        if missing:
            raise ValueError(
                f"--data-path must be a Keras-format mnist.npz with arrays "
                f"{', '.join(_MNIST_KEYS)}; {', '.join(missing)} missing. "
                f"Received: --data-path={path} with arrays {data.files}"
            )
        x_train, y_train, x_test, y_test = (data[key] for key in _MNIST_KEYS)

    def pixels(x: np.ndarray) -> np.ndarray:
        return (x.reshape(len(x), -1) / 255.0).astype(np.float32)

    return pixels(x_train), y_train.astype(np.int32), pixels(x_test), y_test.astype(np.int32)


def save_history_plot(history: dict[str, list[float | np.ndarray]], path: pathlib.Path) -> None:
    """Plots loss and accuracy per epoch, train and validation, into a PNG.

    Args:
        history: ``History.history``: ``loss``, ``accuracy`` and their ``val_``
            versions, one float per epoch.
        path: Where to write the PNG.
    """
    # A bare Figure (no pyplot) renders with Agg and needs no GUI backend.
    fig = Figure(figsize=(10, 4), layout="constrained")
    for ax, metric in zip(fig.subplots(1, 2), ("loss", "accuracy")):
        for key in (metric, f"val_{metric}"):
            if key in history:
                epochs = range(1, len(history[key]) + 1)
                ax.plot(epochs, history[key], marker=".", label=key)
        ax.set_xlabel("epoch")
        ax.set_title(metric)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.savefig(path, dpi=100)


def build_model(kind: str, num_features: int, seed: int) -> mf.Model:
    """The job's model for flattened square images of ``num_features`` pixels.

    Args:
        kind: ``"mlp"`` (Flax layers on the flat pixels) or ``"cnn"`` (``mf.layers``, as a
            tf.keras tutorial writes it, on ``[side, side, 1]`` images).
        num_features: pixels per image, a square number (64 for digits, 784 for MNIST).
        seed: the model's seed.

    Returns:
        A built, uncompiled `mirrorfit.Model` on the current strategy.
    """
    if kind == "mlp":
        return mf.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax],
                             input_shape=(num_features,), seed=seed)
    side = round(num_features ** 0.5)
    return mf.Sequential([
        mf.Input((side, side, 1)),
        mf.layers.Conv2D(32, 3, activation="relu", padding="same"),
        mf.layers.MaxPooling2D(),
        mf.layers.Flatten(),
        mf.layers.Dense(64, activation="relu"),
        mf.layers.Dense(10, activation="softmax"),
    ], seed=seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the main job; the ``mirrorfit-digits`` console script.

    Args:
        argv: Command-line arguments without the program name; ``None`` reads
            ``sys.argv``. See ``mirrorfit-digits --help``.

    Returns:
        0, the exit status.

    Example:
        >>> from mirrorfit.examples import digits
        >>> digits.main(["--cpu-devices", "8", "--out", "/tmp/run"])  # doctest: +SKIP
    """
    args = _parse_args(argv)
    if args.cpu_devices is not None:
        simulate_cpu_devices(args.cpu_devices)
    if args.dataset == "digits":
        x_train, y_train, x_test, y_test = load_digits_split(args.seed)
    else:
        x_train, y_train, x_test, y_test = load_mnist_npz(args.data_path)
    num_features = x_train.shape[1]
    if args.model == "cnn":  # images [N, side, side, 1], channels last as Keras
        side = round(num_features ** 0.5)
        x_train, x_test = (x.reshape(-1, side, side, 1) for x in (x_train, x_test))

    strategy = mf.MirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    batch_size = args.batch_size or _PER_REPLICA_BATCH * replicas
    print(
        f"{args.dataset}: {len(x_train)} train / {len(x_test)} test examples; "
        f"{replicas} replica(s) on {strategy.devices[0].platform}; "
        f"global batch {batch_size}; {args.epochs} epochs; model {args.model}"
    )
    with strategy.scope():
        model = build_model(args.model, num_features, args.seed)
        model.compile(
            optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )

    start = time.perf_counter()
    history = model.fit(
        x_train, y_train, batch_size=batch_size, epochs=args.epochs,
        validation_split=0.1, verbose=args.verbose,
    )
    fit_seconds = time.perf_counter() - start
    results = model.evaluate(
        x_test, y_test, batch_size=batch_size, verbose=0, return_dict=True
    )
    print(
        f"test loss {results['loss']:.4f}, test accuracy {results['accuracy']:.4f} "
        f"(fit took {fit_seconds:.1f} s)"
    )

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "history.json").write_text(
        json.dumps({"epoch": history.epoch, "history": history.history}, indent=2)
    )
    save_history_plot(history.history, out / "history.png")
    # Keras order (model.get_weights(): per layer kernel, then bias), so the list loads into
    # the same tf.keras model with set_weights; read it back with
    # np.load(path, allow_pickle=False) and [f[f"arr_{i}"] for i in range(len(f.files))].
    np.savez(out / "weights.npz", *(np.asarray(w) for w in model.get_weights()))
    metrics = {
        "test_loss": float(results["loss"]),
        "test_accuracy": float(results["accuracy"]),
        "num_replicas": replicas,
        "global_batch_size": batch_size,
        "epochs": args.epochs,
        "dataset": args.dataset,
        "model": args.model,
        "seed": args.seed,
        "fit_seconds": fit_seconds,
    }
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(f"wrote history.json, history.png, weights.npz and metrics.json to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
