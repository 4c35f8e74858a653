"""Public utilities: ``mf.utils``."""

from mirrorfit._src.devices import simulate_cpu_devices as simulate_cpu_devices

__all__ = ["simulate_cpu_devices"]
