"""Keras 3's public names, module by module, written as the data the porting guide's table of
names is checked against (``tests/test_porting_table.py``, which needs no Keras).

Run with a Python that has Keras 3::

    KERAS_BACKEND=jax python benchmarks/keras_surface.py \\
        [--out tests/data/keras_public_names.json] [--missing]

``--missing`` also prints, per module, the Keras names mirrorfit's module does not have (the
rows of the table to write as "planned" or "left out").
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras

MODULES = ("keras", "keras.layers", "keras.ops", "keras.ops.image", "keras.models",
           "keras.callbacks", "keras.losses", "keras.metrics", "keras.optimizers",
           "keras.utils", "keras.random", "keras.preprocessing")


def public_names() -> dict[str, list[str]]:
    """``dir()`` of each module in `MODULES`, without names starting with ``_``."""
    return {name: sorted(n for n in dir(importlib.import_module(name)) if not n.startswith("_"))
            for name in MODULES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/data/keras_public_names.json")
    parser.add_argument("--missing", action="store_true")
    args = parser.parse_args()
    names = public_names()
    with open(args.out, "w") as f:
        json.dump({"keras_version": keras.__version__, "modules": names}, f, indent=1)
        f.write("\n")
    if args.missing:
        for module, found in names.items():
            ours = importlib.import_module("mirrorfit" + module[len("keras"):])
            print(module, [n for n in found if not hasattr(ours, n)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
