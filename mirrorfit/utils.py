"""Public utilities: ``mf.utils``."""

from mirrorfit._src.distribute.devices import simulate_cpu_devices as simulate_cpu_devices
from mirrorfit._src.layers.model_visualization import plot_model as plot_model
from mirrorfit._src.random.seed_generator import set_random_seed as set_random_seed
from mirrorfit._src.trainers.audit import audit_step as audit_step
from mirrorfit._src.trainers.data_adapters.py_dataset_adapter import PyDataset as PyDataset
from mirrorfit._src.trainers.keras_steps import (
    unpack_x_y_sample_weight as unpack_x_y_sample_weight,
)
from mirrorfit._src.utils.numerical_utils import normalize as normalize
from mirrorfit._src.utils.numerical_utils import to_categorical as to_categorical
from mirrorfit._src.utils.sequence_utils import pad_sequences as pad_sequences

__all__ = ["PyDataset", "audit_step", "normalize", "pad_sequences", "plot_model", "set_random_seed",
           "simulate_cpu_devices", "to_categorical", "unpack_x_y_sample_weight"]
