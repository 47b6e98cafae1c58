"""Migrating from pmap: each pmap-era idiom next to what replaces it, checked to agree.

Every row of the migration table on the page comes from here: the old call (or the fact
that it is gone in JAX 0.12) and today's equivalent, with a check that both give the same
values. Two idioms give other numbers once ported, without an error, and the script shows
how: random keys (one key under `jax.jit`, `fold_in` inside `shard_map`) and BatchNorm
statistics (per device under pmap, global under `jax.jit`). Flax's `unreplicate` is
shown reading device 0's shard. Every `shard_map` runs inside `jax.jit`, as code to copy
should. The meshes are
sized from `jax.device_count()`: 8 simulated CPU devices here, or a machine's accelerators.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import flax.jax_utils
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

n = jax.device_count()
mesh = jax.make_mesh((n,), ("i",), axis_types=(AxisType.Explicit,))
print("mesh:", dict(mesh.shape))

# %% removed
# --8<-- [start:removed]
for old in ["device_put_replicated", "device_put_sharded", "tree_map"]:
    print(f"jax.{old} exists: {hasattr(jax, old)}")
# --8<-- [end:removed]

# %% replicated
# --8<-- [start:replicated]
# Old: jax.device_put_replicated(x, jax.devices()) -> shape (n, 3), one copy per device.
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
# Old: jax.device_put_sharded([chunk_0, ..., chunk_n-1], jax.devices())
chunks = [np.full((2,), float(i)) for i in range(n)]
stacked = jax.device_put(np.stack(chunks), NamedSharding(mesh, P("i")))  # stacked on the host
last = stacked.addressable_shards[-1]
print("sharded:", stacked.shape, stacked.sharding.spec, f"{last.device} holds", last.data)
# --8<-- [end:sharded]

# %% unreplicate
# --8<-- [start:unreplicate]
# Old: flax.jax_utils.unreplicate(tree) or x[0] on a (n, ...) stack of copies.
stack_of_copies = jax.pmap(lambda v: v * 2)(np.stack([np.arange(3.0)] * n))
one_copy = stack_of_copies.addressable_shards[0].data[0]  # device 0's copy, no gather
print("unreplicated:", one_copy)


def device_ids(array):
    return sorted(device.id for device in array.devices())


# Flax's unreplicate (since 0.12.4) reads device 0's shard too: its result stays there.
# x[0] is a computation over the whole stack instead, and its result is on every device.
print(
    "flax.jax_utils.unreplicate: on devices",
    device_ids(flax.jax_utils.unreplicate(stack_of_copies)),
)
print("x[0]: on devices", device_ids(stack_of_copies[0]))
# With NamedSharding there is nothing to undo: the replicated array *is* the value.
print("replicated array as is:", replicated * 2)
# --8<-- [end:unreplicate]


# %% in_axes
# --8<-- [start:in_axes]
def affine(v, scale):
    return v * scale + 1.0


host_values = np.arange(2.0 * n).reshape(n, 2)  # pmap takes host arrays
old = jax.pmap(affine, in_axes=(0, None))(host_values, 3.0)
# in_axes=0 -> P("i") for that argument, None -> P(). On an Explicit mesh the input must
# already be laid out as in_specs says: shard_map no longer reshards silently.
values = jax.device_put(host_values, NamedSharding(mesh, P("i")))
new = jax.jit(jax.shard_map(affine, mesh=mesh, in_specs=(P("i"), P()), out_specs=P("i")))(
    values, 3.0
)


def block_shape(v):
    return jnp.array(v.shape)  # the shape one device sees, the same on every device


pmap_block = jax.pmap(block_shape, out_axes=None)(host_values)
shard_map_block = jax.jit(jax.shard_map(block_shape, mesh=mesh, in_specs=P("i"), out_specs=P()))(
    values
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


old = jax.pmap(normalise, axis_name="i")(host_values)
new = jax.jit(jax.shard_map(normalise, mesh=mesh, in_specs=P("i"), out_specs=P("i")))(values)
print("psum over axis 'i' agrees:", np.allclose(old, new))
# --8<-- [end:axis_name]


# %% out_axes
# --8<-- [start:out_axes]
def total(v):
    return jax.lax.psum(v.sum(), "i")  # the same on every device


old = jax.pmap(total, axis_name="i", out_axes=None)(host_values)  # returned once, not n times
new = jax.jit(jax.shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P()))(values)
print("out_axes=None -> out_specs=P():", float(old), float(new), new.sharding.spec)
# --8<-- [end:out_axes]

# %% smap
# --8<-- [start:smap]
# jax.smap: a shard_map over the one mesh axis named by axis_name, written like pmap.
# It takes that axis from the mesh set by jax.set_mesh; each device sees a block.
old = jax.pmap(affine, in_axes=(0, None))(host_values, 3.0)
with jax.set_mesh(mesh):
    new = jax.jit(jax.smap(affine, in_axes=(0, None), out_axes=0, axis_name="i"))(values, 3.0)
    smap_block = jax.jit(jax.smap(block_shape, in_axes=0, out_axes=None, axis_name="i"))(values)
print("per-device shape: smap", tuple(smap_block.tolist()))
print("pmap == smap:", np.array_equal(old, new))
# --8<-- [end:smap]

# %% nested
# --8<-- [start:nested]
# Old: pmap(pmap(f, axis_name="inner"), axis_name="outer") on a (2, 4, ...) array.
outer = 2 if n % 2 == 0 else 1  # 2 x 4 on 8 devices
grid = jax.make_mesh((outer, n // outer), ("outer", "inner"), axis_types=(AxisType.Explicit,) * 2)
blocks = jax.device_put(
    np.arange(float(n)).reshape(outer, n // outer), NamedSharding(grid, P("outer", "inner"))
)
row_sums = jax.jit(
    jax.shard_map(
        lambda b: jax.lax.psum(b, "inner"),
        mesh=grid,
        in_specs=P("outer", "inner"),
        out_specs=P("outer", "inner"),
    )
)(blocks)
print(f"psum over 'inner' on a {outer}x{n // outer} mesh:", row_sums.tolist())
# --8<-- [end:nested]


# %% training
# --8<-- [start:training]
# Old: a pmapped train step on (n, B/n, ...) inputs. New: the plain step under jit,
# with the batch sharded and the parameters replicated.
def loss(w, v):
    return jnp.mean((v @ w) ** 2)


def pmap_grad(w, v):
    return jax.lax.pmean(jax.grad(loss)(w, v), "i")


w = np.ones((2,))
# Parameters in once (in_axes=None) and the averaged gradient out once (out_axes=None).
old_grad = jax.pmap(pmap_grad, axis_name="i", in_axes=(None, 0), out_axes=None)(
    w, host_values.reshape(n, -1, 2)
)
with jax.set_mesh(mesh):
    w = jax.device_put(w, NamedSharding(mesh, P()))
    new_grad = jax.jit(jax.grad(loss))(w, values)
    # pmap(..., donate_argnums=0) -> jax.jit(..., donate_argnums=0): the jit donates.
    sgd_step = jax.jit(lambda w, v: w - 0.1 * jax.grad(loss)(w, v), donate_argnums=0)
    new_w = sgd_step(w, values)
print("gradient: pmap + pmean == jit on a sharded batch:", np.allclose(old_grad, new_grad))
print(
    "after one donated step: w deleted:",
    w.is_deleted(),
    "new w replicated:",
    new_w.sharding.is_fully_replicated,
)
# --8<-- [end:training]


# %% random_keys
# --8<-- [start:random_keys]
def dropout(key, v):  # keeps each entry with probability 1/2
    return jnp.where(jax.random.bernoulli(key, 0.5, v.shape), 2 * v, 0.0)


key = jax.random.key(0)
ones = np.ones((2 * n, 4), np.float32)  # a batch of 2 rows per device
# Old, a latent bug: one key broadcast to every device draws the same mask on each.
same = jax.pmap(dropout, in_axes=(None, 0))(key, ones.reshape(n, 2, 4))
print(
    "pmap, one key: every device's mask identical:", all(np.array_equal(same[0], m) for m in same)
)
# Old, right: one key per device, split on the host.
split = jax.pmap(dropout)(jax.random.split(key, n), ones.reshape(n, 2, 4))
print("pmap, split keys: masks differ between devices:", len({m.tobytes() for m in split}) == n)
# New: one key under jax.jit. The sharded draw is the one a single device makes for the
# whole batch, so the result does not depend on the number of devices.
batch = jax.device_put(ones, NamedSharding(mesh, P("i")))
with jax.set_mesh(mesh):
    sharded = jax.jit(dropout)(key, batch)
print(
    "jit, one key: sharded draw == one device's draw:", np.array_equal(sharded, dropout(key, ones))
)


# Inside shard_map the pmap rule still holds: fold the device's index into the key.
def per_device_dropout(key, v):
    return dropout(jax.random.fold_in(key, jax.lax.axis_index("i")), v)


with jax.set_mesh(mesh):
    folded = jax.jit(
        jax.shard_map(per_device_dropout, mesh=mesh, in_specs=(P(), P("i")), out_specs=P("i"))
    )(key, batch)
blocks = np.asarray(folded).reshape(n, 2, 4)
print("shard_map, fold_in: masks differ between devices:", len({b.tobytes() for b in blocks}) == n)
# --8<-- [end:random_keys]


# %% batch_norm
# --8<-- [start:batch_norm]
# momentum=0.0: the running mean is the mean of the last batch, easy to read.
def batch_norm_step(axis_name=None):
    graph, state = nnx.split(nnx.BatchNorm(2, momentum=0.0, axis_name=axis_name, rngs=nnx.Rngs(0)))

    def step(state, v):
        model = nnx.merge(graph, state)
        return model(v), nnx.state(model)  # normalised batch, updated statistics

    return step, state


rows = np.arange(4.0 * n, dtype=np.float32).reshape(2 * n, 2)  # 2 rows per device
step, state = batch_norm_step()
# Old, without axis_name: each device normalises with its own rows' statistics and keeps
# its own running mean, so the "copies" of the model differ.
old_out, old_state = jax.pmap(step, in_axes=(None, 0))(state, rows.reshape(n, 2, 2))
print(
    "pmap, no axis_name: running mean on device 0",
    old_state["mean"][...][0],
    f"on device {n - 1}",
    old_state["mean"][...][n - 1],
)
# New: the same module under jax.jit on a sharded batch uses the global batch's statistics.
with jax.set_mesh(mesh):
    new_out, new_state = jax.jit(step)(state, jax.device_put(rows, NamedSharding(mesh, P("i"))))
print("jit, sharded batch: running mean", new_state["mean"][...])
print("  outputs equal to pmap's:", np.allclose(np.asarray(old_out).reshape(-1, 2), new_out))
# Old, with axis_name="i": statistics averaged over devices, as the jit version computes.
synced, synced_state = batch_norm_step(axis_name="i")
synced_out, _ = jax.pmap(synced, in_axes=(None, 0), axis_name="i")(
    synced_state, rows.reshape(n, 2, 2)
)
print(
    "pmap with axis_name='i' == jit:", np.allclose(np.asarray(synced_out).reshape(-1, 2), new_out)
)
# --8<-- [end:batch_norm]
