"""Interleaved A/B of ``fit`` throughput between two commits, each in fresh processes.

    python benchmarks/ab_commits.py BASE [HEAD] [--rounds 6] [--cases 1:32 1:256 8:256]

Checks out ``BASE`` and ``HEAD`` (default: the working tree) as temporary git worktrees and,
for each case ``D:B`` (D simulated CPU devices, global batch B), alternates one process of
each, ``--rounds`` times: an MLP 784-128-10 (Adam, sparse crossentropy, accuracy) fitted for
2 epochs on 20,000 random rows after a compiling warm-up fit. It prints examples/s per
process and, per case, the ratio of the medians (HEAD / BASE). Alternating the two puts the
same machine drift on both sides; a refactor that should cost nothing shows ratios around
1.0 within the rounds' spread. Nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ONE_FIT = """
import os, sys, time
D, B = int(sys.argv[1]), int(sys.argv[2])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={D}"
os.environ["JAX_PLATFORMS"] = "cpu"
import flax.linen as nn, jax, numpy as np
import mirrorfit as mf
rng = np.random.default_rng(0)
x = rng.normal(size=(20000, 784)).astype(np.float32)
y = rng.integers(0, 10, 20000).astype(np.int32)
with mf.MirroredStrategy(jax.devices()[:D]).scope():
    m = mf.Sequential([nn.Dense(128), nn.relu, nn.Dense(10), nn.softmax], input_shape=(784,))
    m.compile("adam", "sparse_categorical_crossentropy", ["accuracy"])
m.fit(x[:B * 20], y[:B * 20], batch_size=B, epochs=1, verbose=0)
start = time.perf_counter()
m.fit(x, y, batch_size=B, epochs=2, verbose=0)
print(2 * len(x) / (time.perf_counter() - start))
"""


def _examples_per_second(tree: Path, devices: int, batch: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", ONE_FIT, str(devices), str(batch)], cwd=tree,
                         env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("head", nargs="?", default=None, help="default: the working tree")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--cases", nargs="+", default=["1:32", "1:256", "8:256"])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        trees = {}
        for side, ref in (("base", args.base), ("head", args.head)):
            if ref is None:
                trees[side] = REPO
                continue
            trees[side] = Path(tmp) / side
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach",
                            str(trees[side]), ref], check=True, capture_output=True)
        try:
            for case in args.cases:
                devices, batch = map(int, case.split(":"))
                runs: dict[str, list[float]] = {"base": [], "head": []}
                for _ in range(args.rounds):
                    for side in ("base", "head"):
                        runs[side].append(_examples_per_second(trees[side], devices, batch))
                medians = {side: statistics.median(v) for side, v in runs.items()}
                print(f"D={devices} batch={batch}: base {[round(v) for v in runs['base']]}, "
                      f"head {[round(v) for v in runs['head']]} examples/s; "
                      f"head/base {medians['head'] / medians['base']:.2f}")
        finally:
            for side, tree in trees.items():
                if tree != REPO:
                    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                                    str(tree)], check=False, capture_output=True)


if __name__ == "__main__":
    main()
