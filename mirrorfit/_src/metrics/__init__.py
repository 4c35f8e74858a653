"""Level 3: Keras' metrics as sufficient statistics (exact across replicas), with the stateful
``update_state``/``result`` API, and their names and aliases.
"""
