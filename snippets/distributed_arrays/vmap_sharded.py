"""vmap over sharded arrays: a batched dot product that stays where its data is.

Two batches of vectors sharded by rows with `P("batch", None)` over all devices, one dot
product per pair with `jax.vmap`, and the sharding of the result; then what happens when
the two batches are sharded differently. The mesh is sized from `jax.device_count()`: 8
simulated CPU devices here, or a machine's accelerators, as long as their count divides
the 8 rows (1, 2, 4 or 8).
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% vmap
# --8<-- [start:vmap]
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(AxisType.Explicit,))
rows = NamedSharding(mesh, P("batch", None))
u = jax.device_put(jnp.arange(64.0).reshape(8, 8), rows)
v = jax.device_put(jnp.ones((8, 8)), rows)

batched_dot = jax.jit(jax.vmap(jnp.dot))  # one dot product per row: shape (8,)
with jax.set_mesh(mesh):
    dots = batched_dot(u, v)
print("u:", jax.typeof(u), " v:", jax.typeof(v))
print("dots:", jax.typeof(dots), dots.tolist())
jax.debug.visualize_array_sharding(dots)
# --8<-- [end:vmap]

# %% hlo
# --8<-- [start:hlo]
with jax.set_mesh(mesh):
    hlo = batched_dot.lower(u, v).compile().as_text()
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
found = [c for c in COLLECTIVES if f" {c}(" in hlo or f" {c}-start(" in hlo]
print("collectives in the compiled program:", found or "none")
print("each device holds", dots.addressable_shards[0].data.shape, "of", dots.shape)
# --8<-- [end:hlo]

# %% mismatch
# --8<-- [start:mismatch]
import textwrap

v_columns = jax.device_put(v, NamedSharding(mesh, P(None, "batch")))  # split by columns
with jax.set_mesh(mesh):
    try:
        batched_dot(u, v_columns)
    except ValueError as error:
        print(textwrap.fill(f"ValueError: {error}", 88, subsequent_indent="  "))
    # Choose one layout for both: here v's rows move to where u's are.
    dots = batched_dot(u, jax.reshard(v_columns, P("batch", None)))
print("after jax.reshard:", jax.typeof(dots), dots.tolist())
# --8<-- [end:mismatch]
