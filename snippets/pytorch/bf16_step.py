"""Mixed precision in JAX, the twin of `mixed_precision.py`: float32 weights, a bfloat16 forward and backward pass, and what XLA sends (jaxpar counts it).

The weights and AdamW's state stay float32, fully sharded over a mesh axis `"data"` as in
`sharded_mlp.py`; the step casts them to bfloat16 where it uses them, so the gradients
come back in float32 through the cast. It prints the losses, which must stay close to the
PyTorch twin's (bfloat16 rounds at different places in the two frameworks), and the
collectives of the compiled step on XLA:CPU, XLA:GPU (8 H100s) and XLA:TPU (v5e-8),
the last two compiled without the hardware: in which type each backend gathers the
weights and reduces the gradients.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# numbers within 2e-3 in cell train: XLA:CPU picks its bfloat16 kernels by CPU (AVX512-BF16, AMX, AVX2), so bfloat16 losses differ in the 4th decimal between CPUs

# %% setup
from collections import Counter

import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import jaxpar

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, flax_mlp

graphdef, params = nnx.split(flax_mlp())
params = jax.device_get(params)
optimizer = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Auto,))
FSDP = {"hidden": {"kernel": P(None, "data"), "bias": P("data")},
        "out": {"kernel": P("data", None), "bias": P()}}  # fmt: skip


# %% train
# --8<-- [start:train]
def loss_fn(params, images, labels):
    bf16 = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)  # where they are used
    logits = nnx.merge(graphdef, bf16)(images.astype(jnp.bfloat16))
    logits = logits.astype(jnp.float32)  # the loss in float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


@jax.jit(donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, images, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)  # float32 grads
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


with jax.set_mesh(mesh):
    params = jax.device_put(params, nnx.State(FSDP))
    opt_state = optimizer.init(params)
    losses = []
    for step in range(STEPS):
        images, labels = jax.device_put(batch(step), P("data"))
        params, opt_state, loss = train_step(params, opt_state, images, labels)
        losses.append(loss)
print("losses:", " ".join(f"{loss:.4f}" for loss in jax.device_get(losses)))
print("weights kept as", {p.dtype for p in jax.tree.leaves(params)}.pop())
# --8<-- [end:train]

# %% collectives
# --8<-- [start:collectives]
for target in ("cpu", "h100-8", "v5e-8"):
    compiled = jaxpar.compile_for(target, train_step, params, opt_state, images, labels)
    kinds = Counter()
    for c in jaxpar.summarise(compiled).collectives:
        kinds[f"{c.kind} {'/'.join(c.element_types)}"] += c.result_bytes
    found = ", ".join(f"{kind} {size:,} bytes" for kind, size in sorted(kinds.items()))
    print(f"{jaxpar.TARGETS[target].backend}: {found}")
# --8<-- [end:collectives]
