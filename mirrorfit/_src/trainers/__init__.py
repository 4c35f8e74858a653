"""Level 6: the training machinery under `Model`: ``compile``'s arguments resolved into a
step configuration, the pure per-replica steps, the `Trainer` loops with callbacks and
progress, the training state, and one data adapter per input kind (`data_adapters/`).
"""
