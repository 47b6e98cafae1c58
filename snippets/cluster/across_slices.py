"""Which mesh axis crosses TPU slices: HSDP on 2 TPU v5e-8 slices, compiled with jaxpar for XLA:TPU.

The MLP of across_hosts.py (1024 -> 4096 -> 1024, float32 parameters, bfloat16 compute,
momentum SGD) trained on 2 TPU v5e-8 slices: 8 chips joined by ICI in each, the two
slices by the data-centre network (DCN). `jaxpar.target_devices` gives the 16
compile-only chips; each says which slice it is in (`slice_index`). `jax.make_mesh`
refuses a mesh over several slices; `mesh_utils.create_hybrid_device_mesh` builds one,
with an ICI shape and a DCN shape. `jaxpar.compile_for` compiles HSDP (replicas across
the slices, FSDP within) and FSDP over all 16 chips for XLA:TPU, and `jaxpar.summarise`
shows how XLA:TPU splits each collective that spans the slices into a part over ICI and
a transfer over DCN. Nothing runs: it compiles. Compile times go to standard error.
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


def report(summary):
    """One line per collective: kind, element type, mesh axes, slices its groups span
    (for a transfer over DCN, the collective it is part of), bytes each chip sends in
    it; then the totals."""
    for c in summary.collectives:
        if c.dcn:
            where = f"DCN part of an {c.dcn}" if c.dcn[0] in "aeiou" else f"DCN, {c.dcn}"
        else:
            where = f"along {','.join(c.axes or ('?',)):7} {c.slices} slice"
        print(
            f"  {c.kind:14} {'/'.join(c.element_types):5} {where:28} sends {megabytes(c.sent_bytes):>8}"
        )
    dcn = [c for c in summary.collectives if c.kind == "send" and c.dcn]
    print(
        f"  each chip sends {megabytes(summary.sent_bytes())}, "
        f"{megabytes(summary.sent_bytes(across='slices'))} over DCN in {len(dcn)} transfers"
    )


# --8<-- [end:setup]

# %% devices
# --8<-- [start:devices]
devices = target_devices("v5e-8x2")
print(TARGETS["v5e-8x2"].description, f"({TARGETS['v5e-8x2'].backend})")
print("process_index:", [d.process_index for d in devices])
print("slice_index:  ", [d.slice_index for d in devices])
# --8<-- [end:devices]

# %% meshes
# --8<-- [start:meshes]
# Each slice numbers its chips' coordinates from (0, 0, 0): jax.make_mesh, which lays a
# mesh out on one slice's torus, fails on two.
print("chip coordinates:", len({tuple(d.coords) for d in devices}), "distinct of", len(devices))
try:
    jax.make_mesh((2, 8), ("replica", "fsdp"), axis_types=AUTO, devices=devices)
except (ValueError, AssertionError) as error:
    print("jax.make_mesh fails:", type(error).__name__)
# ICI shape (1, 8) within each slice, DCN shape (2, 1) across them: a (2, 8) mesh.
hsdp = jax.sharding.Mesh(
    mesh_utils.create_hybrid_device_mesh((1, 8), (2, 1), devices),
    ("replica", "fsdp"),
    axis_types=AUTO,
)
print("create_hybrid_device_mesh, slices of ('replica', 'fsdp'):")
print(np.vectorize(lambda device: device.slice_index)(hsdp.devices))
# --8<-- [end:meshes]

# %% hsdp
# --8<-- [start:hsdp]
print("HSDP: replicas across slices, FSDP within (XLA:TPU)")
report(compiled("v5e-8x2", hsdp, jax.P("fsdp", None)))
# --8<-- [end:hsdp]

# %% wrong
# --8<-- [start:wrong]
print("FSDP over all 16 chips, no replicas (XLA:TPU)")
report(compiled("v5e-8x2", hsdp, jax.P(("replica", "fsdp"), None)))
# --8<-- [end:wrong]
