"""Device-resident datasets: ``fit`` on in-memory arrays, host path against resident, at D=1.

Usage::

    PYTHONPATH=. python benchmarks/resident.py            # a few minutes on 2 CPU cores
    PYTHONPATH=. python benchmarks/resident.py --quick    # smoke run, seconds
    PYTHONPATH=. python benchmarks/resident.py --out DIR  # JSON + markdown into DIR
    PYTHONPATH=. python benchmarks/resident.py --rows-scale 8 --rounds 4   # on a GPU

Cases: an MLP (784 -> 256 relu -> 10, Adam) and a small CNN (28x28x1: Conv 16 3x3 relu,
max-pool 2, Conv 32 3x3 relu, max-pool 2, Dense 10, Adam) on random MNIST-shaped data, at
global batch 32 and 256, shuffled every epoch, on one device (the first of
``jax.devices()``), each with

* ``host``: ``fit(..., device_resident=False)``: every step gathers its rows with NumPy and
  the step's call transfers them;
* ``resident``: ``fit(..., device_resident=True)``: the arrays are placed once per ``fit``
  and each step receives only its int32 row indices and mask.

Each ``fit`` runs one warm-up epoch (compiles, and places a resident data set) and then
``repeats`` timed epochs; the two paths run alternately, ``rounds`` fits each, so load on
a shared machine falls on both (the report records the load average before and after).
The table shows the median examples/s over all timed epochs of each path, and the median
over rounds of the paired ratio resident / host (each round's two fits ran back to back,
so a change of load between rounds cancels), with its lowest and highest round; and the
same paired ratio of examples per second of the process's CPU time (all its threads),
which a machine shared with other work disturbs less than wall time. Nothing asserts on
speed.
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

import jax
import numpy as np

import mirrorfit as mf

HERE = Path(__file__).resolve().parent
CLASSES = 10


def make_model(kind: str):
    """The MLP or the CNN on one device, compiled with Adam and sparse crossentropy."""
    if kind == "mlp":
        layers = [mf.layers.Dense(256, activation="relu"), mf.layers.Dense(CLASSES)]
        shape: tuple[int, ...] = (784,)
    else:
        layers = [mf.layers.Conv2D(16, 3, activation="relu"), mf.layers.MaxPooling2D(2),
                  mf.layers.Conv2D(32, 3, activation="relu"), mf.layers.MaxPooling2D(2),
                  mf.layers.Flatten(), mf.layers.Dense(CLASSES)]
        shape = (28, 28, 1)
    with mf.MirroredStrategy(jax.devices()[:1]).scope():
        model = mf.Sequential(layers, input_shape=shape, seed=0)
        model.compile("adam", mf.losses.SparseCategoricalCrossentropy(from_logits=True),
                      ["accuracy"])
    return model, shape


class EpochTimer(mf.callbacks.Callback):
    """Wall and process CPU time of every epoch, including waiting for its last step."""

    def __init__(self):
        super().__init__()
        self.seconds, self.cpu_seconds, self._start = [], [], (0.0, 0.0)

    def on_epoch_begin(self, epoch, logs=None):
        self._start = (time.perf_counter(), time.process_time())

    def on_epoch_end(self, epoch, logs=None):
        float(logs["loss"])  # the epoch's steps are done
        self.seconds.append(time.perf_counter() - self._start[0])
        self.cpu_seconds.append(time.process_time() - self._start[1])


def run_pair(kind: str, rows: int, batch: int, repeats: int, rounds: int) -> dict:
    """Examples/s of the host and resident paths, alternating ``rounds`` fits each."""
    rng = np.random.default_rng(0)
    rates: dict[str, list[float]] = {"host": [], "resident": []}
    cpu_rates: dict[str, list[float]] = {"host": [], "resident": []}
    models = {path: make_model(kind) for path in rates}
    shape = models["host"][1]
    x = rng.random((rows, *shape), np.float32)
    y = rng.integers(0, CLASSES, rows).astype(np.int32)
    for _ in range(rounds):
        for path, (model, _) in models.items():
            timer = EpochTimer()
            model.fit(x, y, batch_size=batch, epochs=repeats + 1, verbose=0,
                      callbacks=[timer], device_resident=path == "resident")
            rates[path] += [rows / seconds for seconds in timer.seconds[1:]]
            cpu_rates[path] += [rows / seconds for seconds in timer.cpu_seconds[1:]]
    host, resident = (statistics.median(rates[p]) for p in ("host", "resident"))
    def paired(rates):
        return [statistics.median(rates["resident"][i:i + repeats])
                / statistics.median(rates["host"][i:i + repeats])
                for i in range(0, len(rates["host"]), repeats)]

    wall, cpu = paired(rates), paired(cpu_rates)
    return {"model": kind, "global_batch": batch, "rows": rows,
            "host_examples_per_s": host, "resident_examples_per_s": resident,
            "ratio": statistics.median(wall), "ratio_min": min(wall), "ratio_max": max(wall),
            "cpu_time_ratio": statistics.median(cpu), "cpu_time_ratio_min": min(cpu),
            "cpu_time_ratio_max": max(cpu), "epochs_timed": len(rates["host"]),
            "all_examples_per_s": rates, "all_examples_per_cpu_s": cpu_rates}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--rounds", type=int, default=8, help="fits per path and case")
    parser.add_argument("--rows-scale", type=int, default=1,
                        help="multiplies the data sets' rows (8192 MLP, 2048 CNN), e.g. 8 on "
                             "an accelerator, where an epoch of the defaults takes milliseconds")
    args = parser.parse_args(argv)
    repeats, rounds = (1, 1) if args.quick else (1, args.rounds)
    load_before = os.getloadavg()
    scale = args.rows_scale
    sizes = {"mlp": 512 if args.quick else 8192 * scale,
             "cnn": 256 if args.quick else 2048 * scale}
    results = [run_pair(kind, sizes[kind], batch, repeats, rounds)
               for kind in ("mlp", "cnn") for batch in (32, 256)]
    device = jax.devices()[0]
    header = (f"Device: {device.platform} ({device.device_kind}), one device, "
              f"{os.cpu_count()} CPU cores; {sizes['mlp']:,} MLP and {sizes['cnn']:,} CNN rows; "
              f"median examples/s over "
              f"{results[0]['epochs_timed']} timed epochs per path; 1-minute load average "
              f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after.")
    lines = [header, "",
             ("| model | global batch | host | resident | resident / host (rounds' range) "
              "| same, per CPU second |"), "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['model']} | {r['global_batch']} | "
                     f"{r['host_examples_per_s']:,.0f} | {r['resident_examples_per_s']:,.0f} | "
                     f"{r['ratio']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
                     f"{r['cpu_time_ratio']:.2f} ({r['cpu_time_ratio_min']:.2f}-"
                     f"{r['cpu_time_ratio_max']:.2f}) |")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    where = (f"{os.cpu_count()}core" if device.platform == "cpu"
             else device.device_kind.lower().replace(" ", "-"))
    stem = (f"resident-{device.platform}-{where}-{datetime.date.today()}"
            + ("-quick" if args.quick else ""))
    report = {"machine": platform.machine(), "python": sys.version.split()[0],
              "jax": jax.__version__, "device": str(device.device_kind),
              "load_average": {"before": load_before, "after": os.getloadavg()},
              "results": results}
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2))
    (out / f"{stem}.md").write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
