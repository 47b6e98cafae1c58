"""Which mesh axis crosses the hosts: HSDP on 2 hosts of 8 H100s, compiled with jaxpar for XLA:GPU.

The site's MLP (1024 -> 4096 -> 1024, float32 parameters, bfloat16 compute, momentum SGD)
trained on 16 GPUs, 2 hosts of 8: NVLink within a host, InfiniBand between them.
`jaxpar.target_devices` gives the 16 compile-only H100s; each says which host it is on
(`process_index`). `mesh_utils.create_hybrid_device_mesh` builds a mesh ("replica",
"fsdp") of shape (2, 8) that puts the replicas across the hosts and the FSDP shards within
each (HSDP); on a cluster it groups the GPUs by `slice_index`, one slice per host, and
here, where compile-only GPUs all say slice 0, by process. `jaxpar.compile_for` compiles the step
for XLA:GPU on it, and `jaxpar.summarise` says which collectives span both hosts and how
many bytes each GPU sends in them. Then the wrong layouts: the same axes in the other
order, and FSDP over all 16 GPUs. Nothing runs: it compiles. Compile times go to
standard error.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import sys
import time

import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import mesh_utils
from jax.sharding import AxisType

from jaxpar import TARGETS, compile_for, summarise, target_devices

SHAPES = {"hidden": (1024, 4096), "out": (4096, 1024)}
BATCH = 256
AUTO = (AxisType.Auto,) * 2
tx = optax.sgd(0.01, momentum=0.9)


def loss_fn(params, x, y):
    """Float32 parameters, bfloat16 compute: the usual mixed precision."""
    bf16 = jax.tree.map(lambda w: w.astype(jnp.bfloat16), params)
    h = jax.nn.relu(x.astype(jnp.bfloat16) @ bf16["hidden"])
    return jnp.mean(jnp.square((h @ bf16["out"]).astype(jnp.float32) - y))


@jax.jit(donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def arguments(mesh, weights):
    """Shapes and shardings only (no memory): weights and their momentum split by the
    spec `weights`, the batch over every device of the mesh."""

    def abstract(shape, spec, dtype=jnp.float32):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=jax.NamedSharding(mesh, spec))

    params = {name: abstract(shape, weights) for name, shape in SHAPES.items()}
    opt_state = jax.tree.map(
        lambda leaf: abstract(leaf.shape, weights if leaf.ndim == 2 else jax.P(), leaf.dtype),
        jax.eval_shape(tx.init, params),
    )
    batch = abstract((BATCH, 1024), jax.P(mesh.axis_names))
    return params, opt_state, batch, batch


def compiled(target, mesh, weights):
    start = time.perf_counter()
    result = summarise(compile_for(target, train_step, *arguments(mesh, weights)))
    print(f"{dict(mesh.shape)} for {target}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return result


def megabytes(n):
    return f"{n / 1e6:.1f} MB"


def hosts_of(mesh):
    """Each mesh position's host (process_index)."""
    return np.vectorize(lambda device: device.process_index)(mesh.devices)


def report(summary):
    """One line per collective: kind, element type, mesh axes, hosts its groups span,
    bytes each GPU sends in it (ring model); then the totals."""
    for c in summary.collectives:
        axes = ",".join(c.axes or ("?",))
        print(
            f"  {c.kind:18} {'/'.join(c.element_types):5} along {axes:14} "
            f"{c.hosts} host{'s' if c.hosts > 1 else ' '}  sends {megabytes(c.sent_bytes):>8}"
        )
    across = summary.sent_bytes(across="hosts")
    print(f"  each GPU sends {megabytes(summary.sent_bytes())}, {megabytes(across)} across hosts")


# --8<-- [end:setup]

# %% devices
# --8<-- [start:devices]
devices = target_devices("h100-16")
print(TARGETS["h100-16"].description, f"({TARGETS['h100-16'].backend})")
print("process_index:", [d.process_index for d in devices])
print("coords[0]:    ", [d.coords[0] for d in devices])  # the partition: NVLink domain
print("slice_index:  ", [d.slice_index for d in devices])
# --8<-- [end:devices]

# %% meshes
# --8<-- [start:meshes]
# On the cluster each host is a slice of its own, and this is the whole call:
#     mesh_utils.create_hybrid_device_mesh((1, 8), (2, 1))
# These compile-only GPUs all say slice_index 0, so here it finds one slice:
try:
    mesh_utils.create_hybrid_device_mesh((1, 8), (2, 1), devices)
except ValueError as error:
    print("by slice_index:", error)
# Here one process runs each host, so grouping by process gives the cluster's mesh.
hsdp = jax.sharding.Mesh(
    mesh_utils.create_hybrid_device_mesh((1, 8), (2, 1), devices, process_is_granule=True),
    ("replica", "fsdp"),
    axis_types=AUTO,
)
print("by process, hosts of ('replica', 'fsdp'):")
print(hosts_of(hsdp))
# The GPUs in id order, host by host, reshaped with the axes the other way round.
swapped = jax.sharding.Mesh(np.array(devices).reshape(8, 2), ("fsdp", "replica"), axis_types=AUTO)
print("axes in the other order, ('fsdp', 'replica'):")
print("  hosts along fsdp:   ", hosts_of(swapped)[:, 0])
print("  hosts along replica:", hosts_of(swapped)[0, :])
# --8<-- [end:meshes]

# %% hsdp
# --8<-- [start:hsdp]
print("HSDP: replicas across hosts, FSDP within (XLA:GPU)")
report(compiled("h100-16", hsdp, jax.P("fsdp", None)))
# --8<-- [end:hsdp]

# %% wrong
# --8<-- [start:wrong]
print("the same axes in the other order: FSDP spans the hosts (XLA:GPU)")
report(compiled("h100-16", swapped, jax.P("fsdp", None)))
print("FSDP over all 16 GPUs, no replicas (XLA:GPU)")
report(compiled("h100-16", hsdp, jax.P(("replica", "fsdp"), None)))
# --8<-- [end:wrong]
