"""DDP's building blocks in JAX: all_reduce, DistributedSampler and gradient accumulation.

Each PyTorch idiom a DDP user relies on, next to its JAX counterpart on a mesh of all
`jax.device_count()` devices (8 simulated CPU devices here): `dist.all_reduce` as
`jax.lax.psum` inside `shard_map`, `DistributedSampler` as a shuffle on the host seeded
with `seed + epoch` and a batch sharded along the mesh, and gradient accumulation over
micro-batches of a sharded batch. The compiled HLO shows where the gradient all-reduce
runs: inside the loop with `jax.lax.scan` under `jax.jit`, once after the loop when the
gradients are accumulated per device inside `shard_map` (DDP's `no_sync`), and on every
call of `optax.MultiSteps`.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import re

import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

n_devices = jax.device_count()
mesh = jax.make_mesh((n_devices,), ("data",), axis_types=(AxisType.Explicit,))
print("mesh:", dict(mesh.shape))

# %% all_reduce
# --8<-- [start:all_reduce]
# PyTorch, in each of 8 processes: t = torch.tensor([rank]); dist.all_reduce(t)
ranks = jax.device_put(np.arange(n_devices, dtype=np.float32), NamedSharding(mesh, P("data")))
all_reduce = jax.jit(
    jax.shard_map(
        lambda t: jax.lax.psum(t, "data"), mesh=mesh, in_specs=P("data"), out_specs=P("data")
    )
)
print("every device after psum:", all_reduce(ranks).tolist())
# --8<-- [end:all_reduce]

# %% sampler
# --8<-- [start:sampler]
# PyTorch: DistributedSampler(dataset, num_replicas=8, rank=r, seed=SEED) + set_epoch(epoch)
dataset = np.arange(64, dtype=np.int32)  # example i is the number i
SEED, batch_size = 0, 16
for epoch in range(2):
    # Like set_epoch: the order of the epoch comes from SEED + epoch, drawn on the host.
    order = np.random.default_rng(SEED + epoch).permutation(len(dataset))
    global_batch = dataset[order[:batch_size]]  # the epoch's first batch of 16
    # One process: put the whole batch on the mesh. With several, each process passes its
    # own rows to jax.make_array_from_process_local_data instead.
    batch = jax.device_put(global_batch, NamedSharding(mesh, P("data")))
    held = [shard.data.tolist() for shard in batch.addressable_shards[:3]]
    print(f"epoch {epoch}: devices 0-2 hold examples {held}")
# --8<-- [end:sampler]

# %% accumulation
# --8<-- [start:accumulation]
MICRO_BATCHES = 4
rng = np.random.default_rng(1)
x = rng.normal(size=(256, 8)).astype(np.float32)
y = np.sin(x).sum(-1).astype(np.float32)
initial = {
    "w1": 0.3 * rng.normal(size=(8, 16)).astype(np.float32),
    "w2": 0.3 * rng.normal(size=16).astype(np.float32),
}


def loss(params, x, y):
    hidden = jnp.tanh(x @ params["w1"])
    return jnp.mean((hidden @ params["w2"] - y) ** 2)


# The batch of 256 as 4 micro-batches of 64, each of them split over the devices.
micro_sharded = NamedSharding(mesh, P(None, "data"))
xs, ys = jax.device_put(
    (x.reshape(MICRO_BATCHES, 64, 8), y.reshape(MICRO_BATCHES, 64)), micro_sharded
)
params = jax.device_put(initial, NamedSharding(mesh, P()))


@jax.jit
def scan_grad(params, xs, ys):
    """The mean gradient over the micro-batches, computed one micro-batch at a time."""

    def add(total, batch):
        grads = jax.grad(loss)(params, *batch)  # the batch is sharded: all-reduced here
        return jax.tree.map(jnp.add, total, grads), None

    total, _ = jax.lax.scan(add, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return jax.tree.map(lambda g: g / MICRO_BATCHES, total)


with jax.set_mesh(mesh):
    accumulated = scan_grad(params, xs, ys)
    batch = jax.device_put((x, y), NamedSharding(mesh, P("data")))
    large = jax.jit(jax.grad(loss))(params, *batch)
same = all(np.allclose(accumulated[k], large[k], atol=1e-6) for k in large)
print("4 micro-batches == one batch of 256:", same)
# --8<-- [end:accumulation]


# %% loop_collectives
# --8<-- [start:loop_collectives]
def where_all_reduces(jitted, *args):
    """Where the compiled function all-reduces: in a while loop's body, or outside it."""
    with jax.set_mesh(mesh):
        hlo = jitted.lower(*args).compile().as_text()
    bodies = set(re.findall(r"body=(%[\w.-]+)", hlo))
    inside = outside = 0
    for computation in hlo.split("\n\n"):  # one computation per block, its name first
        name = computation.strip().removeprefix("ENTRY ").split(" ")[0]
        count = len(re.findall(r"\ball-reduce(?:-start)?\(", computation))  # GPU: -start
        if name in bodies:
            inside += count
        else:
            outside += count
    if not bodies:
        return f"all-reduce per call: {outside}"
    # An op in the loop body appears once in the text and runs once per iteration.
    trips = " or ".join(re.findall(r'"known_trip_count":\{"n":"(\d+)"\}', hlo)) or "?"
    return f"all-reduce in the loop body: {inside} (the loop runs {trips} times), outside it: {outside}"


