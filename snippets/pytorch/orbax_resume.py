"""Saving and resuming in JAX, the twin of `dcp_resume.py`: the sharded parameters and AdamW state through Orbax, stopped after 4 steps and resumed.

The digits MLP trains 4 steps from `same_start.py`'s weights, fully sharded over a mesh
axis `"data"`; Orbax's `StandardCheckpointer` saves the parameters and AdamW's state,
each device's shards written once, into a new temporary folder. A new start then restores them
into the same shardings (an abstract target of shapes, types and shardings, as
`dcp.load` fills a state dict in place) and trains the last 4 steps. It prints the 8
losses, which must equal `dcp_resume.py`'s.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# numbers within 5e-6 in cell resume: XLA:CPU picks its float32 matmul kernels by CPU, and the last digit of a loss can move (1e-6 seen)

# %% setup
import tempfile
from pathlib import Path

import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, flax_mlp

CHECKPOINT = Path(tempfile.mkdtemp(prefix="digits-orbax-")) / "state"  # a new folder each run
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
graphdef, initial = nnx.split(flax_mlp())
initial = jax.device_get(initial)
optimizer = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)
FSDP = nnx.State({"hidden": {"kernel": P(None, "data"), "bias": P("data")},
                  "out": {"kernel": P("data", None), "bias": P()}})  # fmt: skip


def loss_fn(params, images, labels):
    logits = nnx.merge(graphdef, params)(images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@jax.jit(donate_argnames=("state",))
def train_step(state, images, labels):
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], images, labels)
    updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
    return {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}, loss


def sharded_start() -> dict:
    params = jax.device_put(initial, FSDP)
    return {"params": params, "opt_state": optimizer.init(params)}


def train(state: dict, steps: range) -> tuple[dict, list[jax.Array]]:
    losses = []
    for step in steps:
        state, loss = train_step(state, *jax.device_put(batch(step), P("data")))
        losses.append(loss)
    return state, losses


# %% save
# --8<-- [start:save]
checkpointer = ocp.StandardCheckpointer()
with jax.set_mesh(mesh):
    state, losses = train(sharded_start(), range(0, STEPS // 2))
    checkpointer.save(CHECKPOINT, state)  # every process calls it; each shard written once
    checkpointer.wait_until_finished()
    del state  # as if the job had ended here
# --8<-- [end:save]

# %% resume
# --8<-- [start:resume]
with jax.set_mesh(mesh):
    target = jax.tree.map(  # shapes, types and shardings: the state to fill, no values
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), sharded_start()
    )
    state = checkpointer.restore(CHECKPOINT, target)  # each device reads its own shards
    state, more = train(state, range(STEPS // 2, STEPS))
print("losses:", " ".join(f"{loss:.6f}" for loss in jax.device_get(losses + more)))
# --8<-- [end:resume]
