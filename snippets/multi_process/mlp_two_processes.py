"""Data parallelism across processes: the digits MLP on 2 processes x 4 devices.

The model, data and steps of the data-parallelism chapter's `mlp_data_parallel.py`, now
run by two processes that each drive 4 simulated CPU devices and load only their half of
every batch. It ends with what indexing and fetching a global array do when no process
holds all of it. Run it with the site's launcher:

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


# Every process creates the same initial values (the same seed), on the host.
graphdef, initial_params = nnx.split(MLP(nnx.Rngs(0)))
initial_params = jax.device_get(initial_params)
tx = optax.sgd(learning_rate=0.1, momentum=0.9)


def loss_fn(params, x, y):
    logits = nnx.merge(graphdef, params)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


# Donated arguments are deleted by the call: their memory holds the new values.
@jax.jit(donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


@jax.jit
def accuracy(params):
    logits = nnx.merge(graphdef, params)(x_test)
    return (logits.argmax(-1) == y_test).mean()


# %% train
# --8<-- [start:train]
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
replicated = NamedSharding(mesh, P())
batch_sharded = NamedSharding(mesh, P("data"))

params = jax.device_put(initial_params, replicated)  # every process passes the same values
opt_state = jax.device_put(tx.init(initial_params), replicated)
with jax.set_mesh(mesh):  # jitted code on an Explicit mesh runs under the mesh
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
# Every process runs the jitted evaluation: it is a computation on global arrays.
test_accuracy = accuracy(params)
# The parameters are replicated: each process holds all of them and can fetch them.
host_params = jax.device_get(params)
fingerprint = sum(float(np.abs(a).sum()) for a in jax.tree.leaves(host_params))
print0(f"test accuracy {test_accuracy:.4f}")
print0(f"parameter fingerprint {fingerprint:.4f}")

# Replicated state written with NumPy: process 0 holds all of it, so it alone writes.
# Sharded state (the next chapter's FSDP) is saved by every process, each its own shards,
# with a library that coordinates them (Orbax).
if process == 0:
    folder = Path(tempfile.mkdtemp())
    np.savez(folder / "params.npz", *jax.tree.leaves(host_params))
    print("saved", len(np.load(folder / "params.npz").files), "arrays from process 0")
# --8<-- [end:result]


# %% indexing
# --8<-- [start:indexing]
import re
import textwrap

from jax.experimental import multihost_utils


def first_line(error):
    line = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    return textwrap.fill(line, 88, initial_indent="  ", subsequent_indent="    ")


# A pmap output is a per-process array: out[0] reads this process's first device.
out = jax.pmap(lambda v: v * 10)(np.arange(4.0, dtype=np.float32) + 4 * process)
print0("pmap output fully addressable:", out.is_fully_addressable)
print0("out[0] in each process:", multihost_utils.process_allgather(out[0]))

# On Auto axes, x[0] of a global array works: a collective that every process must run.
auto_mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
auto_x = jax.device_put(x, NamedSharding(auto_mesh, P("data")))
first_row = auto_x[0]  # in every process, never under `if process == 0`
hlo = jax.jit(lambda a: a[0]).lower(auto_x).compile().as_text()
print0("Auto axes, x[0]:", first_row.shape, "replicated:", first_row.is_fully_replicated)
collectives = re.findall(r"\b(all-reduce|all-gather|all-to-all)(?:-start)?\(", hlo)
print0("  its compiled collectives (XLA:CPU):", sorted(set(collectives)))

# On Explicit axes, x[0] raises, as it does in a single process.
try:
    x[0]
except Exception as error:
    print0("Explicit axes, x[0]:\n" + first_line(error))
with jax.set_mesh(mesh):
    # What the error suggests still fails, inside jax.jit, on a sharded dimension.
    try:
        jax.jit(lambda a: a.at[0].get(out_sharding=P()))(x)
    except Exception as error:
        print0("x.at[0].get(out_sharding=P()) in jax.jit:\n" + first_line(error))
    # A collective read through Auto axes, which every process must run.
    row = jax.sharding.auto_axes(lambda a: a[0], out_sharding=P())(x)
print0("auto_axes(lambda a: a[0], out_sharding=P())(x):", jax.typeof(row))
# A local read of this process's first shard: no communication.
print0("x.addressable_shards[0].data[0]:", jax.typeof(x.addressable_shards[0].data[0]))

# Fetching a global array that is not replicated: no process holds all of it.
try:
    np.asarray(x)
except Exception as error:
    print0("np.asarray(x):\n" + first_line(error))
# Gathered into every process instead (a collective too), it can be fetched.
print0("process_allgather(x, tiled=True):", multihost_utils.process_allgather(x, tiled=True).shape)
# --8<-- [end:indexing]
