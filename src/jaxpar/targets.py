"""Compiling a program for GPUs and TPUs this machine does not have ("deviceless" compiling).

XLA's GPU and TPU compilers run on any Linux machine: JAX asks them for a topology of
compile-only devices (8 H100s, a TPU v5e-8, …), and a program lowered onto a mesh of those
devices compiles as it would on the real hardware, through the same partitioner, collective
combiners and schedulers. Nothing runs: the result is the compiled program's text and its
memory plan, which :func:`jaxpar.summarise` reads.

The compilers are the CUDA plugin ``jax-cuda13-pjrt`` (Apache-2.0; no CUDA library, driver
or GPU needed) and ``libtpu`` (Google Cloud's terms), in the versions that match jax. The
site's ``make`` installs them into ``.venv/xla-compilers``; elsewhere install them with
``pip install --target DIR jax-cuda13-pjrt==0.12.0.1 libtpu==0.0.50.1`` and set
``JAXPAR_XLA_COMPILERS=DIR`` (installed beside jax they work too, but then every
``import jax`` loads them and prints warnings unless ``JAX_PLATFORMS=cpu`` is set).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.experimental.mesh_utils
import numpy as np

COMPILERS_VARIABLE = "JAXPAR_XLA_COMPILERS"
"""The environment variable naming a folder the compilers were installed into."""


@dataclass(frozen=True)
class Target:
    """Hardware a program can be compiled for."""

    name: str
    """The name :func:`compile_for` takes, such as ``"h100-8"``."""
    description: str
    """What it is, in words: ``"8 × NVIDIA H100 SXM, one host"``."""
    backend: str
    """The compiler: ``"XLA:CPU"``, ``"XLA:GPU"`` or ``"XLA:TPU"``."""
    devices: int
    """How many devices it has."""
    hosts: int
    """How many hosts (processes) its devices are spread over."""
    memory_bytes: int | None
    """Each device's memory, as the vendor states it; ``None`` for the CPU."""
    _topology: dict[str, Any] = field(default_factory=dict, repr=False)
    slices: int = 1
    """How many TPU slices its devices are spread over: chips within a slice are joined
    by the chips' own links (ICI), slices by the data-centre network (DCN). Each device
    says which it is in, as ``device.slice_index``."""


_GB = 10**9
_GIB = 2**30
TARGETS: dict[str, Target] = {
    target.name: target
    for target in [
        Target("cpu", "this machine's CPU devices", "XLA:CPU", 0, 1, None),
        Target(
            "h100-8",
            "8 × NVIDIA H100 SXM 80 GB, one host",
            "XLA:GPU",
            8,
            1,
            80 * _GIB,
            {"gpu": "NVIDIA H100 80GB HBM3", "topology": "1x1x8"},
        ),
        Target(
            "h100-16",
            "2 hosts × 8 NVIDIA H100 SXM 80 GB",
            "XLA:GPU",
            16,
            2,
            80 * _GIB,
            # XLA:GPU's topology is partitions x hosts x GPUs, a partition being an NVLink
            # domain. An H100 host is a domain of its own, and on a cluster XLA gives each
            # host its own partition (xla/pjrt/distributed/topology_util.cc,
            # BuildGlobalTopology), which the GPUs report as slice_index. With "1x2x8" (one
            # domain of 2 hosts) XLA:GPU compiles a small all-reduce over both hosts as a
            # one-shot Triton kernel; with "2x1x8" as the default collective. Compile-only
            # devices report no partition (slice_index 0 for all); it is their coords[0].
            {"gpu": "NVIDIA H100 80GB HBM3", "topology": "2x1x8"},
        ),
        Target(
            "h200-8",
            "8 × NVIDIA H200 141 GB, one host",
            "XLA:GPU",
            8,
            1,
            141 * _GB,
            {"gpu": "NVIDIA H200 141GB HBM3e", "topology": "1x1x8"},
        ),
        Target(
            "b200-8",
            "8 × NVIDIA B200, one host",
            "XLA:GPU",
            8,
            1,
            180 * _GB,
            {"gpu": "NVIDIA B200", "topology": "1x1x8"},
        ),
        Target(
            "a100-8",
            "8 × NVIDIA A100 SXM4 80 GB, one host",
            "XLA:GPU",
            8,
            1,
            80 * _GIB,
            {"gpu": "NVIDIA A100-SXM4-80GB", "topology": "1x1x8"},
        ),
        Target(
            "v5e-8",
            "TPU v5e-8: 8 chips of 16 GB on one host",
            "XLA:TPU",
            8,
            1,
            16 * _GIB,
            {"tpu": "v5e:2x4", "chips_per_host_bounds": [2, 4, 1]},
        ),
        Target(
            "v5e-16",
            "TPU v5e-16: 16 chips of 16 GB on 4 hosts",
            "XLA:TPU",
            16,
            4,
            16 * _GIB,
            {"tpu": "v5e:4x4"},
        ),
        Target(
            "v5e-8x2",
            "2 TPU v5e-8 slices (8 chips of 16 GB on one host each), joined by DCN",
            "XLA:TPU",
            16,
            2,
            16 * _GIB,
            {"tpu": "v5e:2x4", "chips_per_host_bounds": [2, 4, 1], "num_slices": 2},
            slices=2,
        ),
        Target(
            "v6e-8",
            "TPU v6e-8: 8 chips of 32 GB on one host",
            "XLA:TPU",
            8,
            1,
            32 * _GIB,
            {"tpu": "v6e:2x4", "chips_per_host_bounds": [2, 4, 1]},
        ),
        Target(
            "v5p-8",
            "TPU v5p-8: 4 chips of 95 GB on one host",
            "XLA:TPU",
            4,
            1,
            95 * _GIB,
            {"tpu": "v5p:2x2x1"},
        ),
    ]
}
"""The targets :func:`compile_for` knows, by name."""


