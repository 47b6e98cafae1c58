"""Data parallelism in JAX, the twin of `ddp.py`, its all-reduce counted by jaxpar.

One process drives every device (8 simulated CPU devices here): the parameters are
replicated, each global batch is sharded along a mesh axis `"data"`, and `jax.jit` compiles
one training step for all the devices, the gradient all-reduce included. The model,
weights, batches and AdamW's settings come from `same_start.py`, as in `ddp.py`. The step
accumulates the gradients of two micro-batches, as `ddp.py` does with `no_sync()`. It
prints the loss of every step, which must equal `ddp.py`'s, and what the compiled step
all-reduces on XLA:CPU.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# numbers within 5e-6 in cell train: XLA:CPU picks its float32 matmul kernels by CPU, and the last digit of a loss can move (1e-6 seen)

# %% setup
import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import jaxpar

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, flax_mlp

MICRO_BATCHES = 2
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))


# %% train
# --8<-- [start:train]
graphdef, params = nnx.split(flax_mlp())
optimizer = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)


def loss_fn(params, images, labels):
    logits = nnx.merge(graphdef, params)(images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@jax.jit(donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, images, labels):
    grads = jax.tree.map(jnp.zeros_like, params)
    loss = 0.0
    # Micro-batch m: rows m, m + 2, m + 4, ... of the global batch, so that every device
    # keeps its own rows. Gradients are values: accumulating them is a sum.
    for micro in range(MICRO_BATCHES):
        x, y = images[micro::MICRO_BATCHES], labels[micro::MICRO_BATCHES]
        micro_loss, micro_grads = jax.value_and_grad(loss_fn)(params, x, y)
        grads = jax.tree.map(lambda g, m: g + m / MICRO_BATCHES, grads, micro_grads)
        loss += micro_loss / MICRO_BATCHES
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


with jax.set_mesh(mesh):
    params = jax.device_put(params, P())  # replicated, as DDP keeps a copy on every rank
    opt_state = optimizer.init(params)
    losses = []
    for step in range(STEPS):
        images, labels = jax.device_put(batch(step), P("data"))
        params, opt_state, loss = train_step(params, opt_state, images, labels)
        losses.append(loss)  # kept on the devices: no wait for the host in the loop
for step, loss in enumerate(jax.device_get(losses)):
    print(f"step {step}: loss {loss:.6f}")
# --8<-- [end:train]

# %% traffic
# --8<-- [start:traffic]
print(f"parameters: {sum(p.nbytes for p in jax.tree.leaves(params)):,} bytes on every device")
arguments = (params, opt_state, images, labels)
for target in ("cpu", "h100-8", "v5e-8"):  # XLA:CPU here; XLA:GPU and XLA:TPU deviceless
    compiled = jaxpar.compile_for(target, train_step, *arguments)
    count, sent = jaxpar.summarise(compiled).by_kind().get("all-reduce", (0, 0))
    backend = jaxpar.TARGETS[target].backend
    print(f"all-reduced per step ({backend}): {count} all-reduce(s), {sent:,} bytes")
# --8<-- [end:traffic]
