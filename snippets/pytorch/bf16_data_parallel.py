"""Mixed precision with data parallelism in JAX, the twin of `autocast.py`: where the gradients are summed, in bfloat16 or in float32, and what XLA sends (jaxpar counts it).

The weights and AdamW's state stay float32, replicated over a mesh axis `"data"` that
splits the batch, as in `data_parallel.py`; the loss casts them to bfloat16 where it uses
them, as `torch.autocast` does for each matrix product. Under `jax.jit`, XLA sums the
gradients across devices inside the backward pass, in the type it computes them in:
bfloat16 on XLA:GPU (8 H100s, compiled without the hardware). In `jax.shard_map`, the
weights become per-device values with `jax.lax.pcast(..., to="varying")` before the cast, so their
gradients are summed there, in float32, as DDP's all-reduce does. Both print their
losses, which must stay close to the PyTorch twin's, and the all-reduces of their
compiled steps.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# numbers within 2e-3 in cell jit: XLA:CPU picks its bfloat16 kernels by CPU (AVX512-BF16, AMX, AVX2), so bfloat16 losses differ in the 4th decimal between CPUs
# numbers within 2e-3 in cell shard_map: as in cell jit

# %% setup
from collections import Counter

import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import jaxpar

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, flax_mlp

graphdef, initial = nnx.split(flax_mlp())
initial = jax.device_get(initial)
optimizer = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))


def loss_fn(params, images, labels):
    bf16 = jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)  # where they are used
    logits = nnx.merge(graphdef, bf16)(images.astype(jnp.bfloat16))
    logits = logits.astype(jnp.float32)  # the loss in float32
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def train(step_fn):
    """Train the replicated weights STEPS steps with ``step_fn``; the weights and losses."""
    with jax.set_mesh(mesh):
        params = jax.device_put(initial, P())
        opt_state = optimizer.init(params)
        losses = []
        for step in range(STEPS):
            images, labels = jax.device_put(batch(step), P("data"))
            params, opt_state, loss = step_fn(params, opt_state, images, labels)
            losses.append(loss)
    print("losses:", " ".join(f"{loss:.4f}" for loss in jax.device_get(losses)))
    return params, opt_state, images, labels


# %% jit
# --8<-- [start:jit]
@jax.jit(donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, images, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)  # float32 grads
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


trained = train(train_step)
# --8<-- [end:jit]


# %% shard_map
# --8<-- [start:shard_map]
def device_step(params, opt_state, images, labels):
    def device_loss(params):
        params = jax.lax.pcast(params, "data", to="varying")  # per device, still float32
        return jax.lax.pmean(loss_fn(params, images, labels), "data")

    # the gradient of that pcast is a sum over "data", in the type it casts: float32
    loss, grads = jax.value_and_grad(device_loss)(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def summed_in_float32():
    """The step: a shard_map keeps the mesh of its first call, so a new one per mesh."""
    per_device = jax.shard_map(
        device_step, in_specs=(P(), P(), P("data"), P("data")), out_specs=(P(), P(), P())
    )
    return jax.jit(per_device, donate_argnames=("params", "opt_state"))


trained_in_float32 = train(summed_in_float32())
# --8<-- [end:shard_map]

# %% collectives
# --8<-- [start:collectives]
for name, make_step, (params, opt_state, images, labels) in [
    ("jit", lambda: train_step, trained),
    ("shard_map", summed_in_float32, trained_in_float32),
]:
    for target in ("cpu", "h100-8"):
        compiled = jaxpar.compile_for(target, make_step(), params, opt_state, images, labels)
        kinds = Counter()
        for c in jaxpar.summarise(compiled).collectives:
            kinds[f"{c.kind} {'/'.join(c.element_types)}"] += c.result_bytes
        found = ", ".join(f"{kind} {size:,} bytes" for kind, size in sorted(kinds.items()))
        print(f"{name}, {jaxpar.TARGETS[target].backend}: {found}")
# --8<-- [end:collectives]
