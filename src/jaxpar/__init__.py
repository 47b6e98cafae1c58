"""jaxpar: the companion library of "JAX parallelism for PyTorch users".

It holds what readers of the site would otherwise copy between projects: simulating
devices on a laptop, splitting batches across devices with errors that say what to do, and
loading real MNIST, checked and cached, for readers who have the network.
"""

from jaxpar.batching import ShardedBatch, UnevenBatchError, replicate, shard_batch, split_batch
from jaxpar.data import (
    MNIST,
    MNIST_SHA256,
    MNIST_URL,
    ChecksumMismatchError,
    DatasetUnavailableError,
    load_mnist,
    parse_idx,
)
from jaxpar.devices import DevicesAlreadyInitializedError, simulate_cpu_devices

__all__ = [
    "MNIST",
    "MNIST_SHA256",
    "MNIST_URL",
    "ChecksumMismatchError",
    "DatasetUnavailableError",
    "DevicesAlreadyInitializedError",
    "ShardedBatch",
    "UnevenBatchError",
    "load_mnist",
    "parse_idx",
    "replicate",
    "shard_batch",
    "simulate_cpu_devices",
    "split_batch",
]
