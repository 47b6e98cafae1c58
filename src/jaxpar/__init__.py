"""jaxpar: the companion library of "JAX parallelism for PyTorch users".

It holds what readers of the site would otherwise copy between projects: simulating
devices on a laptop, building meshes and shardings and splitting batches across devices with
errors that say what to do, drawing shardings as SVG, timing JAX code honestly, summarising
the memory and the collectives of a compiled step (also compiled for GPUs and TPUs this
machine does not have), predicting whether a Llama-shaped model trains in a device's memory,
reading the operations out of a profiler trace, launching several local processes, and
loading real MNIST, checked and cached, for readers who have the network.
"""

# Names load on first use, so that `python -m jaxpar.launch` starts without importing JAX
# (its ranks import it themselves). Type checkers and the API reference read the imports below.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jaxpar.barriers import BarrierTimeoutError, barrier
    from jaxpar.batching import ShardedBatch, UnevenBatchError, replicate, shard_batch, split_batch
    from jaxpar.compiled import Collective, CompiledSummary, find_collectives, summarise
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
    from jaxpar.diagrams import (
        Block,
        Layout,
        ShardingDiagram,
        layout,
        sharding_diagram,
        sharding_svg,
    )
    from jaxpar.distributed import NotLaunchedError, initialize_distributed
    from jaxpar.memory_plan import (
        LLAMA_3_1_8B,
        LLAMA_3_2_1B,
        Decoder,
        FitReport,
        MemoryPlan,
        Parallelism,
        Training,
        fits,
        formula_json,
        plan_memory,
        training_step,
    )
    from jaxpar.meshes import check_spec, make_mesh, named_sharding
    from jaxpar.profiles import (
        Operation,
        OperationTotal,
        Trace,
        TraceStep,
        find_trace_file,
        operation_scopes,
        read_trace,
        timeline_svg,
        top_operations,
    )
    from jaxpar.programs import ProgramMismatchError, check_same_program
    from jaxpar.targets import (
        TARGETS,
        CompilerNotInstalledError,
        Target,
        compile_for,
        target_devices,
    )
    from jaxpar.timing import Timing, benchmark

_MODULE_OF = {
    "BarrierTimeoutError": "jaxpar.barriers",
    "barrier": "jaxpar.barriers",
    "ShardedBatch": "jaxpar.batching",
    "UnevenBatchError": "jaxpar.batching",
    "replicate": "jaxpar.batching",
    "shard_batch": "jaxpar.batching",
    "split_batch": "jaxpar.batching",
    "Collective": "jaxpar.compiled",
    "CompiledSummary": "jaxpar.compiled",
    "find_collectives": "jaxpar.compiled",
    "summarise": "jaxpar.compiled",
    "MNIST": "jaxpar.data",
    "MNIST_SHA256": "jaxpar.data",
    "MNIST_URL": "jaxpar.data",
    "ChecksumMismatchError": "jaxpar.data",
    "DatasetUnavailableError": "jaxpar.data",
    "load_mnist": "jaxpar.data",
    "parse_idx": "jaxpar.data",
    "DevicesAlreadyInitializedError": "jaxpar.devices",
    "simulate_cpu_devices": "jaxpar.devices",
    "Block": "jaxpar.diagrams",
    "Layout": "jaxpar.diagrams",
    "ShardingDiagram": "jaxpar.diagrams",
    "layout": "jaxpar.diagrams",
    "sharding_diagram": "jaxpar.diagrams",
    "sharding_svg": "jaxpar.diagrams",
    "NotLaunchedError": "jaxpar.distributed",
    "initialize_distributed": "jaxpar.distributed",
    "LLAMA_3_1_8B": "jaxpar.memory_plan",
    "LLAMA_3_2_1B": "jaxpar.memory_plan",
    "Decoder": "jaxpar.memory_plan",
    "FitReport": "jaxpar.memory_plan",
    "Parallelism": "jaxpar.memory_plan",
    "MemoryPlan": "jaxpar.memory_plan",
    "Training": "jaxpar.memory_plan",
    "fits": "jaxpar.memory_plan",
    "formula_json": "jaxpar.memory_plan",
    "plan_memory": "jaxpar.memory_plan",
    "training_step": "jaxpar.memory_plan",
    "check_spec": "jaxpar.meshes",
    "make_mesh": "jaxpar.meshes",
    "named_sharding": "jaxpar.meshes",
    "ProgramMismatchError": "jaxpar.programs",
    "check_same_program": "jaxpar.programs",
    "Operation": "jaxpar.profiles",
    "OperationTotal": "jaxpar.profiles",
    "Trace": "jaxpar.profiles",
    "TraceStep": "jaxpar.profiles",
    "find_trace_file": "jaxpar.profiles",
    "operation_scopes": "jaxpar.profiles",
    "read_trace": "jaxpar.profiles",
    "timeline_svg": "jaxpar.profiles",
    "top_operations": "jaxpar.profiles",
    "TARGETS": "jaxpar.targets",
    "CompilerNotInstalledError": "jaxpar.targets",
    "Target": "jaxpar.targets",
    "compile_for": "jaxpar.targets",
    "target_devices": "jaxpar.targets",
    "Timing": "jaxpar.timing",
    "benchmark": "jaxpar.timing",
}

__all__ = [
    "BarrierTimeoutError",
    "Block",
    "ChecksumMismatchError",
    "Collective",
    "CompiledSummary",
    "CompilerNotInstalledError",
    "DatasetUnavailableError",
    "Decoder",
    "DevicesAlreadyInitializedError",
    "FitReport",
    "LLAMA_3_1_8B",
    "LLAMA_3_2_1B",
    "Layout",
    "MNIST",
    "MNIST_SHA256",
    "MNIST_URL",
    "MemoryPlan",
    "Parallelism",
    "NotLaunchedError",
    "Operation",
    "OperationTotal",
    "ProgramMismatchError",
    "ShardedBatch",
    "ShardingDiagram",
    "TARGETS",
    "Target",
    "Timing",
    "Trace",
    "TraceStep",
    "Training",
    "UnevenBatchError",
    "barrier",
    "benchmark",
    "check_same_program",
    "check_spec",
    "compile_for",
    "find_collectives",
    "find_trace_file",
    "fits",
    "formula_json",
    "initialize_distributed",
    "layout",
    "load_mnist",
    "make_mesh",
    "named_sharding",
    "operation_scopes",
    "parse_idx",
    "plan_memory",
    "read_trace",
    "replicate",
    "shard_batch",
    "sharding_diagram",
    "sharding_svg",
    "simulate_cpu_devices",
    "split_batch",
    "summarise",
    "target_devices",
    "timeline_svg",
    "top_operations",
    "training_step",
]


def __getattr__(name: str) -> object:
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'jaxpar' has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
