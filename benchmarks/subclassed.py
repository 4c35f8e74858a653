"""``fit`` of a subclassed model vs the same model as a Sequential vs a hand-written JAX loop.

    python benchmarks/subclassed.py [--rounds 3] [--cases 1:32 8:256]

Issue 28 made ``class M(mf.Model)`` train through the Keras object model (variables traced
in a stateless scope, `mirrorfit._src.modules.objects.ObjectAdapter`). The compiled step
should be the same program as for the Sequential of the same ``mf.layers``, so their
examples/s should agree within the rounds' spread. For each case ``D:B`` (D simulated CPU
devices, global batch B) each round runs one fresh process per variant, interleaved, on an
MLP 784-128-10 (Adam, sparse crossentropy) for 2 epochs of 20,000 random rows after a
compiling warm-up; it prints examples/s and the ratios of the medians to the hand-written
loop (``benchmarks/handwritten.py``'s jit + shard_map step with two steps in flight).
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
ONE_RUN = """
import os, sys, time
D, B, variant = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={D}"
os.environ["JAX_PLATFORMS"] = "cpu"
import jax, jax.numpy as jnp, numpy as np, optax
from jax.sharding import NamedSharding, PartitionSpec as P
import mirrorfit as mf
L = mf.layers
rng = np.random.default_rng(0)
x = rng.normal(size=(20000, 784)).astype(np.float32)
y = rng.integers(0, 10, 20000).astype(np.int32)


class MLP(mf.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = L.Dense(128, activation="relu")
        self.head = L.Dense(10, activation="softmax")

    def call(self, x):
        return self.head(self.hidden(x))


def handwritten():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:D]), ("batch",))
    w1 = jnp.asarray(rng.normal(size=(784, 128)) * 0.05, jnp.float32)
    params = {"w1": w1, "b1": jnp.zeros(128), "w2": jnp.zeros((128, 10)), "b2": jnp.zeros(10)}
    tx = optax.adam(1e-3)
    rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("batch"))
    state = jax.device_put((params, tx.init(params)), rep)

    def loss(p, xb, yb):
        h = jax.nn.relu(xb @ p["w1"] + p["b1"])
        logits = h @ p["w2"] + p["b2"]
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    def per_replica(state, xb, yb):
        p, o = state
        value, g = jax.value_and_grad(loss)(p, xb, yb)
        g = jax.lax.pmean(g, "batch")
        u, o = tx.update(g, o, p)
        return (optax.apply_updates(p, u), o), jax.lax.pmean(value, "batch")

    step = jax.jit(jax.shard_map(per_replica, mesh=mesh, in_specs=(P(), P("batch"), P("batch")),
                                 out_specs=P(), check_vma=False), donate_argnums=0)

    def epochs(n, rows):
        nonlocal state
        prev = None
        for _ in range(n):
            for i in range(0, rows - B + 1, B):
                xb, yb = jax.device_put((x[i:i + B], y[i:i + B]), shard)
                state, value = step(state, xb, yb)
                if prev is not None:  # two steps in flight (the CPU all-reduce hazard)
                    jax.block_until_ready(prev)
                prev = value
        jax.block_until_ready(state)

    epochs(1, B * 20)
    start = time.perf_counter()
    epochs(2, len(x))
    return 2 * (len(x) // B * B) / (time.perf_counter() - start)


def fitted(model):
    model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x[:B * 20], y[:B * 20], batch_size=B, epochs=1, verbose=0)
    start = time.perf_counter()
    model.fit(x, y, batch_size=B, epochs=2, verbose=0)
    return 2 * len(x) / (time.perf_counter() - start)


if variant == "handwritten":
    print(handwritten())
else:
    with mf.MirroredStrategy(jax.devices()[:D]).scope():
        model = MLP() if variant == "subclassed" else mf.Sequential(
            [L.Input((784,)), L.Dense(128, activation="relu"), L.Dense(10, activation="softmax")])
    print(fitted(model))
"""
VARIANTS = ("handwritten", "sequential", "subclassed")


def _examples_per_second(devices: int, batch: int, variant: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", ONE_RUN, str(devices), str(batch), variant],
                         cwd=REPO, env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=["1:32", "8:256"])
    args = parser.parse_args(argv)
    for case in args.cases:
        devices, batch = map(int, case.split(":"))
        runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                runs[variant].append(_examples_per_second(devices, batch, variant))
        medians = {v: statistics.median(r) for v, r in runs.items()}
        shown = ", ".join(f"{v} {[round(r) for r in runs[v]]}" for v in VARIANTS)
        print(f"D={devices} batch={batch}: {shown} examples/s; "
              f"sequential/handwritten {medians['sequential'] / medians['handwritten']:.2f}, "
              f"subclassed/handwritten {medians['subclassed'] / medians['handwritten']:.2f}, "
              f"subclassed/sequential {medians['subclassed'] / medians['sequential']:.2f}")


if __name__ == "__main__":
    main()
