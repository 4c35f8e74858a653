"""Level 2: devices, the 1-D ``"batch"`` mesh, placement and collectives (`mesh`, `batch`), and
the tf.distribute front end on them: `MirroredStrategy`, ``run``/``reduce``, replica
contexts, distributed datasets, `PerReplica`/`Mirrored` values; `multi_worker/` adds
several processes on ``jax.distributed``.
"""