print("scan:", where_all_reduces(scan_grad, params, xs, ys))
# --8<-- [end:loop_collectives]


# %% no_sync
# --8<-- [start:no_sync]
def local_grad(params, xs, ys):
    """Inside shard_map: this device's rows of every micro-batch."""
    # Mark the replicated parameters as varying over "data": jax.grad then returns this
    # device's own gradient, instead of summing it over the devices at every micro-batch.
    params = jax.lax.pcast(params, "data", to="varying")

    def add(total, batch):
        grads = jax.grad(loss)(params, *batch)  # no communication
        return jax.tree.map(jnp.add, total, grads), None

    total, _ = jax.lax.scan(add, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    # The only collective, after the loop: average the devices' sums.
    return jax.tree.map(lambda g: jax.lax.pmean(g, "data") / MICRO_BATCHES, total)


no_sync_grad = jax.jit(
    jax.shard_map(
        local_grad, mesh=mesh, in_specs=(P(), P(None, "data"), P(None, "data")), out_specs=P()
    )
)
with jax.set_mesh(mesh):
    no_sync = no_sync_grad(params, xs, ys)
print("shard_map:", where_all_reduces(no_sync_grad, params, xs, ys))
difference = max(float(jnp.max(jnp.abs(no_sync[k] - accumulated[k]))) for k in no_sync)
print("shard_map == scan, largest difference below 1e-6:", difference < 1e-6)
# --8<-- [end:no_sync]

# %% multisteps
# --8<-- [start:multisteps]
# Optax does the bookkeeping: apply the update only every 4th call.
tx = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=MICRO_BATCHES)


@jax.jit(donate_argnames=("params", "opt_state"))
def micro_step(params, opt_state, x, y):
    grads = jax.grad(loss)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


params = jax.device_put(initial, NamedSharding(mesh, P()))
opt_state = tx.init(params)
changed = []
with jax.set_mesh(mesh):
    for micro in range(MICRO_BATCHES):
        params, opt_state = micro_step(params, opt_state, xs[micro], ys[micro])
        changed.append(jnp.any(params["w1"] != initial["w1"]))  # stays on the devices
for micro, flag in enumerate(jax.device_get(changed)):
    print(f"after micro-batch {micro}: parameters changed: {bool(flag)}")
print("MultiSteps:", where_all_reduces(micro_step, params, opt_state, xs[0], ys[0]))
sgd_step = {k: initial[k] - 0.1 * large[k] for k in initial}
same = all(np.allclose(params[k], sgd_step[k], atol=1e-6) for k in initial)
print("MultiSteps == one step on the large batch:", same)
# --8<-- [end:multisteps]
