"""jaxpar: the companion library of "JAX parallelism for PyTorch users".

It holds what readers of the site would otherwise copy between projects: simulating
devices on a laptop, building meshes and shardings and splitting batches across devices with
errors that say what to do, drawing shardings as SVG, timing JAX code honestly, and loading
real MNIST, checked and cached, for readers who have the network.
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
from jaxpar.diagrams import Block, Layout, ShardingDiagram, layout, sharding_diagram, sharding_svg
from jaxpar.distributed import NotLaunchedError, initialize_distributed
from jaxpar.meshes import check_spec, make_mesh, named_sharding
from jaxpar.timing import Timing, benchmark

__all__ = [
    "Block",
    "ChecksumMismatchError",
    "DatasetUnavailableError",
    "DevicesAlreadyInitializedError",
    "Layout",
    "MNIST",
    "MNIST_SHA256",
    "MNIST_URL",
    "NotLaunchedError",
    "ShardedBatch",
    "ShardingDiagram",
    "Timing",
    "UnevenBatchError",
    "benchmark",
    "check_spec",
    "initialize_distributed",
    "layout",
    "load_mnist",
    "make_mesh",
    "named_sharding",
    "parse_idx",
    "replicate",
    "shard_batch",
    "sharding_diagram",
    "sharding_svg",
    "simulate_cpu_devices",
    "split_batch",
]
