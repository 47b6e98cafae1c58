"""pmap in depth: in_axes, out_axes, collectives, nesting, and what comes back.

Every feature of `jax.pmap` that data-parallel code uses, each run on every device there
is (8 simulated CPU devices here): how it differs from `vmap`, broadcasting arguments with
`in_axes=None`, the collectives `psum`, `pmean`, `all_gather` and `axis_index`, combining
`pmap` with `vmap`, the `jax.Array` it returns, and why `x[0]` on it is not a free read.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import re

import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

n = jax.device_count()  # 8 here; the examples adapt to 1, 2 or 4 accelerators
print("devices:", n)

# %% pmap_vs_vmap
# --8<-- [start:pmap_vs_vmap]
x = jnp.arange(float(n))


def double(v):
    return v * 2


print("vmap:", jax.vmap(double)(x))  # one device, vectorised
print("pmap:", jax.pmap(double)(x))  # n devices, one element each
# --8<-- [end:pmap_vs_vmap]


# %% in_axes
# --8<-- [start:in_axes]
def scale(values, factor):
    return values * factor


# Split `values` along axis 0; send the same `factor` to every device.
scaled = jax.pmap(scale, in_axes=(0, None))(x, 10.0)
print("in_axes=(0, None):", scaled)

# Split along axis 1 instead: a (2, n) array gives each device one column of 2.
columns = jnp.arange(2.0 * n).reshape(2, n)
print("in_axes=1, column sums:", jax.pmap(jnp.sum, in_axes=1)(columns))
# --8<-- [end:in_axes]


# %% collectives
# --8<-- [start:collectives]
def collectives(v):
    return (
        jax.lax.psum(v, axis_name="i"),  # sum over devices
        jax.lax.pmean(v, axis_name="i"),  # mean over devices
        jax.lax.all_gather(v, axis_name="i"),  # every device gets every value
        jax.lax.axis_index("i"),  # which device am I?
    )


results = jax.pmap(collectives, axis_name="i")(x)
last = n - 1
# Fetch to the host once and index the NumPy copies (x[i] on the device would gather).
names = ["psum", "pmean", "all_gather", "axis_index"]
for name, value in zip(names, jax.device_get(results), strict=True):
    print(f"{name:10s} shape {str(value.shape):7s} device {last} holds {value[last]}")
# --8<-- [end:collectives]

# %% out_axes
# --8<-- [start:out_axes]
# out_axes=None returns a value that is the same on every device only once.
total = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i", out_axes=None)(x)
print("out_axes=None:", total, "shape", total.shape, "sharding", total.sharding.spec)
# --8<-- [end:out_axes]

# %% nesting
# --8<-- [start:nesting]
# pmap over devices, vmap over the examples each device holds: (devices, per device, ...).
batch = jnp.arange(4.0 * n).reshape(n, 4)
per_example = jax.pmap(jax.vmap(lambda example: example**2))(batch)
print("pmap(vmap(f)) shape:", per_example.shape)

# Nested pmap, once the way to use a 2-D grid of devices, fails in JAX 0.12.
nested = jax.pmap(
    jax.pmap(lambda v: jax.lax.psum(v, "inner"), axis_name="inner"), axis_name="outer"
)
outer = 2 if n % 2 == 0 else 1
try:
    nested(x.reshape(outer, n // outer))
except ValueError as error:
    print("nested pmap:", type(error).__name__, "-", str(error).split(" should ")[0])
# --8<-- [end:nesting]

# %% returned
# --8<-- [start:returned]
out = jax.pmap(double)(x)
print("a jax.Array:", isinstance(out, jax.Array), "of shape", out.shape)
print("sharding:", out.sharding.spec, "over", out.sharding.mesh.size, "devices")
for shard in out.addressable_shards[:3]:
    print(f"  {shard.device} holds index {shard.index} = {np.asarray(shard.data)}")
# --8<-- [end:returned]

# %% indexing
# --8<-- [start:indexing]
COLLECTIVE = re.compile(
    r"\b(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|collective-broadcast)"
    r"(?:-start)?\("
)

# A "replicated" pmap result: the same sum on every device, stored as a stack of copies.
totals = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(x)
print("stack of copies:", totals.shape, totals.sharding.spec)
# totals[0] is a slice of an axis sharded over the devices: JAX must send device 0's row
# to every device. The compiled indexing holds a collective (recorded on XLA:CPU).
hlo = jax.jit(lambda t: t[0]).lower(totals).compile().as_text()
print("totals[0] compiles to:", COLLECTIVE.findall(hlo))
# The copy that already lives on the first device, read without communication. A shard
# of the stack is a block of one row, shape (1,): .data[0] is the value itself.
block = totals.addressable_shards[0].data
print("addressable_shards[0].data:", block, "shape", block.shape, "-> .data[0]:", block[0])

# On an Explicit mesh, x[0] of a sharded dimension is an error, even in one process and
# with the mesh set: JAX will not insert that communication without being told.
mesh = jax.make_mesh((n,), ("i",), axis_types=(AxisType.Explicit,))
sharded = jax.device_put(np.arange(float(n)), NamedSharding(mesh, P("i")))
with jax.set_mesh(mesh):
    try:
        print("explicit x[0]:", sharded[0])
    except Exception as error:
        print("explicit x[0]:", type(error).__name__, "-", str(error).splitlines()[0])
# --8<-- [end:indexing]

# %% leading_axis
# --8<-- [start:leading_axis]
for size in (max(n // 2, 1), 2 * n):
    try:
        result = jax.pmap(double)(jnp.arange(float(size)))
        print(f"leading axis {size}: ran on {len(result.sharding.device_set)} devices")
    except ValueError as error:
        print(f"leading axis {size}: ValueError - {error}")
# --8<-- [end:leading_axis]
