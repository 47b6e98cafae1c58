"""Meshes and named sharding: where every piece of an array lives.

A 4x2 and a 2x4 mesh of 8 simulated CPU devices with named axes, Explicit against Auto
axis types, `NamedSharding` with the forms of `PartitionSpec` (None, tuples of axes,
fewer entries than dimensions), `jax.device_put`, `jax.debug.visualize_array_sharding`,
`jax.typeof` and the shards each device holds, and where a bad spec fails.
"""

# needs 8 devices: the lesson is the 4x2 and 2x4 meshes; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

# %% meshes
# --8<-- [start:meshes]
mesh = jax.make_mesh((4, 2), ("batch", "features"), axis_types=(AxisType.Explicit,) * 2)
print(mesh)
print(mesh.devices)
wide = jax.make_mesh((2, 4), ("batch", "features"), axis_types=(AxisType.Explicit,) * 2)
print(wide.devices)
# --8<-- [end:meshes]

# %% device_put
# --8<-- [start:device_put]
x = jnp.arange(32.0).reshape(8, 4)
sharded = jax.device_put(x, NamedSharding(mesh, P("batch", "features")))
print(jax.typeof(sharded))
jax.debug.visualize_array_sharding(sharded)
# --8<-- [end:device_put]

# %% shards
# --8<-- [start:shards]
for shard in sharded.addressable_shards[:3]:
    rows, cols = shard.index
    print(f"{shard.device}: rows {rows.start}:{rows.stop}, cols {cols.start}:{cols.stop}")
    print(shard.data)
# --8<-- [end:shards]

# %% specs
# --8<-- [start:specs]
for spec in [P("batch"), P(None, "features"), P(("batch", "features")), P()]:
    placed = jax.device_put(x, NamedSharding(mesh, spec))
    print(f"{str(spec):28s} {jax.typeof(placed)}")
    jax.debug.visualize_array_sharding(placed)
# --8<-- [end:specs]

# %% wide
# --8<-- [start:wide]
on_wide = jax.device_put(x, NamedSharding(wide, P("batch", "features")))
print(jax.typeof(on_wide))
jax.debug.visualize_array_sharding(on_wide)
# --8<-- [end:wide]

# %% axis_types
# --8<-- [start:axis_types]
auto = jax.make_mesh((4, 2), ("batch", "features"), axis_types=(AxisType.Auto,) * 2)
on_auto = jax.device_put(x, NamedSharding(auto, P("batch", "features")))
with jax.set_mesh(mesh):  # computations on a mesh run with it set as the current mesh
    print("Explicit:", jax.typeof(sharded), "-> sum over rows:", jax.typeof(sharded.sum(axis=0)))
with jax.set_mesh(auto):
    print("Auto:    ", jax.typeof(on_auto), "-> sum over rows:", jax.typeof(on_auto.sum(axis=0)))
print("jax.sharding.Mesh defaults to", jax.sharding.Mesh(mesh.devices, mesh.axis_names).axis_types)
# --8<-- [end:axis_types]

# %% pitfalls
# --8<-- [start:pitfalls]
try:
    NamedSharding(mesh, P("nope"))  # an axis the mesh does not have: fails right here
except ValueError as error:
    print("NamedSharding:", error)
try:
    jax.device_put(jnp.zeros((6, 4)), NamedSharding(mesh, P("batch", "features")))  # 6 rows, 4 ways
except ValueError as error:
    print("jax.device_put:", str(error).split(". Got")[0])
# --8<-- [end:pitfalls]

# %% mesh_size
# --8<-- [start:mesh_size]
try:
    jax.make_mesh((4, 4), ("batch", "features"))  # 16 devices: more than there are
except ValueError as error:
    print("jax.make_mesh((4, 4)):", error)
half = jax.make_mesh((4,), ("batch",))  # 4 devices: fewer than there are, and no error
print(
    "jax.make_mesh((4,)) uses devices", [d.id for d in half.devices.flat], "of", jax.device_count()
)
# --8<-- [end:mesh_size]