class CompilerNotInstalledError(RuntimeError):
    """The XLA compiler a target needs is not installed."""


def compile_for(
    target: str,
    function: Callable[..., Any],
    *args: Any,
    compiler_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> jax.stages.Compiled:
    """Compile ``function`` for ``target``'s devices, as if this machine had them.

    The arguments are what the program would be called with here: arrays sharded on a
    mesh of this machine's (simulated) devices, or ``jax.ShapeDtypeStruct`` values with
    such shardings (no memory is needed for those), on a ``jax.sharding.AbstractMesh``
    where the target has more devices than this machine. The mesh is rebuilt with the same axis
    names, sizes and axis types on the target's devices, its leading axes across the hosts
    of GPUs or the slices of TPUs, unless it is a mesh of the target's own devices
    (:func:`target_devices`), which is kept as it is. Each argument keeps its
    ``PartitionSpec``, and the program is lowered and compiled inside ``jax.set_mesh`` of
    that mesh. So write the function with ``jax.P`` specs, not with ``NamedSharding`` s
    that name this machine's mesh; and give it a ``jax.shard_map`` that has not run yet,
    since one without ``mesh=`` keeps the mesh of its first call.

    On XLA:GPU nothing is autotuned: the matrix-multiply kernels may differ from a compile
    on a GPU, and with them the temporaries (a cuBLAS call needs a workspace a Triton
    kernel does not); the sharding and the collectives do not depend on that. There is no
    timing, and no ``cost_analysis()`` on XLA:GPU. The result cannot run here.

    Compiling for a TPU sets ``TPU_ACCELERATOR_TYPE``, ``TPU_WORKER_HOSTNAMES`` and
    ``ALLOW_MULTIPLE_LIBTPU_LOAD`` where they are unset while libtpu loads and describes
    the TPU, which silences its search for a TPU and lets several processes compile at
    once; the process's environment is as it was afterwards.
    A sharding other than a ``NamedSharding`` (an array on one device) becomes replicated
    on the target. Memory kinds are lost: compile-only devices list no memories in jax
    0.12.0.1, so an argument offloaded to ``pinned_host`` compiles as if in device memory.

    Args:
        target: a name in :data:`TARGETS`: ``"cpu"`` (this machine's devices, compiled as
            usual), ``"h100-8"``, ``"h100-16"`` (2 hosts × 8), ``"h200-8"``, ``"b200-8"``,
            ``"a100-8"``, ``"v5e-8"``, ``"v5e-16"``, ``"v5e-8x2"`` (2 slices),
            ``"v6e-8"``, ``"v5p-8"``.
        function: the function, jitted (``jax.jit(f, donate_argnums=0)``) or not.
        *args: its arguments, as above.
        compiler_options: XLA options for this compile only, such as
            ``{"xla_gpu_enable_latency_hiding_scheduler": False}``.
        **kwargs: its keyword arguments.

    Returns:
        The compiled program: ``summarise(compiled)``, ``compiled.as_text()`` and
        ``compiled.memory_analysis()`` read it.

    Raises:
        ValueError: ``target`` is not a known name, the arguments name no mesh or two
            different meshes, the mesh has more devices than the target, or a
            ``jax.shard_map`` in the function already ran on another mesh.
        CompilerNotInstalledError: the target's compiler is not installed; the message
            says what to install.

    Examples:
        A gradient sum over 8 devices: XLA:CPU widens the bfloat16 gradient to float32
        before its all-reduce; XLA:GPU keeps it in bfloat16 and starts it asynchronously.

        ```python
        import jax
        import jax.numpy as jnp

        from jaxpar import compile_for, summarise

        mesh = jax.make_mesh((8,), ("data",))
        w = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16, sharding=jax.NamedSharding(mesh, jax.P()))
        x = jax.ShapeDtypeStruct((64, 512), jnp.bfloat16, sharding=jax.NamedSharding(mesh, jax.P("data")))

        def loss(w, x):
            return jnp.mean(jnp.square(x @ w).astype(jnp.float32))

        def gradient_sum(target):
            summary = summarise(compile_for(target, jax.grad(loss), w, x))
            collective = summary.collectives[0]
            return collective.kind, collective.element_types, collective.asynchronous

        print(gradient_sum("cpu"), gradient_sum("h100-8"))
        #> ('all-reduce', ('f32',), False) ('all-reduce', ('bf16',), True)
        ```
    """
    return _lower_for(target, function, args, kwargs).compile(compiler_options)


def _lower_for(target: str, function: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """What :func:`compile_for` compiles: ``function`` lowered for ``target``'s devices, its
    arguments' mesh rebuilt on them (a ``jax.stages.Lowered``)."""
    chosen = _target(target)
    if not callable(function):
        raise TypeError(
            f"compile_for needs the function to compile, got {type(function).__name__} "
            f"{function!r:.60}; pass for example compile_for({target!r}, step, *args)."
        )
    jitted = function if hasattr(function, "lower") else jax.jit(function)
    mesh = _mesh_of(args, kwargs)
    if chosen.name == "cpu" and isinstance(mesh, jax.sharding.Mesh):
        with jax.set_mesh(mesh):
            return jitted.lower(*args, **kwargs)
    if mesh.size > len(target_devices(chosen.name)):
        larger = [t.name for t in TARGETS.values() if t.devices >= mesh.size]
        raise ValueError(
            f"The mesh {dict(mesh.shape)} has {mesh.size} devices, more than {chosen.name}'s "
            f"{len(target_devices(chosen.name))} ({chosen.description}); pick a target with "
            f"at least {mesh.size} devices ({', '.join(larger) or 'none is listed'}) or a "
            f"smaller mesh."
        )
    if isinstance(mesh, jax.sharding.Mesh) and set(mesh.devices.flat) <= set(
        target_devices(chosen.name)
    ):
        target_mesh = mesh  # built on the target's devices already: keep its order
    else:
        target_mesh = _mesh_on(mesh, target_devices(chosen.name)[: mesh.size])
    args, kwargs = jax.tree.map(functools.partial(_abstract_on, target_mesh), (args, kwargs))
    with jax.set_mesh(target_mesh):
        try:
            lowered = jitted.lower(*args, **kwargs)
        except ValueError as error:
            if "should match the mesh passed to shard_map" not in str(error):
                raise
            raise ValueError(
                f"compile_for could not compile for {chosen.name}: the function holds a "
                f"jax.shard_map without mesh= that has already run on another mesh, and "
                f"such a shard_map keeps the mesh of its first call (jax "
                f"{jax.__version__}). Wrap the function again for the target: "
                f"compile_for({chosen.name!r}, jax.jit(jax.shard_map(f, in_specs=..., "
                f"out_specs=...)), *args)."
            ) from error
        return lowered


@functools.cache
def target_devices(target: str) -> tuple[jax.Device, ...]:
    """The compile-only devices of ``target``: meshes on them can be compiled for, not run.

    Args:
        target: a name in :data:`TARGETS` other than ``"cpu"``.

    Raises:
        ValueError: ``target`` is not a known name.
        CompilerNotInstalledError: its compiler is not installed.

    Examples:
        ```python
        from jaxpar import target_devices

        devices = target_devices("h100-16")
        print(len(devices), devices[0].device_kind, sorted({d.process_index for d in devices}))
        #> 16 NVIDIA H100 80GB HBM3 [0, 1]
        ```
    """
    chosen = _target(target)
    if chosen.name == "cpu":
        return tuple(jax.devices("cpu"))
    topology = dict(chosen._topology)
    if "gpu" in topology:
        from jax._src.lib import xla_client

        plugin = _cuda_plugin()
        description = topology.pop("gpu")
        devices = xla_client.make_c_api_device_topology(
            plugin, "deviceless", target_config=_gpu_spec(description), **topology
        )._make_compile_only_devices()
    else:
        from jax._src import xla_bridge

        name = topology.pop("tpu")
        with _libtpu_environment():
            _load_libtpu()
            topology = xla_bridge.make_pjrt_tpu_topology(name, **topology)
        devices = topology._make_compile_only_devices()
    return tuple(devices)


def _target(name: Any) -> Target:
    if name not in TARGETS:
        raise ValueError(
            f"Unknown target {name!r}; compile_for knows {', '.join(map(repr, TARGETS))} "
            f"(jaxpar.TARGETS describes each)."
        )
    return TARGETS[name]


def _compilers_folders() -> list[Path]:
    """Where the compilers may be: the folder the environment names, the one `make`
    installs into, and Python's own path."""
    folders = [Path(os.environ[COMPILERS_VARIABLE])] if os.environ.get(COMPILERS_VARIABLE) else []
    folders.append(Path(sys.prefix) / "xla-compilers")
    return folders


def _find(relative: str, package: str) -> Path | None:
    for folder in _compilers_folders():
        if (folder / relative).is_file():
            return folder / relative
    try:
        spec = importlib.util.find_spec(package)
    except ImportError:  # a parent package is missing
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / Path(relative).name
        if path.is_file():
            return path
    return None


def _missing(what: str, package: str) -> CompilerNotInstalledError:
    return CompilerNotInstalledError(
        f"Compiling for {what} needs {package}, which is not installed: looked in "
        f"{', '.join(str(f) for f in _compilers_folders())} and on Python's path. In the "
        f"site's repository run `make` (it installs them into .venv/xla-compilers); "
        f"elsewhere `pip install --target DIR {package}` and set {COMPILERS_VARIABLE}=DIR."
    )


@functools.cache
def _cuda_plugin() -> Any:
    from jax._src.lib import xla_client

    if sys.platform != "linux":
        raise CompilerNotInstalledError(
            f"XLA's GPU compiler (jax-cuda13-pjrt) exists for Linux only, and this is "
            f"{sys.platform}; compile for 'cpu' here, or run on Linux."
        )
    path = _find("jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_plugins.xla_cuda13")
    if path is None:
        raise _missing("GPUs", f"jax-cuda13-pjrt=={jax.__version__}")
    return xla_client.load_pjrt_plugin_dynamically("cuda", str(path))


@functools.cache
def _gpu_specs() -> dict[str, str]:
    """The GPU descriptions (GpuTargetConfigProto text) built into the CUDA plugin, by
    device name: the same files as XLA's ``backends/gpu/target_config/specs``."""
    path = _find("jax_plugins/xla_cuda13/xla_cuda_plugin.so", "jax_plugins.xla_cuda13")
    data = path.read_bytes() if path else b""
    specs = {}
    for match in re.finditer(rb'device_description_str: "([^"]*)"', data):
        start = data.rfind(b"\0", 0, match.start()) + 1
        end = data.find(b"\0", match.end())
        specs[match.group(1).decode()] = data[start:end].decode()
    return specs


def _gpu_spec(description: str) -> str:
    specs = _gpu_specs()
    if description not in specs:
        raise CompilerNotInstalledError(
            f"The installed CUDA plugin has no description of {description!r}; it has "
            f"{', '.join(sorted(specs)) or 'none'}. Install jax-cuda13-pjrt=={jax.__version__}."
        )
    return specs[description]


# Without the first two libtpu looks for a TPU VM's metadata and prints five warnings;
# they only name the hosts, and change nothing in what it compiles. libtpu locks
# /tmp/libtpu_lockfile so that one process owns a TPU; with no TPU to own, several
# processes (test workers, two scripts) may compile at once.
LIBTPU_ENVIRONMENT = {
    "TPU_ACCELERATOR_TYPE": "v5litepod-8",
    "TPU_WORKER_HOSTNAMES": "localhost",
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
}


@contextlib.contextmanager
def _libtpu_environment() -> Iterator[None]:
    """:data:`LIBTPU_ENVIRONMENT` where the variables are unset, while libtpu loads and
    makes a topology, and the process's environment as it was afterwards."""
    added = [name for name in LIBTPU_ENVIRONMENT if name not in os.environ]
    os.environ.update({name: LIBTPU_ENVIRONMENT[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


@functools.cache
def _load_libtpu() -> None:
    from jax._src.lib import xla_client

    if xla_client.pjrt_plugin_loaded("tpu"):
        return
    path = _find("libtpu/libtpu.so", "libtpu") if sys.platform == "linux" else None
    if path is None:
        raise _missing("TPUs", "libtpu==0.0.50.1 (the release jax[tpu] pins)")
    xla_client.load_pjrt_plugin_dynamically("tpu", str(path))


def _mesh_of(args: Any, kwargs: Any) -> jax.sharding.Mesh | jax.sharding.AbstractMesh:
    meshes = {}
    for leaf in jax.tree.leaves((args, kwargs)):
        sharding = getattr(leaf, "sharding", None)
        if isinstance(sharding, jax.NamedSharding):
            mesh = sharding.mesh
            meshes[mesh.axis_names, tuple(mesh.shape.values()), mesh.axis_types] = mesh
    current = jax.sharding.get_mesh()
    if not meshes and current is not None and not current.empty:
        return current
    if len(meshes) != 1:
        found = "none" if not meshes else " and ".join(str(dict(m.shape)) for m in meshes.values())
        raise ValueError(
            f"compile_for rebuilds the arguments' mesh on the target's devices, so they "
            f"must be sharded on one mesh; found {found}. Give the arguments "
            f"NamedShardings on one mesh (jax.ShapeDtypeStruct(shape, dtype, "
            f"sharding=jax.NamedSharding(mesh, spec))), or call inside jax.set_mesh(mesh)."
        )
    return next(iter(meshes.values()))


def _mesh_on(
    mesh: jax.sharding.Mesh | jax.sharding.AbstractMesh, devices: tuple[jax.Device, ...]
) -> jax.sharding.Mesh:
    """A mesh like ``mesh`` on other devices, ordered as XLA's own mesh helpers order
    them for that hardware: physical rings on a TPU, hosts outermost on GPUs, and slices
    outermost over several TPU slices (the leading axes that their sizes allow)."""
    shape = tuple(mesh.shape.values())
    slices = len({getattr(device, "slice_index", 0) for device in devices})
    try:
        if slices > 1:
            outer, inner = _split_over(shape, slices)
            order = jax.experimental.mesh_utils.create_hybrid_device_mesh(
                inner, outer, devices=list(devices)
            )
        else:
            order = jax.experimental.mesh_utils.create_device_mesh(shape, devices=list(devices))
    except (ValueError, NotImplementedError, AssertionError):
        order = np.array(devices, dtype=object).reshape(shape)
    return jax.sharding.Mesh(order, mesh.axis_names, axis_types=mesh.axis_types)


def _split_over(shape: tuple[int, ...], slices: int) -> tuple[list[int], list[int]]:
    """``shape`` as (across slices, within each) by axis, the slices taken from the
    leading axes: (2, 8) over 2 slices is (2, 1) x (1, 8), (16,) is (2,) x (8,)."""
    outer, inner, left = [], [], slices
    for size in shape:
        across = math.gcd(size, left)
        outer.append(across)
        inner.append(size // across)
        left //= across
    if left != 1:
        raise ValueError(f"a mesh of shape {shape} does not split over {slices} slices")
    return outer, inner


def _abstract_on(mesh: jax.sharding.Mesh, leaf: Any) -> Any:
    if not (hasattr(leaf, "shape") and hasattr(leaf, "dtype")):
        return leaf
    sharding = getattr(leaf, "sharding", None)
    spec = sharding.spec if isinstance(sharding, jax.NamedSharding) else jax.P()
    return jax.ShapeDtypeStruct(
        leaf.shape,
        leaf.dtype,
        sharding=jax.NamedSharding(mesh, spec),
        weak_type=bool(getattr(leaf, "weak_type", False)),
    )
