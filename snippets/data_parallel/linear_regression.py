"""Data parallelism, a first example: linear regression on every device there is.

The classic `jax.pmap` example of the JAX documentation, on today's JAX: fit
y = 2x - 1 + noise with parameters replicated on every device and the batch split
across them, averaging gradients with `jax.lax.pmean`. Then the same training with
`jax.jit` and a batch sharded by `NamedSharding`, and a check that both ways reach
the same parameters. It uses all `jax.device_count()` devices: 8 simulated CPU devices
here, or the machine's accelerators (any count that divides 128, such as 1, 2, 4, 8 or 16).
"""

# --8<-- [start:devices]
import jax

jax.config.update("jax_num_cpu_devices", 8)
# --8<-- [end:devices]

# %% setup
import functools

import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

n_devices = jax.device_count()
print(f"{n_devices} devices: {jax.devices()}")

# %% data
# --8<-- [start:data]
rng = np.random.default_rng(0)
true_w, true_b = 2.0, -1.0
xs = rng.normal(size=(128, 1)).astype(np.float32)
noise = 0.5 * rng.normal(size=(128, 1)).astype(np.float32)
ys = xs * true_w + true_b + noise
# --8<-- [end:data]
print(f"xs: {xs.shape}, ys: {ys.shape}")

# %% model
# --8<-- [start:model]
LEARNING_RATE = 0.005


def init_params():
    # Host (NumPy) values: each way of training places them on the devices itself.
    return {"w": np.zeros((), np.float32), "b": np.zeros((), np.float32)}


def loss_fn(params, xs, ys):
    pred = params["w"] * xs + params["b"]
    return jnp.mean((pred - ys) ** 2)


# --8<-- [end:model]


# %% pmap_update
# --8<-- [start:pmap_update]
@functools.partial(jax.pmap, axis_name="devices", donate_argnums=0)
def pmap_update(params, xs, ys):
    # Runs once per device, on that device's slice of the batch.
    loss, grads = jax.value_and_grad(loss_fn)(params, xs, ys)
    # Average across devices: the all-reduce of PyTorch DDP.
    grads = jax.lax.pmean(grads, axis_name="devices")
    loss = jax.lax.pmean(loss, axis_name="devices")
    new_params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return new_params, loss


# --8<-- [end:pmap_update]


# %% pmap_inputs
# --8<-- [start:pmap_inputs]
# One copy of the parameters per device: a leading axis of size n_devices, stacked
# on the host with NumPy (jnp.stack would first build all the copies on one device).
replicated = jax.tree.map(lambda x: np.stack([x] * n_devices), init_params())
# Split the batch of 128 into n_devices per-device batches (8 of 16 points here).
x_split = xs.reshape(n_devices, -1, *xs.shape[1:])
y_split = ys.reshape(n_devices, -1, *ys.shape[1:])
# --8<-- [end:pmap_inputs]
print("replicated w:", replicated["w"].shape, "x_split:", x_split.shape)

# %% pmap_train
# --8<-- [start:pmap_train]
losses = []  # kept on the devices: no copy to the host inside the loop
for _ in range(1000):
    replicated, loss = pmap_update(replicated, x_split, y_split)
    losses.append(loss)
# Fetched once, at the end; every device holds the same mean loss, so take the first.
for step, per_device in enumerate(jax.device_get(losses)):
    if step % 100 == 0:
        print(f"step {step:4d}  loss {per_device[0]:.4f}")
# --8<-- [end:pmap_train]

# %% pmap_result
# --8<-- [start:pmap_result]
w = replicated["w"]
print(isinstance(w, jax.Array), w.shape, w.sharding.spec)
# Every device holds the same values; read one device's copy without a gather.
pmap_params = jax.tree.map(lambda x: x.addressable_shards[0].data[0], replicated)
print(f"pmap: w = {pmap_params['w']:.4f}, b = {pmap_params['b']:.4f}")
# --8<-- [end:pmap_result]

# %% jit_inputs
# --8<-- [start:jit_inputs]
mesh = jax.make_mesh((n_devices,), ("data",), axis_types=(AxisType.Explicit,))
batch_sharding = NamedSharding(mesh, P("data"))  # rows split across devices
replicated_sharding = NamedSharding(mesh, P())  # a full copy on every device

params = jax.device_put(init_params(), replicated_sharding)
x_sharded = jax.device_put(xs, batch_sharding)
y_sharded = jax.device_put(ys, batch_sharding)
# --8<-- [end:jit_inputs]
print("x_sharded:", jax.typeof(x_sharded))


# %% jit_update
# --8<-- [start:jit_update]
@jax.jit(donate_argnames="params")  # the old parameters' buffers hold the new ones
def jit_update(params, xs, ys):
    # Written for the whole batch; XLA inserts the all-reduce of the gradients.
    loss, grads = jax.value_and_grad(loss_fn)(params, xs, ys)
    new_params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return new_params, loss


losses = []
with jax.set_mesh(mesh):  # explicit-mode code runs under its mesh
    for _ in range(1000):
        params, loss = jit_update(params, x_sharded, y_sharded)
        losses.append(loss)
for step, loss in enumerate(jax.device_get(losses)):
    if step % 100 == 0:
        print(f"step {step:4d}  loss {loss:.4f}")
# --8<-- [end:jit_update]

# %% compare
# --8<-- [start:compare]
print(f"jit:  w = {params['w']:.4f}, b = {params['b']:.4f}")
same = all(np.allclose(pmap_params[k], params[k], rtol=1e-5, atol=1e-6) for k in params)
print("pmap and jit reach the same parameters:", same)
# --8<-- [end:compare]

# %% pmap_donation
# --8<-- [start:pmap_donation]
# donate_argnums=0: pmap_update deletes the parameters it is given; their buffers now
# hold the new ones.
stack = jax.tree.map(lambda x: np.stack([x] * n_devices), init_params())
on_devices, _ = pmap_update(stack, x_split, y_split)  # NumPy arguments: nothing to donate
updated, _ = pmap_update(on_devices, x_split, y_split)
print("parameters passed in deleted:", all(a.is_deleted() for a in jax.tree.leaves(on_devices)))
# --8<-- [end:pmap_donation]
