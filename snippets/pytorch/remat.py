"""Activation checkpointing in JAX, the twin of `checkpointing.py`: what the backward pass keeps, with and without `jax.checkpoint`.

`jax.checkpoint` (also called `jax.remat`; `nnx.remat` for NNX modules) runs the digits
MLP (`same_start.py`'s weights) as one block, without keeping the activations inside it,
and runs it again in the backward pass. The values the backward pass needs are what
`jax.vjp` returns inside its backward function: their bytes, parameters left out, are
what the program keeps, with and without checkpointing. It prints them, and the loss and
gradient norm of the first batch, which must equal `checkpointing.py`'s.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# numbers within 5e-6 in cell saved: XLA:CPU picks its float32 matmul kernels by CPU, and the last digit of a loss can move (1e-6 seen)

# %% setup
from functools import partial

import jax.numpy as jnp
import optax
from flax import nnx

from same_start import batch, flax_mlp

# %% saved
# --8<-- [start:saved]
graphdef, params = nnx.split(flax_mlp())  # Linear, ReLU, Linear: one block
images, labels = batch(0)


def loss_fn(params, remat: bool):
    forward = lambda params: nnx.merge(graphdef, params)(images)  # noqa: E731
    if remat:
        forward = jax.checkpoint(forward)
    logits = forward(params)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


weights = {id(leaf) for leaf in jax.tree.leaves(params)}
for remat in (False, True):
    loss, backward = jax.vjp(partial(loss_fn, remat=remat), params)
    # The backward function holds what the backward pass needs: its arrays are what is kept.
    kept = {id(a): a.nbytes for a in jax.tree.leaves(backward) if id(a) not in weights}
    (grads,) = backward(jnp.ones(()))
    name = "checkpointed MLP" if remat else "no checkpointing"
    print(f"{name}: {sum(kept.values()):,} bytes kept, loss {loss:.6f}, "
          f"gradient norm {optax.tree.norm(grads):.6f}")  # fmt: skip
# --8<-- [end:saved]
