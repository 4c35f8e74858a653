"""Level 4: files: atomic, checksummed orbax checkpoints, ``mf.Checkpoint`` for custom loops,
the compile configuration as JSON and ``.keras`` archives. Knows nothing of `Model`.
"""
