"""Simulated CPU devices for trying MirroredStrategy without accelerators.

This module owns the one piece of process-wide setup that has to happen before
JAX starts its backends: the XLA flag ``--xla_force_host_platform_device_count``,
which splits the host CPU into several XLA devices. With it, a laptop runs the
same multi-replica program (one replica per device, all-reduced gradients) that
runs on several GPUs, which is how mirrorfit's tests, notebook and main job run
on the CPU.
"""

from __future__ import annotations

import numbers
import os
import re
import sys

_FLAG = "--xla_force_host_platform_device_count"
# Matches an existing setting of the flag, e.g. ``--xla_force_host_platform_device_count=4``.
_FLAG_PATTERN = re.compile(re.escape(_FLAG) + r"(=\S*)?")

_ALREADY_STARTED = (
    "simulate_cpu_devices() must be called before JAX starts its backends, i.e. "
    "before any JAX computation, device query or array creation: call it at the "
    "top of your script or in the first cell of the notebook, right after the "
    "imports, or restart the kernel/process and call it first. JAX has already "
    "started its backends with {current} CPU devices, and that count can no "
    "longer change. Received: n={n}"
)


def _backends_started() -> bool:
    """Returns whether JAX has already initialized its backends in this process.

    Reads JAX's private backend registry without importing JAX: if JAX has not
    been imported, nothing has started. The private names are looked up with
    ``getattr`` so that a JAX version without them is treated as "not started"
    rather than breaking the call.
    """
    xla_bridge = sys.modules.get("jax._src.xla_bridge")
    if xla_bridge is None:
        return False
    backends_are_initialized = getattr(xla_bridge, "backends_are_initialized", None)
    if backends_are_initialized is not None:
        return bool(backends_are_initialized())
    return bool(getattr(xla_bridge, "_backends", None))


def _started_cpu_device_count() -> int | None:
    """Returns the CPU device count of the started backends, None if CPU is off."""
    import jax  # Already imported: the backends have started.

    try:
        return jax.local_device_count("cpu")
    except RuntimeError:  # The CPU backend is disabled, e.g. JAX_PLATFORMS=cuda.
        return None


def simulate_cpu_devices(n: int) -> None:
    """Makes JAX's CPU backend expose ``n`` devices, one replica each.

    Sets ``--xla_force_host_platform_device_count=n`` in the ``XLA_FLAGS``
    environment variable, replacing any earlier value of that flag and keeping
    the other flags. It only affects the CPU backend: on a machine with an
    accelerator, ``mf.MirroredStrategy()`` still uses the accelerator's devices
    (set ``JAX_PLATFORMS=cpu`` to force the CPU). The simulated devices share
    the host's cores, so they show the distribution semantics, not a speed-up.

    It must run before JAX starts its backends (before the first JAX
    computation, ``jax.devices()`` call or array creation); importing ``jax``
    or ``mirrorfit`` first is fine. Calling it again once JAX runs with
    exactly ``n`` CPU devices (e.g. re-running a notebook's first cell) does
    nothing.

    Args:
        n: Number of CPU devices, a positive int. ``mf.MirroredStrategy()``
            then runs ``n`` replicas, each holding ``global_batch / n`` rows.

    Raises:
        TypeError: If ``n`` is not an int.
        ValueError: If ``n`` is smaller than 1.
        RuntimeError: If JAX has already started its backends in this process
            with a CPU device count other than ``n``.

    Example:
        >>> import mirrorfit as mf
        >>> mf.utils.simulate_cpu_devices(8)  # first thing, before using JAX
        >>> mf.MirroredStrategy().num_replicas_in_sync  # doctest: +SKIP
        8
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(
            "n must be an int, the number of simulated CPU devices, e.g. "
            f"simulate_cpu_devices(8). Received: n={n!r} of type {type(n).__name__}"
        )
    if n < 1:
        raise ValueError(
            "n must be a positive int, the number of simulated CPU devices, e.g. "
            f"simulate_cpu_devices(8). Received: n={n!r}"
        )
    if _backends_started():
        current = _started_cpu_device_count()
        if current == n:
            return
        raise RuntimeError(_ALREADY_STARTED.format(current=current, n=n))
    flags = _FLAG_PATTERN.sub("", os.environ.get("XLA_FLAGS", ""))
    os.environ["XLA_FLAGS"] = " ".join(flags.split() + [f"{_FLAG}={int(n)}"])
