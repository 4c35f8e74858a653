"""Level 5: Keras' callback set (`Callback`, `History`, progress bar, stopping, learning-rate,
loggers, checkpoints) and the contract through which they reach the trainer.
"""
