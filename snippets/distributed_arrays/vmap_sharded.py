"""vmap over sharded arrays: a batched dot product that stays where its data is.

Two batches of vectors sharded by rows with `P("batch", None)` on a 4x2 mesh, one dot
product per pair with `jax.vmap`, and the sharding of the result.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% vmap
# --8<-- [start:vmap]
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((4, 2), ("batch", "features"), axis_types=(AxisType.Explicit,) * 2)
rows = NamedSharding(mesh, P("batch", None))
u = jax.device_put(jnp.arange(64.0).reshape(8, 8), rows)
v = jax.device_put(jnp.ones((8, 8)), rows)

dots = jax.vmap(jnp.dot)(u, v)  # one dot product per row: shape (8,)
print("u:", jax.typeof(u), " v:", jax.typeof(v))
print("dots:", jax.typeof(dots), dots.tolist())
jax.debug.visualize_array_sharding(dots)
# --8<-- [end:vmap]

# %% hlo
# --8<-- [start:hlo]
hlo = jax.jit(jax.vmap(jnp.dot)).lower(u, v).compile().as_text()
print(
    "collectives in the compiled program:",
    [c for c in ("all-reduce", "all-gather") if c in hlo] or "none",
)
print("each device holds", dots.addressable_shards[0].data.shape, "of", dots.shape)
# --8<-- [end:hlo]
