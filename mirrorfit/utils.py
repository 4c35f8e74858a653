"""Public utilities: ``mf.utils``."""

from mirrorfit._src.distribute.devices import simulate_cpu_devices as simulate_cpu_devices
from mirrorfit._src.trainers.data_adapters.py_dataset_adapter import PyDataset as PyDataset

__all__ = ["PyDataset", "simulate_cpu_devices"]
