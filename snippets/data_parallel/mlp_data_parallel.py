"""Data-parallel training of a Flax NNX MLP, four ways, reaching the same parameters.

The same model (a two-layer MLP on scikit-learn's 8x8 digits), the same optimizer
(Optax SGD with momentum) and the same 40 steps of 256 examples, trained on one device,
with `jax.pmap`, with `jax.jit` and a batch sharded by `NamedSharding` (under
`jax.set_mesh`), and with `jax.shard_map`. It also shows the error that the jit step
raises outside `jax.set_mesh`, the temporary memory a one_hot loss costs on XLA:CPU, the
loss over logits split along the vocabulary (where integer labels fail and one_hot
works), a contraction
that needs `out_sharding=` even under the mesh, the naive shard_map port whose gradients
are 8x too large, and the all-reduce that XLA inserts into the jit version. It uses all
`jax.device_count()` devices: 8 simulated CPU devices here, or the machine's accelerators
(1, 2, 4 or 8 of them split the batch of 256 evenly).
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import collections
import functools
import re
import textwrap

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


# An NNX module is a pytree: it could go into jax.jit or shard_map as it is. Splitting it
# into its structure and its parameters is optional; here it makes every training step a
# function of plain arrays, the same for pmap, jit and shard_map. The parameters are
# fetched to the host once: each run below puts its own copy on the devices, because its
# steps donate (reuse the memory of) the parameters they replace.
graphdef, initial_params = nnx.split(MLP(nnx.Rngs(0)))
initial_params = jax.device_get(initial_params)
tx = optax.sgd(learning_rate=0.1, momentum=0.9)


def loss_fn(params, x, y):
    logits = nnx.merge(graphdef, params)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def apply_gradients(params, opt_state, grads):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


# --8<-- [end:model]


@jax.jit
def accuracy(params, x, y):  # the test set as arguments: closed over, it would be a constant
    logits = nnx.merge(graphdef, params)(x)
    return (logits.argmax(-1) == y).mean()


# %% reference
# --8<-- [start:reference]
# Donated arguments are deleted by the call: their memory holds the new values.
@jax.jit(donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params, opt_state = apply_gradients(params, opt_state, grads)
    return params, opt_state, loss


params = jax.device_put(initial_params)
opt_state = tx.init(params)
for step in range(STEPS):
    params, opt_state, loss = train_step(params, opt_state, *get_batch(step))
reference = params
# --8<-- [end:reference]
print(f"one device: loss {loss:.4f}, test accuracy {accuracy(reference, x_test, y_test):.4f}")

# %% donation
# --8<-- [start:donation]
before = jax.device_put(initial_params)  # from the host: a new copy on the device
after, _, _ = train_step(before, tx.init(before), *get_batch(0))
print("donated arrays deleted:", all(a.is_deleted() for a in jax.tree.leaves(before)))
# From the device instead, jax.device_put returns the array itself: no copy to donate.
leaf = jax.tree.leaves(after)[0]
print("jax.device_put(leaf) is leaf:", jax.device_put(leaf) is leaf)
# --8<-- [end:donation]


# %% pmap_step
# --8<-- [start:pmap_step]
@functools.partial(jax.pmap, axis_name="data", donate_argnums=(0, 1))
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
    """One copy per device, stacked on the host: a new leading axis of size n_devices."""
    return jax.tree.map(lambda a: np.stack([a] * n_devices), tree)


def split(batch):
    """(256, ...) -> (8, 32, ...): one micro-batch per device."""
    return jax.tree.map(lambda a: a.reshape(n_devices, -1, *a.shape[1:]), batch)


params, opt_state = replicate(initial_params), replicate(tx.init(initial_params))
losses = []
for step in range(STEPS):
    params, opt_state, loss = pmap_train_step(params, opt_state, *split(get_batch(step)))
    losses.append(loss)  # stays on the devices: no wait for the step to finish
for step, loss in enumerate(jax.device_get(losses)):  # fetched after the loop, one wait
    if step % 20 == 0 or step == STEPS - 1:
        print(f"step {step:3d}  loss {loss[0]:.4f}")
# --8<-- [end:pmap_train]

# %% pmap_params
# --8<-- [start:pmap_params]
# Every device holds the same parameters: take device 0's copy, without a gather.
pmap_params = jax.tree.map(lambda a: a.addressable_shards[0].data[0], params)
print("kernel on device 0:", pmap_params["hidden"]["kernel"][...].shape)
print(f"pmap: test accuracy {accuracy(pmap_params, x_test, y_test):.4f}")
# --8<-- [end:pmap_params]


# %% jit_train
# --8<-- [start:jit_train]
def prefetch(batches, sharding, depth=2):
    """Put each batch on the devices `depth - 1` steps ahead: copying the next batch
    overlaps with the step that runs (Grain's data loaders can do this for you)."""
    queue = collections.deque()
    for batch in batches:
        queue.append(jax.device_put(batch, sharding))
        if len(queue) == depth:
            yield queue.popleft()
    yield from queue


mesh = jax.make_mesh((n_devices,), ("data",), axis_types=(AxisType.Explicit,))
replicated = NamedSharding(mesh, P())
batch_sharded = NamedSharding(mesh, P("data"))

params = jax.device_put(initial_params, replicated)
opt_state = jax.device_put(tx.init(initial_params), replicated)
with jax.set_mesh(mesh):  # jitted code on an Explicit mesh runs under the mesh
    for x, y in prefetch(map(get_batch, range(STEPS)), batch_sharded):
        # The same train_step as on one device: only where the data lives has changed.
        params, opt_state, loss = train_step(params, opt_state, x, y)
jit_params = params
# --8<-- [end:jit_train]
print(
    f"jit + NamedSharding: loss {loss:.4f}, test accuracy {accuracy(jit_params, x_test, y_test):.4f}"
)
# A single number to compare runs by (the multi-process chapter prints the same).
print(
    f"parameter fingerprint {sum(float(jnp.abs(a).sum()) for a in jax.tree.leaves(jit_params)):.4f}"
)

# %% no_set_mesh
# --8<-- [start:no_set_mesh]
# The same call outside `jax.set_mesh`: the backward pass of the integer-label loss
# (a scatter into the sharded batch) has no mesh to resolve its sharding with.
fresh_state = jax.device_put((initial_params, tx.init(initial_params)), replicated)
try:
    train_step(*fresh_state, x, y)
except Exception as error:
    first_line = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    print(textwrap.fill(first_line, 88, subsequent_indent="  "))
# --8<-- [end:no_set_mesh]

# %% one_hot_cost
# --8<-- [start:one_hot_cost]
# What one_hot would cost a language model: compile the loss and its gradient for logits
# of a batch of 256 over a vocabulary of 32,768 (32 MiB of float32) and read the
# temporary memory XLA plans for it.
VOCABULARY = 32_768
logits_type = jax.ShapeDtypeStruct((256, VOCABULARY), jnp.float32)
labels_type = jax.ShapeDtypeStruct((256,), jnp.int32)


def integer_labels(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def one_hot_labels(logits, labels):
    one_hot = jax.nn.one_hot(labels, logits.shape[-1])
    return optax.softmax_cross_entropy(logits, one_hot).mean()


backend = f"XLA:{jax.default_backend().upper()}"  # where this is compiled
for cross_entropy in (integer_labels, one_hot_labels):
    with_gradient = jax.jit(jax.value_and_grad(cross_entropy))
    memory = with_gradient.lower(logits_type, labels_type).compile().memory_analysis()
    temporaries = memory.temp_size_in_bytes / 2**20
    print(f"{cross_entropy.__name__}: {temporaries:.0f} MiB of temporaries ({backend})")
# --8<-- [end:one_hot_cost]

# %% vocabulary_sharded
# --8<-- [start:vocabulary_sharded]
# Logits split along the vocabulary, as a tensor-parallel output layer leaves them: the
# batch along "data", the vocabulary along "model" (2 x 4 on 8 devices).
model_size = 4 if n_devices % 4 == 0 else 1
grid = jax.make_mesh(
    (n_devices // model_size, model_size), ("data", "model"), axis_types=(AxisType.Explicit,) * 2
)
rng = np.random.default_rng(1)
host_logits = rng.normal(size=(16, 1024)).astype(np.float32)
host_labels = rng.integers(0, 1024, size=16).astype(np.int32)
print(f"one device, integer labels: loss {integer_labels(host_logits, host_labels):.4f}")
logits = jax.device_put(host_logits, NamedSharding(grid, P("data", "model")))
targets = jax.device_put(host_labels, NamedSharding(grid, P("data")))
with jax.set_mesh(grid):  # under the mesh, and still:
    for cross_entropy in (integer_labels, one_hot_labels):
        with_gradient = jax.jit(jax.value_and_grad(cross_entropy))
        try:
            loss, gradient = with_gradient(logits, targets)
        except Exception as error:
            first_line = f"{cross_entropy.__name__}: {type(error).__name__}: {error}"
            print(textwrap.fill(first_line.splitlines()[0], 88, subsequent_indent="  "))
            continue
        print(f"{cross_entropy.__name__}: loss {loss:.4f}, gradient {jax.typeof(gradient)}")
        hlo = with_gradient.lower(logits, targets).compile().as_text()
        for operands, groups in re.findall(
            r"= (.*) all-reduce(?:-start)?\(.*replica_groups=mesh\[[^]]*\] \{'(\w+)'\}", hlo
        ):
            print(
                f"  all-reduce over {groups!r} of",
                re.sub(r"\{[\d,]*\}", "", operands),
                f"({backend})",
            )
        print("  all-gather ops:", len(re.findall(r" all-gather(?:-start)?\(", hlo)))
# --8<-- [end:vocabulary_sharded]

# %% out_sharding
# --8<-- [start:out_sharding]
# A contraction over a dimension sharded on both sides: each device holds a partial sum,
# and the result could be summed onto every device or split among them. Under the mesh
# this is still ambiguous; out_sharding says which.
lhs = jax.device_put(np.ones((8, 16), np.float32), NamedSharding(mesh, P(None, "data")))
rhs = jax.device_put(np.ones((16, 4), np.float32), NamedSharding(mesh, P("data", None)))
matmul = jax.jit(jnp.matmul, static_argnames="out_sharding")
with jax.set_mesh(mesh):
    try:
        matmul(lhs, rhs)
    except Exception as error:
        print(textwrap.fill(f"{type(error).__name__}: {str(error).splitlines()[0]}", 88))
    for spec in (P(), P("data")):  # summed onto every device, or split by rows
        print(f"out_sharding={spec}:", jax.typeof(matmul(lhs, rhs, out_sharding=spec)))
# --8<-- [end:out_sharding]

# %% hlo
# --8<-- [start:hlo]
with jax.set_mesh(mesh):
    compiled = train_step.lower(params, opt_state, x, y).compile()
# GPU and TPU emit the asynchronous form, all-reduce-start: count both names.
all_reduces = re.findall(r"= (.*) all-reduce(?:-start)?\(", compiled.as_text())
backend = f"XLA:{jax.default_backend().upper()}"  # where this was compiled
print(f"all-reduce ops in the compiled step ({backend}):", len(all_reduces))
for result in all_reduces:
    print("  all-reduce of", re.sub(r"\{[\d,]*\}", "", result))
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


@jax.jit(donate_argnames=("params", "opt_state"))
def shard_map_train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(global_loss)(params, x, y)
    params, opt_state = apply_gradients(params, opt_state, grads)
    return params, opt_state, loss


params = jax.device_put(initial_params, replicated)
opt_state = jax.device_put(tx.init(initial_params), replicated)
with jax.set_mesh(mesh):
    for x, y in prefetch(map(get_batch, range(STEPS)), batch_sharded):
        params, opt_state, loss = shard_map_train_step(params, opt_state, x, y)
shard_map_params = params
# --8<-- [end:shard_map_train]
print(f"shard_map: loss {loss:.4f}, test accuracy {accuracy(shard_map_params, x_test, y_test):.4f}")


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
right = jax.jit(jax.grad(loss_fn))(initial_params, x, y)
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
