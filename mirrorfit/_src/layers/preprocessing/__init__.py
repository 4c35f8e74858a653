"""Keras' preprocessing and augmentation layers (public names in `mirrorfit.layers`).

Two kinds, by where they run:

* on the device, inside the compiled step (Flax layers, channels_last images ``[batch, height,
  width, channels]`` or one image ``[height, width, channels]``): `Normalization`,
  `Resizing`, `CenterCrop`, and the augmentations `RandomCrop`, `RandomFlip`,
  `RandomRotation`, `RandomZoom`, `RandomTranslation`, `RandomContrast`,
  `RandomBrightness`. The random ones act only in training, draw one transform per row from
  the ``"dropout"`` RNG stream (seeded per step and per replica by the trainer, so rows and
  replicas differ), and are the identity in ``evaluate``/``predict``;
* on the host, in NumPy (strings never enter the step): `TextVectorization`,
  `StringLookup`, `IntegerLookup`. Called on strings or ints they return NumPy arrays.
"""
