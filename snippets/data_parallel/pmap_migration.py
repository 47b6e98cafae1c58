"""Migrating from pmap: each pmap-era idiom next to what replaces it, checked to agree.

Every row of the migration table on the page comes from here: the old call (or the fact
that it is gone in JAX 0.12) and today's equivalent, with a check that both give the same
values.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((8,), ("i",), axis_types=(AxisType.Explicit,))
print("mesh:", dict(mesh.shape))

# %% removed
# --8<-- [start:removed]
for old in ["device_put_replicated", "device_put_sharded", "tree_map"]:
    print(f"jax.{old} exists: {hasattr(jax, old)}")
# --8<-- [end:removed]

# %% replicated
# --8<-- [start:replicated]
# Old: jax.device_put_replicated(x, jax.devices()) -> shape (8, 3), one copy per device.
x = np.arange(3.0)
replicated = jax.device_put(x, NamedSharding(mesh, P()))
print(
    "replicated:",
    replicated.shape,
    replicated.sharding.spec,
    replicated.sharding.is_fully_replicated,
)
# --8<-- [end:replicated]

# %% sharded
# --8<-- [start:sharded]
# Old: jax.device_put_sharded([chunk_0, ..., chunk_7], jax.devices())
chunks = [np.full((2,), float(i)) for i in range(8)]
stacked = jax.device_put(np.stack(chunks), NamedSharding(mesh, P("i")))
print(
    "sharded:",
    stacked.shape,
    stacked.sharding.spec,
    "device 5 holds",
    stacked.addressable_shards[5].data,
)
# --8<-- [end:sharded]

# %% unreplicate
# --8<-- [start:unreplicate]
# Old: flax.jax_utils.unreplicate(tree) or x[0] on a (8, ...) stack of copies.
stack_of_copies = jax.pmap(lambda v: v * 2)(jnp.stack([jnp.arange(3.0)] * 8))
one_copy = stack_of_copies.addressable_shards[0].data[0]  # device 0's copy, no gather
print("unreplicated:", one_copy)
# With NamedSharding there is nothing to undo: the replicated array *is* the value.
print("replicated array as is:", replicated * 2)
# --8<-- [end:unreplicate]


# %% in_axes
# --8<-- [start:in_axes]
def affine(v, scale):
    return v * scale + 1.0


values = jnp.arange(16.0).reshape(8, 2)
old = jax.pmap(affine, in_axes=(0, None))(values, 3.0)
# in_axes=0 -> P("i") for that argument, None -> P(). On an Explicit mesh the input must
# already be laid out as in_specs says: shard_map no longer reshards silently.
values = jax.device_put(values, NamedSharding(mesh, P("i")))
new = jax.shard_map(affine, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i"))(values, 3.0)
pmap_block = jax.pmap(lambda v: jnp.array(v.shape))(np.asarray(values))[0]
shard_map_block = (
    jax.shard_map(lambda v: jnp.array([v.shape]), mesh=mesh, in_specs=P("i"), out_specs=P("i"))(
        values
    )
    .addressable_shards[0]
    .data[0]
)
print(
    "per-device shape: pmap",
    tuple(pmap_block.tolist()),
    "shard_map",
    tuple(shard_map_block.tolist()),
)
print("pmap == shard_map:", np.array_equal(old, new))
# --8<-- [end:in_axes]


# %% axis_name
# --8<-- [start:axis_name]
def normalise(v):
    return v / jax.lax.psum(v.sum(), "i")  # "i" was pmap's axis_name; now a mesh axis


old = jax.pmap(normalise, axis_name="i")(values)
new = jax.shard_map(normalise, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(values)
print("psum over axis 'i' agrees:", np.allclose(old, new))
# --8<-- [end:axis_name]

# %% nested
# --8<-- [start:nested]
# Old: pmap(pmap(f, axis_name="inner"), axis_name="outer") on a (2, 4, ...) array.
grid = jax.make_mesh((2, 4), ("outer", "inner"), axis_types=(AxisType.Explicit,) * 2)
blocks = jax.device_put(jnp.arange(8.0).reshape(2, 4), NamedSharding(grid, P("outer", "inner")))
row_sums = jax.shard_map(
    lambda b: jax.lax.psum(b, "inner"),
    mesh=grid,
    in_specs=P("outer", "inner"),
    out_specs=P("outer", "inner"),
)(blocks)
print("psum over 'inner' on a 2x4 mesh:", row_sums.tolist())
# --8<-- [end:nested]

# %% training
# --8<-- [start:training]
# Old: a pmapped train step on (8, B/8, ...) inputs. New: the plain step under jit,
# with the batch sharded and the parameters replicated.
w = jnp.ones((2,))


def loss(w, v):
    return jnp.mean((v @ w) ** 2)


old_grad = jax.pmap(
    lambda w, v: jax.lax.pmean(jax.grad(loss)(w, v), "i"), axis_name="i", in_axes=(None, 0)
)(w, values.reshape(8, 1, 2))[0]
new_grad = jax.jit(jax.grad(loss))(jax.device_put(w, NamedSharding(mesh, P())), values)
print("gradient: pmap + pmean == jit on a sharded batch:", np.allclose(old_grad, new_grad))
# --8<-- [end:training]
