"""Data parallelism across processes: the digits MLP on 2 processes x 4 devices.

The model, data and steps of the data-parallelism chapter's `mlp_data_parallel.py`, now
run by two processes that each drive 4 simulated CPU devices and load only their half of
every batch. Run it with the site's launcher:

    python -m jaxpar.launch --nproc 2 --devices-per-process 4 mlp_two_processes.py
"""

# jaxpar.launch: --nproc 2 --devices-per-process 4 --timeout 300

# --8<-- [start:start]
import jax

from jaxpar import initialize_distributed

initialize_distributed()  # before anything touches a device
# --8<-- [end:start]

# %% setup
# --8<-- [start:setup]
import tempfile
from pathlib import Path

import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from sklearn.datasets import load_digits

process, processes = jax.process_index(), jax.process_count()


def print0(*args):
    """Print once, from process 0, instead of once per process."""
    if process == 0:
        print(*args)


print0(
    f"{processes} processes, {jax.device_count()} devices, {jax.local_device_count()} per process"
)
print0("devices of process 0:", jax.local_devices())
# --8<-- [end:setup]

# %% data
# --8<-- [start:data]
digits = load_digits()
order = np.random.default_rng(0).permutation(len(digits.target))
images = (digits.data[order] / 16.0).astype(np.float32)
labels = digits.target[order].astype(np.int32)
x_train, y_train = images[:1536], labels[:1536]
x_test, y_test = images[1536:], labels[1536:]
BATCH, STEPS = 256, 40
LOCAL_BATCH = BATCH // processes  # each process loads only its share


def get_local_batch(step):
    """This process's rows of the step-th global batch of 256."""
    start = (step * BATCH) % len(x_train) + process * LOCAL_BATCH
    return x_train[start : start + LOCAL_BATCH], y_train[start : start + LOCAL_BATCH]


# --8<-- [end:data]


# %% model
class MLP(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.hidden = nnx.Linear(64, 128, rngs=rngs)
        self.out = nnx.Linear(128, 10, rngs=rngs)

    def __call__(self, x):
        return self.out(jax.nn.relu(self.hidden(x)))


graphdef, initial_params = nnx.split(MLP(nnx.Rngs(0)))
tx = optax.sgd(learning_rate=0.1, momentum=0.9)


def loss_fn(params, x, y):
    logits = nnx.merge(graphdef, params)(x)
    return -(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10)).sum(-1).mean()


@jax.jit
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


# %% train
# --8<-- [start:train]
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
replicated = NamedSharding(mesh, P())
batch_sharded = NamedSharding(mesh, P("data"))

params = jax.device_put(initial_params, replicated)  # every process passes the same values
opt_state = jax.device_put(tx.init(initial_params), replicated)
for step in range(STEPS):
    x_local, y_local = get_local_batch(step)
    # Assemble the global (256, 64) batch from each process's (128, 64) share.
    x = jax.make_array_from_process_local_data(batch_sharded, x_local)
    y = jax.make_array_from_process_local_data(batch_sharded, y_local)
    params, opt_state, loss = train_step(params, opt_state, x, y)
print0("global batch:", jax.typeof(x), "local share:", x_local.shape)
print0(f"loss after {STEPS} steps: {loss:.4f}")
# --8<-- [end:train]

# %% result
# --8<-- [start:result]
# The parameters are replicated: this process's first shard is the whole value.
local = jax.tree.map(lambda a: np.asarray(a.addressable_shards[0].data), params)
logits = nnx.merge(graphdef, local)(x_test)
print0(f"test accuracy {float((logits.argmax(-1) == y_test).mean()):.4f}")
print0(f"parameter fingerprint {sum(float(np.abs(a).sum()) for a in jax.tree.leaves(local)):.4f}")

if process == 0:  # save once, not once per process
    folder = Path(tempfile.mkdtemp())
    np.savez(folder / "params.npz", *jax.tree.leaves(local))
    print("saved", len(np.load(folder / "params.npz").files), "arrays from process 0")
# --8<-- [end:result]
