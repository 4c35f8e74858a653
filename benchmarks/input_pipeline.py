"""Input-pipeline benchmark: ``fit`` fed by host-side sources, against the same data as arrays.

Usage::

    PYTHONPATH=. python benchmarks/input_pipeline.py            # about 2 minutes on 2 CPU cores
    PYTHONPATH=. python benchmarks/input_pipeline.py --quick    # smoke run, a few seconds
    PYTHONPATH=. python benchmarks/input_pipeline.py --out DIR  # JSON + markdown into DIR

Cases, all training the same MLP (3,072 -> 128 relu -> 10 softmax, Adam) with ``fit``:

* ``arrays``: the crops precomputed, passed as NumPy arrays (no per-batch host work);
* ``generator_prefetch``: a Python generator that crops a random 32x32 window out of
  36x36x3 images and flips half of them, in NumPy, per batch; the prefetch thread runs it
  while the step runs (the default);
* ``generator_no_prefetch``: the same generator with ``model.trainer.prefetch = False``;
* ``grain_loader``: a ``grain.DataLoader`` doing the same crop and flip as a random map
  transform, batched by grain (skipped when grain is not installed).

Each case runs one warm-up epoch (compiles) and then ``repeats`` timed epochs; the table shows
the median examples/s and its ratio to ``arrays``. Nothing asserts on speed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import flax.linen as nn
import numpy as np

import mirrorfit as mf

HERE = Path(__file__).resolve().parent
SIZE, CROP, CLASSES = 36, 32, 10


def crop_and_flip(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random ``CROP x CROP`` windows of ``[batch, SIZE, SIZE, 3]`` images, half flipped,
    flattened to ``[batch, CROP * CROP * 3]``."""
    top, left = rng.integers(0, SIZE - CROP + 1, size=2)
    out = images[:, top:top + CROP, left:left + CROP]
    flip = rng.random(len(images)) < 0.5
    out = np.where(flip[:, None, None, None], out[:, :, ::-1], out)
    return out.reshape(len(images), -1)


def make_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.random((n, SIZE, SIZE, 3), np.float32),
            rng.integers(0, CLASSES, n).astype(np.int32))


def make_model():
    with mf.MirroredStrategy().scope():
        model = mf.Sequential([nn.Dense(128), nn.relu, nn.Dense(CLASSES), nn.softmax],
                              input_shape=(CROP * CROP * 3,))
        model.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
    return model


def generator(images, labels, batch, epochs):
    rng = np.random.default_rng(1)
    for _ in range(epochs):
        for start in range(0, len(images), batch):
            yield crop_and_flip(images[start:start + batch], rng), labels[start:start + batch]


def grain_loader(images, labels, batch):
    import grain

    class CropFlip(grain.transforms.RandomMap):
        def random_map(self, element, rng):
            image, label = element
            return crop_and_flip(image[None], rng)[0], label

    sampler = grain.samplers.IndexSampler(len(images), shard_options=grain.sharding.NoSharding(),
                                          shuffle=False, num_epochs=1, seed=0)
    source = [(images[i], labels[i]) for i in range(len(images))]
    return grain.DataLoader(data_source=source, sampler=sampler, worker_count=0,
                            operations=[CropFlip(), grain.transforms.Batch(batch)])


def run_case(case: str, images, labels, batch: int, repeats: int) -> dict:
    model = make_model()
    steps = -(-len(images) // batch)
    epochs = repeats + 1
    if case == "arrays":
        x = crop_and_flip(images, np.random.default_rng(1))
        fit_args = {"x": x, "y": labels, "batch_size": batch, "shuffle": False}
    elif case.startswith("generator"):
        model.trainer.prefetch = case == "generator_prefetch"
        fit_args = {"x": generator(images, labels, batch, epochs), "steps_per_epoch": steps}
    else:
        fit_args = {"x": grain_loader(images, labels, batch)}  # re-iterated every epoch
    timer = EpochTimer()
    model.fit(epochs=epochs, verbose=0, callbacks=[timer], **fit_args)
    rates = [len(images) / seconds for seconds in timer.seconds[1:]]  # epoch 0 compiles
    return {"case": case, "examples_per_s": {"median": statistics.median(rates),
                                             "min": min(rates), "max": max(rates)},
            "repeats": len(rates)}


class EpochTimer(mf.callbacks.Callback):
    """Wall time of every epoch, including waiting for its last step."""

    def __init__(self):
        super().__init__()
        self.seconds, self._start = [], 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        float(logs["loss"])  # the epoch's steps are done
        self.seconds.append(time.perf_counter() - self._start)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    n, batch, repeats = (512, 64, 2) if args.quick else (8192, 256, 5)
    images, labels = make_data(n)
    cases = ["arrays", "generator_prefetch", "generator_no_prefetch", "grain_loader"]
    rows = []
    for case in cases:
        if case == "grain_loader":
            try:
                import grain  # noqa: F401
            except ImportError:
                rows.append({"case": case, "status": "not installed"})
                continue
        rows.append({"status": "ok", **run_case(case, images, labels, batch, repeats)})
    base = rows[0]["examples_per_s"]["median"]
    lines = ["| case | examples/s (median) | ratio to arrays |", "|---|---|---|"]
    for row in rows:
        if row["status"] != "ok":
            lines.append(f"| {row['case']} | {row['status']} | |")
            continue
        rate = row["examples_per_s"]["median"]
        row["ratio"] = rate / base
        lines.append(f"| {row['case']} | {rate:,.0f} | {rate / base:.2f} |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = (f"input-cpu-{os.cpu_count()}core-{datetime.date.today()}"
            + ("-quick" if args.quick else ""))
    report = {"machine": platform.machine(), "python": sys.version.split()[0],
              "rows": n, "global_batch": batch, "results": rows}
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2))
    (out / f"{stem}.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
