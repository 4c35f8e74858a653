"""Runnable examples; ``mirrorfit.examples.digits`` is the main job (``mirrorfit-digits``)."""
