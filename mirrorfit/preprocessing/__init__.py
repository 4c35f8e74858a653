"""Keras 3's ``keras.preprocessing``: ``keras.preprocessing.sequence.pad_sequences`` becomes
``mirrorfit.preprocessing.sequence.pad_sequences``.

The image and dataset helpers of ``keras.preprocessing`` (``image``,
``image_dataset_from_directory``, ``text_dataset_from_directory``,
``timeseries_dataset_from_array``) read files into ``tf.data`` datasets and are not here:
feed NumPy arrays, or a `mirrorfit.utils.PyDataset`.
"""

from mirrorfit.preprocessing import sequence as sequence

__all__ = ["sequence"]
