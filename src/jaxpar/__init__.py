"""jaxpar: the companion library of "JAX parallelism for PyTorch users".

It holds what readers of the site would otherwise copy between projects: simulating
devices on a laptop, and splitting batches across devices with errors that say what to do.
"""

from jaxpar.batching import UnevenBatchError, split_batch
from jaxpar.devices import DevicesAlreadyInitializedError, simulate_cpu_devices

__all__ = [
    "DevicesAlreadyInitializedError",
    "UnevenBatchError",
    "simulate_cpu_devices",
    "split_batch",
]
