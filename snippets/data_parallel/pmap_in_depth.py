"""pmap in depth: in_axes, out_axes, collectives, nesting, and what comes back.

Every feature of `jax.pmap` that data-parallel code uses, each run on 8 simulated CPU
devices: how it differs from `vmap`, broadcasting arguments with `in_axes=None`, the
collectives `psum`, `pmean`, `all_gather` and `axis_index`, combining `pmap` with `vmap`,
and the `jax.Array` it returns.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import jax.numpy as jnp
import numpy as np

print("devices:", jax.device_count())

# %% pmap_vs_vmap
# --8<-- [start:pmap_vs_vmap]
x = jnp.arange(8.0)


def double(v):
    return v * 2


print("vmap:", jax.vmap(double)(x))  # one device, vectorised
print("pmap:", jax.pmap(double)(x))  # 8 devices, one element each
# --8<-- [end:pmap_vs_vmap]


# %% in_axes
# --8<-- [start:in_axes]
def scale(values, factor):
    return values * factor


# Split `values` along axis 0; send the same `factor` to every device.
scaled = jax.pmap(scale, in_axes=(0, None))(jnp.arange(8.0), 10.0)
print("in_axes=(0, None):", scaled)

# Split along axis 1 instead: a (2, 8) array gives each device one column of 2.
columns = jnp.arange(16.0).reshape(2, 8)
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


results = jax.pmap(collectives, axis_name="i")(jnp.arange(8.0))
for name, value in zip(["psum", "pmean", "all_gather", "axis_index"], results, strict=True):
    print(f"{name:10s} shape {str(value.shape):7s} device 3 holds {value[3]}")
# --8<-- [end:collectives]

# %% out_axes
# --8<-- [start:out_axes]
# out_axes=None returns a value that is the same on every device only once.
total = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i", out_axes=None)(x)
print("out_axes=None:", total, "shape", total.shape)
# --8<-- [end:out_axes]

# %% nesting
# --8<-- [start:nesting]
# pmap over devices, vmap over the examples each device holds: (devices, per device, ...).
batch = jnp.arange(32.0).reshape(8, 4)
per_example = jax.pmap(jax.vmap(lambda example: example**2))(batch)
print("pmap(vmap(f)) shape:", per_example.shape)

# Nested pmap, once the way to use a 2-D grid of devices, fails in JAX 0.12.
nested = jax.pmap(
    jax.pmap(lambda v: jax.lax.psum(v, "inner"), axis_name="inner"), axis_name="outer"
)
try:
    nested(jnp.arange(8.0).reshape(2, 4))
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

# %% leading_axis
# --8<-- [start:leading_axis]
for size in (4, 16):
    try:
        result = jax.pmap(double)(jnp.arange(float(size)))
        print(f"leading axis {size}: ran on {len(result.sharding.device_set)} devices")
    except ValueError as error:
        print(f"leading axis {size}: ValueError - {error}")
# --8<-- [end:leading_axis]
