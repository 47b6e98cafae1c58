"""Data-parallel training of a Flax NNX MLP, four ways, reaching the same parameters.

The same model (a two-layer MLP on scikit-learn's 8x8 digits), the same optimizer
(Optax SGD with momentum) and the same 40 steps of 256 examples, trained on one device,
with `jax.pmap`, with `jax.jit` and a batch sharded by `NamedSharding`, and with
`jax.shard_map`. It also shows the naive shard_map port whose gradients are 8x too large,
and the all-reduce that XLA inserts into the jit version.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import functools

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from sklearn.datasets import load_digits

n_devices = jax.device_count()
print("devices:", n_devices)

# %% data
# --8<-- [start:data]
digits = load_digits()
order = np.random.default_rng(0).permutation(len(digits.target))
images = (digits.data[order] / 16.0).astype(np.float32)  # (1797, 64), pixels in [0, 1]
labels = digits.target[order].astype(np.int32)
x_train, y_train = images[:1536], labels[:1536]
x_test, y_test = images[1536:], labels[1536:]

BATCH, STEPS = 256, 40


def get_batch(step):
    """The step-th global batch of 256 examples, the same for every method."""
    start = (step * BATCH) % len(x_train)
    return x_train[start : start + BATCH], y_train[start : start + BATCH]


# --8<-- [end:data]


print(f"train {x_train.shape}, test {x_test.shape}, batch {BATCH}")


# %% model
# --8<-- [start:model]
class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(64, 128, rngs=rngs)
        self.out = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x):
        return self.out(jax.nn.relu(self.hidden(x)))


# Split the module into its structure and its parameters (a pytree of arrays), so that
# the training step is a pure function of the parameters: what pmap and shard_map need.
graphdef, initial_params = nnx.split(MLP(nnx.Rngs(0)))
tx = optax.sgd(learning_rate=0.1, momentum=0.9)


def loss_fn(params, x, y):
    logits = nnx.merge(graphdef, params)(x)
    return -(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10)).sum(-1).mean()


def apply_gradients(params, opt_state, grads):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


# --8<-- [end:model]


def accuracy(params):
    logits = nnx.merge(graphdef, params)(x_test)
    return float((logits.argmax(-1) == y_test).mean())


# %% reference
# --8<-- [start:reference]
@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params, opt_state = apply_gradients(params, opt_state, grads)
    return params, opt_state, loss


params, opt_state = initial_params, tx.init(initial_params)
for step in range(STEPS):
    params, opt_state, loss = train_step(params, opt_state, *get_batch(step))
reference = params
# --8<-- [end:reference]
print(f"one device: loss {loss:.4f}, test accuracy {accuracy(reference):.4f}")


# %% pmap_step
# --8<-- [start:pmap_step]
@functools.partial(jax.pmap, axis_name="data")
def pmap_train_step(params, opt_state, x, y):
    # Each device: its 32 examples -> its own loss and gradients.
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    # Average over the 8 devices, so every device applies the same update.
    grads = jax.lax.pmean(grads, axis_name="data")
    loss = jax.lax.pmean(loss, axis_name="data")
    params, opt_state = apply_gradients(params, opt_state, grads)
    return params, opt_state, loss


# --8<-- [end:pmap_step]


# %% pmap_train
# --8<-- [start:pmap_train]
def replicate(tree):
    """One copy per device: a new leading axis of size n_devices."""
    return jax.tree.map(lambda a: jnp.stack([a] * n_devices), tree)


def split(batch):
    """(256, ...) -> (8, 32, ...): one micro-batch per device."""
    return jax.tree.map(lambda a: a.reshape(n_devices, -1, *a.shape[1:]), batch)


params, opt_state = replicate(initial_params), replicate(tx.init(initial_params))
for step in range(STEPS):
    params, opt_state, loss = pmap_train_step(params, opt_state, *split(get_batch(step)))
    if step % 20 == 0 or step == STEPS - 1:
        print(f"step {step:3d}  loss {loss[0]:.4f}")
# --8<-- [end:pmap_train]

# %% pmap_params
# --8<-- [start:pmap_params]
# Every device holds the same parameters: take device 0's copy, without a gather.
pmap_params = jax.tree.map(lambda a: a.addressable_shards[0].data[0], params)
print("kernel on device 0:", pmap_params["hidden"]["kernel"][...].shape)
print(f"pmap: test accuracy {accuracy(pmap_params):.4f}")
# --8<-- [end:pmap_params]

# %% jit_train
# --8<-- [start:jit_train]
mesh = jax.make_mesh((n_devices,), ("data",), axis_types=(AxisType.Explicit,))
replicated = NamedSharding(mesh, P())
batch_sharded = NamedSharding(mesh, P("data"))

params = jax.device_put(initial_params, replicated)
opt_state = jax.device_put(tx.init(initial_params), replicated)
for step in range(STEPS):
    x, y = jax.device_put(get_batch(step), batch_sharded)
    # The same train_step as on one device: only where the data lives has changed.
    params, opt_state, loss = train_step(params, opt_state, x, y)
jit_params = params
# --8<-- [end:jit_train]
print(f"jit + NamedSharding: loss {loss:.4f}, test accuracy {accuracy(jit_params):.4f}")
# A single number to compare runs by (the multi-process chapter prints the same).
print(
    f"parameter fingerprint {sum(float(jnp.abs(a).sum()) for a in jax.tree.leaves(jit_params)):.4f}"
)

# %% hlo
# --8<-- [start:hlo]
compiled = train_step.lower(params, opt_state, x, y).compile()
all_reduces = [line for line in compiled.as_text().splitlines() if " all-reduce(" in line]
print("all-reduce ops in the compiled step:", len(all_reduces))
for line in all_reduces:
    result = line.split(" = ")[1].split(" all-reduce(")[0]
    print("  all-reduce of", result.replace("{0}", "").replace("{1,0}", ""))
# --8<-- [end:hlo]


# %% shard_map_train
# --8<-- [start:shard_map_train]
def per_device_loss(params, x, y):
    # Inside shard_map: x and y are this device's 32 examples. Average the loss over
    # devices here, and differentiate *outside*: JAX derives the all-reduce itself.
    return jax.lax.pmean(loss_fn(params, x, y), axis_name="data")


global_loss = jax.shard_map(
    per_device_loss, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P()
)


@jax.jit
def shard_map_train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(global_loss)(params, x, y)
    params, opt_state = apply_gradients(params, opt_state, grads)
    return params, opt_state, loss


params = jax.device_put(initial_params, replicated)
opt_state = jax.device_put(tx.init(initial_params), replicated)
for step in range(STEPS):
    x, y = jax.device_put(get_batch(step), batch_sharded)
    params, opt_state, loss = shard_map_train_step(params, opt_state, x, y)
shard_map_params = params
# --8<-- [end:shard_map_train]
print(f"shard_map: loss {loss:.4f}, test accuracy {accuracy(shard_map_params):.4f}")


# %% naive
# --8<-- [start:naive]
def naive_grads(params, x, y):
    # The literal port of the pmap step: gradients inside, then pmean them.
    grads = jax.grad(loss_fn)(params, x, y)
    return jax.lax.pmean(grads, axis_name="data")


naive = jax.jit(
    jax.shard_map(naive_grads, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P())
)
x, y = get_batch(0)
wrong = naive(jax.device_put(initial_params, replicated), *jax.device_put((x, y), batch_sharded))
right = jax.grad(loss_fn)(initial_params, x, y)
for name in ("hidden", "out"):
    ratio = jnp.linalg.norm(wrong[name]["kernel"][...]) / jnp.linalg.norm(
        right[name]["kernel"][...]
    )
    print(f"{name} kernel: naive gradient is {ratio:.2f}x the true gradient")
# --8<-- [end:naive]


# %% compare
# --8<-- [start:compare]
def max_relative_difference(a, b):
    return max(
        float(jnp.max(jnp.abs(u - v)) / jnp.max(jnp.abs(u)))
        for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


for name, trained in [("pmap", pmap_params), ("jit", jit_params), ("shard_map", shard_map_params)]:
    difference = max_relative_difference(reference, trained)
    print(f"{name:9s} vs one device: max relative difference < 1e-5: {difference < 1e-5}")
# --8<-- [end:compare]
