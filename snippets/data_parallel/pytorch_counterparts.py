"""DDP's building blocks in JAX: all_reduce, DistributedSampler and gradient accumulation.

Each PyTorch idiom a DDP user relies on, next to its JAX counterpart on 8 simulated CPU
devices: `dist.all_reduce` as `jax.lax.psum` inside `shard_map`, `DistributedSampler` as a
batch sharded along the mesh (reshuffled each epoch with a key), and gradient accumulation
with `jax.lax.scan` or `optax.MultiSteps`, checked against one large batch.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
print("mesh:", dict(mesh.shape))

# %% all_reduce
# --8<-- [start:all_reduce]
# PyTorch, in each of 8 processes: t = torch.tensor([rank]); dist.all_reduce(t)
ranks = jax.device_put(jnp.arange(8.0), NamedSharding(mesh, P("data")))
summed = jax.shard_map(
    lambda t: jax.lax.psum(t, "data"), mesh=mesh, in_specs=P("data"), out_specs=P("data")
)(ranks)
print("every device after psum:", summed.tolist())
# --8<-- [end:all_reduce]

# %% sampler
# --8<-- [start:sampler]
# PyTorch: DistributedSampler(dataset, num_replicas=8, rank=r) + sampler.set_epoch(epoch)
dataset_size, batch_size = 64, 16
key = jax.random.key(0)
for epoch in range(2):
    order = jax.random.permutation(jax.random.fold_in(key, epoch), dataset_size)
    indices = jax.device_put(order[:batch_size], NamedSharding(mesh, P("data")))
    held = [shard.data.tolist() for shard in indices.addressable_shards[:3]]
    print(f"epoch {epoch}: devices 0-2 get examples {held}")
# --8<-- [end:sampler]

# %% accumulation
# --8<-- [start:accumulation]
x = jax.random.normal(jax.random.key(1), (256, 4))
y = x @ jnp.array([1.0, -2.0, 3.0, 0.5])
w = jnp.zeros(4)


def loss(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


def accumulated_grad(w, x, y, micro_batches=4):
    """The mean gradient over micro-batches, one at a time: memory of one micro-batch."""
    xs = x.reshape(micro_batches, -1, x.shape[-1])
    ys = y.reshape(micro_batches, -1)

    def add(total, batch):
        return total + jax.grad(loss)(w, *batch), None

    total, _ = jax.lax.scan(add, jnp.zeros_like(w), (xs, ys))
    return total / micro_batches


print(
    "4 micro-batches == one batch of 256:",
    np.allclose(accumulated_grad(w, x, y), jax.grad(loss)(w, x, y)),
)
# --8<-- [end:accumulation]

# %% multisteps
# --8<-- [start:multisteps]
# Optax does the bookkeeping: apply the update only every 4th call.
tx = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=4)
state = tx.init(w)
w_accumulated = w
for micro in range(4):
    xb, yb = x[micro * 64 : (micro + 1) * 64], y[micro * 64 : (micro + 1) * 64]
    updates, state = tx.update(jax.grad(loss)(w_accumulated, xb, yb), state, w_accumulated)
    w_accumulated = optax.apply_updates(w_accumulated, updates)
    print(f"after micro-batch {micro}: parameters changed: {not np.allclose(w_accumulated, w)}")
w_large = w - 0.1 * jax.grad(loss)(w, x, y)
print("MultiSteps == one step on the large batch:", np.allclose(w_accumulated, w_large, atol=1e-6))
# --8<-- [end:multisteps]
