"""Public utilities: ``mf.utils``."""

from mirrorfit._src.distribute.devices import simulate_cpu_devices as simulate_cpu_devices
from mirrorfit._src.layers.graph.model_visualization import plot_model as plot_model
from mirrorfit._src.random.seed_generator import set_random_seed as set_random_seed
from mirrorfit._src.trainers.audit import audit_step as audit_step
from mirrorfit._src.trainers.data_adapters.py_dataset_adapter import PyDataset as PyDataset
from mirrorfit._src.trainers.keras_steps import (
    unpack_x_y_sample_weight as unpack_x_y_sample_weight,
)
from mirrorfit._src.utils.numerical_utils import normalize as normalize
from mirrorfit._src.utils.numerical_utils import to_categorical as to_categorical
from mirrorfit._src.utils.registry import CustomObjectScope as CustomObjectScope
from mirrorfit._src.utils.registry import custom_object_scope as custom_object_scope
from mirrorfit._src.utils.registry import deserialize as deserialize_keras_object
from mirrorfit._src.utils.registry import get_registered_name as get_registered_name
from mirrorfit._src.utils.registry import get_registered_object as get_registered_object
from mirrorfit._src.utils.registry import register_serializable as register_keras_serializable
from mirrorfit._src.utils.registry import serialize as serialize_keras_object
from mirrorfit._src.utils.sequence_utils import pad_sequences as pad_sequences

__all__ = ["CustomObjectScope", "PyDataset", "audit_step", "custom_object_scope",
           "deserialize_keras_object", "get_registered_name", "get_registered_object",
           "normalize", "pad_sequences", "plot_model", "register_keras_serializable",
           "serialize_keras_object", "set_random_seed", "simulate_cpu_devices",
           "to_categorical", "unpack_x_y_sample_weight"]
