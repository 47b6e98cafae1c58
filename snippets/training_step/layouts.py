"""A real training step, measured with jaxpar: the small GPT of gpt.py, laid out four ways.

The model of `gpt.py` (beside this file) on a 2x4 mesh `("data", "model")`, created in its
FSDP x tensor shards, then laid out as data parallelism, FSDP, tensor parallelism and FSDP x
tensor parallelism by its rules alone. For each layout: the bytes each device holds, the
collectives in the compiled step (`jaxpar.summarise`: kind, group size, bytes each device
sends), and the losses of 4 steps against the same training on one device. Then the two
errors a split vocabulary invites, and what the output layer's gradient costs at a real
vocabulary of 32,768, its logits whole or split.
"""

# needs 8 devices: the layouts are compared on a 2 x 4 mesh; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)


# %% setup
import textwrap

import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import summarise

from gpt import (
    BATCH,
    CONTEXT,
    LAYOUTS,
    VOCAB,
    bytes_on_device_0,
    collectives,
    create,
    cross_entropy,
    get_batch,
    mesh,
    place,
    shaped,
    train_step,
)

# %% create
# --8<-- [start:create]
graphdef, params, opt_state = create("FSDP x tensor")
total = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
print(f"parameters: {total:,} bytes, of which device 0 holds {bytes_on_device_0(params):,}")
print(f"optimizer state on device 0: {bytes_on_device_0(opt_state):,} bytes")
for name, variable in [
    ("token embedding", params["tokens"]["embedding"]),
    ("qkv kernel", params["blocks"][0]["qkv"]["kernel"]),
    ("down kernel", params["blocks"][0]["down"]["kernel"]),
]:
    print(f"  {name:16} {jax.typeof(variable[...])}")
# --8<-- [end:create]


# %% layouts
# --8<-- [start:layouts]
STEPS = 4


def train(layout, params, opt_state, steps=STEPS, mesh=mesh):
    """Compile the step for `layout` and train `steps` steps; the losses stay on device."""
    batch = NamedSharding(mesh, P(LAYOUTS[layout][0], None))  # the rules' "batch" entry
    with jax.set_mesh(mesh):
        x, y = jax.device_put(get_batch(0), batch)
        compiled = train_step.lower(params, opt_state, x, y, graphdef).compile()
        losses = []
        for step_number in range(steps):
            x, y = jax.device_put(get_batch(step_number), batch)
            params, opt_state, loss = compiled(params, opt_state, x, y)
            losses.append(loss)
    return compiled, np.array(jax.device_get(losses))  # one fetch, after the loop


initial = (params, opt_state)  # as created above, in their FSDP x tensor shards
losses = {}
for layout in LAYOUTS:
    params, opt_state = place(initial, layout)  # the same values, laid out by this layout
    held = bytes_on_device_0(params), bytes_on_device_0(opt_state)
    compiled, losses[layout] = train(layout, params, opt_state)
    print(f"{layout}: loss {losses[layout][0]:.4f} -> {losses[layout][-1]:.4f} in {STEPS} steps")
    print(f"  on device 0: parameters {held[0]:,} B, optimizer state {held[1]:,} B")
    for line in collectives(compiled):
        print(f"  {line}")
    sent = sum(collective.sent_bytes for collective in summarise(compiled).collectives)
    print(f"  each device sends {sent:,} B per step")
# --8<-- [end:layouts]

# %% reference
# --8<-- [start:reference]
# The same training on one device: a 1 x 1 mesh of device 0, nothing split.
one_device = jax.make_mesh(
    (1, 1), ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:1]
)
# From host memory: device_put alone would hand device 0's buffers of the replicated arrays
# to the donating step, even with may_alias=False (jax 0.12), and delete them in `initial`.
state = place(jax.device_get(initial), "data parallel", one_device)
_, reference = train("data parallel", *state, mesh=one_device)
print(f"one device: loss {reference[0]:.4f} -> {reference[-1]:.4f} in {STEPS} steps")
for layout in LAYOUTS:
    close = np.max(np.abs(losses[layout] - reference)) < 1e-5
    print(f"{layout:15} vs one device: every loss within 1e-5: {close}")
# --8<-- [end:reference]


# %% pitfalls
# --8<-- [start:pitfalls]
def first_sentence(error):
    text = f"{type(error).__name__}: {str(error).split('. ')[0]}."
    return textwrap.fill(text, 88, subsequent_indent="  ")


initial_params = initial[0]  # FSDP x tensor: the position table is float32[64,64@data]
with jax.set_mesh(mesh):
    activations = jax.device_put(np.zeros((BATCH, CONTEXT, 64), np.float32), P("data"))
    logits = jax.device_put(np.zeros((BATCH, CONTEXT, VOCAB), np.float32), P("data", None, "model"))
    labels = jax.device_put(get_batch(0)[1], P("data"))
    attempts = {
        "adding a table split over the batch's axis": lambda: jax.jit(jnp.add).trace(
            activations, initial_params["positions"]["embedding"][...]
        ),
        "the integer-label loss on logits split over the vocabulary": lambda: jax.jit(
            optax.softmax_cross_entropy_with_integer_labels
        ).trace(logits, labels),
    }
    for what, attempt in attempts.items():
        try:
            attempt()
        except Exception as error:  # ShardingTypeError, not exported by jax 0.12
            print(f"{what}:\n  {first_sentence(error)}")
# --8<-- [end:pitfalls]


# %% vocabulary
# --8<-- [start:vocabulary]
def output_loss(table, h, y, whole):
    """The tied output layer and the loss alone, with the logits' vocabulary whole or split."""
    vocab = None if whole else jax.typeof(table).sharding.spec.partitions[0]
    logits = jnp.einsum("bte,ve->btv", h, table, out_sharding=P("data", None, vocab))
    if whole:  # what an integer-label gather needs
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    return cross_entropy(logits, y)


# The tensor-parallel layout at a real vocabulary: the table split over "model".
table = shaped((32768, 64), jnp.float32, P("model", None))
h = shaped((BATCH, CONTEXT, 64), jnp.float32, P("data"))
y = shaped((BATCH, CONTEXT), jnp.int32, P("data"))
with jax.set_mesh(mesh):
    for whole in (True, False):
        gradients = jax.jit(jax.grad(output_loss, argnums=(0, 1)), static_argnames="whole")
        summary = summarise(gradients.lower(table, h, y, whole=whole).compile())
        label = f"vocabulary of {table.shape[0]:,}, {'whole' if whole else 'split'}"
        print(f"{label}: temporaries {summary.temp_bytes:,} B")
        for (kind, group), (count, size, sent) in summary.by_group().items():
            print(f"  {kind} x{count} in groups of {group}: results {size:,} B, sends {sent:,} B")
# --8<-- [end:vocabulary]
