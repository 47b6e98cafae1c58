"""Scan over layers: a stack of transformer blocks that compiles once, whatever its depth.

Builds the blocks of a small decoder as one stack with `nnx.vmap` (every weight gains a
leading axis of layers), runs them with `nnx.scan`, each under `nnx.remat`, checks that
this computes what a Python loop over the same blocks computes, trains a few steps, and
counts what XLA is handed for 2, 4 and 8 layers each way, and a step's model FLOPs for
MFU, beside what XLA:CPU's cost analysis counts. Attention is
`jax.nn.dot_product_attention`. The memory and compile times at real size (Llama 3.2 1B on
8 H100s and a TPU v5e-8) are on the page, from the recorded grid.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)
# numbers within 5e-4 in cell train: XLA:CPU picks its float32 matmul kernels by CPU, and losses printed to 4 decimals can move in the last one
# numbers within 0.01 in cell flops: XLA:CPU's fusions depend on the CPU, and cost_analysis counts what they compute (0.2% more without YNN fusions)

# %% block
# --8<-- [start:block]
import re
import sys
import time

import jax.numpy as jnp
import optax
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

WIDTH, HEADS, VOCAB, CONTEXT, BATCH = 64, 4, 128, 32, 16
mesh = jax.make_mesh((jax.device_count(),), ("fsdp",), axis_types=(AxisType.Explicit,))


def dense(fan_in, fan_out, rngs):
    """A bias-free linear layer whose kernel is split over "fsdp" (FSDP)."""
    init = nnx.with_partitioning(nnx.initializers.normal(0.02), ("fsdp", None))
    return nnx.Linear(fan_in, fan_out, use_bias=False, kernel_init=init, rngs=rngs)


class Block(nnx.Module):
    """Causal self-attention, then an MLP, each after an RMS norm and around a residual."""

    def __init__(self, rngs: nnx.Rngs):
        self.norm1, self.norm2 = nnx.RMSNorm(WIDTH, rngs=rngs), nnx.RMSNorm(WIDTH, rngs=rngs)
        self.qkv, self.out = dense(WIDTH, 3 * WIDTH, rngs), dense(WIDTH, WIDTH, rngs)
        self.up, self.down = dense(WIDTH, 4 * WIDTH, rngs), dense(4 * WIDTH, WIDTH, rngs)

    def __call__(self, x):
        spec = jax.typeof(x).sharding.spec  # the batch's split: each product gathers weights
        b, t, _ = x.shape
        q, k, v = jnp.split(self.qkv(self.norm1(x), out_sharding=spec), 3, axis=-1)
        q, k, v = (a.reshape(b, t, HEADS, WIDTH // HEADS) for a in (q, k, v))
        attention = jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(b, t, WIDTH)
        x = x + self.out(attention, out_sharding=spec)
        return x + self.down(
            jax.nn.gelu(self.up(self.norm2(x), out_sharding=spec)), out_sharding=spec
        )


# --8<-- [end:block]


# %% stack
# --8<-- [start:stack]
class Decoder(nnx.Module):
    """Token embeddings, `layers` blocks as one stack, and a tied output layer."""

    def __init__(self, layers: int, rngs: nnx.Rngs):
        self.embed = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (VOCAB, WIDTH)))
        self.norm = nnx.RMSNorm(WIDTH, rngs=rngs)

        # Create the blocks as a vmap does: one Block whose every variable has a leading
        # axis of `layers`, each layer with its own random weights (split_rngs). The
        # metadata leaves that axis unsplit: P("fsdp", None) becomes P(None, "fsdp", None).
        @nnx.split_rngs(splits=layers)
        @nnx.vmap(in_axes=0, out_axes=0, transform_metadata={nnx.PARTITION_NAME: None})
        def stack(rngs):
            return Block(rngs)

        self.blocks = stack(rngs)

    def __call__(self, tokens):
        x = self.embed[...].at[tokens].get(out_sharding=P("fsdp", None, None))

        # One layer's code, run once per layer: the carry is the residual stream, the
        # blocks are sliced along their leading axis. remat: the backward pass recomputes
        # each layer from its input instead of keeping everything it made.
        @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
        @nnx.remat
        def run(x, block):
            return block(x)

        return self.norm(run(x, self.blocks)) @ self.embed[...].T


with jax.set_mesh(mesh):  # created inside jit: every weight is born in its shards
    model = nnx.jit(lambda: Decoder(layers=4, rngs=nnx.Rngs(0)))()
print(f"the qkv kernels of all 4 layers: {jax.typeof(model.blocks.qkv.kernel[...])}")
# --8<-- [end:stack]


# %% loop
# --8<-- [start:loop]
def looped(model, tokens):
    """The same blocks, each under remat, run by a Python loop: layer i is slice i of every
    stacked weight. XLA is handed the layer's code once per layer."""
    graphdef, stacked = nnx.split(model.blocks)
    x = model.embed[...].at[tokens].get(out_sharding=P("fsdp", None, None))
    for i in range(model.blocks.qkv.kernel.shape[0]):
        block = nnx.merge(graphdef, jax.tree.map(lambda a, i=i: a[i], stacked))
        x = nnx.remat(lambda block, x: block(x))(block, x)
    return model.norm(x) @ model.embed[...].T


# 8 batches of sequences that count up from a random start: a pattern the model can learn.
starts = jax.random.randint(jax.random.key(1), (8, BATCH, 1), 0, VOCAB)
data = (starts + jnp.arange(CONTEXT + 1)) % VOCAB
with jax.set_mesh(mesh):
    batches = jax.device_put(data, P(None, "fsdp", None))
    tokens = batches[0, :, :-1]
    difference = jnp.abs(jax.jit(Decoder.__call__)(model, tokens) - jax.jit(looped)(model, tokens))
print(f"scanned and looped logits differ by at most 1e-5: {bool(difference.max() < 1e-5)}")
# --8<-- [end:loop]


# %% train
# --8<-- [start:train]
def loss_fn(model, tokens, targets):
    return optax.softmax_cross_entropy_with_integer_labels(model(tokens), targets).mean()


@nnx.jit(donate_argnames=("model", "optimizer"))
def train_step(model, optimizer, batch):
    loss, grads = nnx.value_and_grad(loss_fn)(model, batch[:, :-1], batch[:, 1:])
    optimizer.update(model, grads)
    return loss


with jax.set_mesh(mesh):
    optimizer = nnx.Optimizer(model, optax.adamw(3e-3), wrt=nnx.Param)
    losses = [train_step(model, optimizer, batches[step]) for step in range(8)]
print("losses:", " ".join(f"{loss:.4f}" for loss in jax.device_get(losses)))
# --8<-- [end:train]


# %% program_size
# --8<-- [start:program_size]
def lowered_step(layers, forward):
    """The training step of a `layers`-deep model run by `forward`, lowered (not compiled)."""
    with jax.set_mesh(mesh):
        abstract = nnx.eval_shape(lambda: Decoder(layers, nnx.Rngs(0)))
        opt = nnx.eval_shape(lambda: nnx.Optimizer(abstract, optax.adamw(3e-3), wrt=nnx.Param))

        def step(model, optimizer, batch):
            def loss(model):
                logits = forward(model, batch[:, :-1])
                return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()

            optimizer.update(model, nnx.grad(loss)(model))

        return nnx.jit(step).lower(abstract, opt, batches[0])


def handed_to_xla(layers, forward):
    """Operations and matrix products of the training step's StableHLO, before XLA."""
    text = lowered_step(layers, forward).as_text()
    return len(re.findall(r" = \S+\.", text)), text.count("stablehlo.dot_general")


print("layers   scanned: operations, matmuls   looped: operations, matmuls")
for layers in (2, 4, 8):
    scanned, loop = handed_to_xla(layers, Decoder.__call__), handed_to_xla(layers, looped)
    print(f"{layers:6}   {scanned[0]:18,} {scanned[1]:8}   {loop[0]:17,} {loop[1]:8}")
# --8<-- [end:program_size]


# %% flops
# --8<-- [start:flops]
def training_flops_per_token(layers, width, hidden, vocab, context):
    """A training step's model FLOPs per token, as MaxText counts them: the forward pass's
    matrix products (q, k and v; the attention output; the MLP; causal attention, half of
    the full context; the logits), times 3 for forward and backward."""
    attention = 2 * context * width  # 4 x context x width, halved by the causal mask
    layer = 2 * width * 3 * width + 2 * width * width + 2 * 2 * width * hidden + attention
    return 3 * (layers * layer + 2 * width * vocab)


per_step = training_flops_per_token(4, WIDTH, 4 * WIDTH, VOCAB, CONTEXT) * BATCH * CONTEXT
counted = {
    name: lowered_step(4, forward).compile().cost_analysis()["flops"]
    for name, forward in (("scanned", Decoder.__call__), ("looped", looped))
}
print(f"model FLOPs of one step (4 layers): {per_step:,}, {per_step // 8:,} per device")
ratios = {name: flops / (per_step / 8) for name, flops in counted.items()}
print("XLA:CPU's cost_analysis, per device, over the model's FLOPs per device:")
print(f"  scanned {ratios['scanned']:.2f}, looped {ratios['looped']:.2f}")


def mfu(flops_per_step, seconds_per_step, devices, peak_flops_per_device):
    """Model FLOPs utilisation: the model's FLOPs per second over what the chips could do."""
    return flops_per_step / seconds_per_step / (devices * peak_flops_per_device)


with jax.set_mesh(mesh):  # the step is compiled already: time 8 steps, one wait at the end
    start = time.perf_counter()
    for step in range(8):
        loss = train_step(model, optimizer, batches[step])
    seconds = (jax.block_until_ready(loss), time.perf_counter() - start)[1] / 8
# Times differ from machine to machine: to standard error, not to the recorded output.
print(f"{BATCH * CONTEXT / seconds:,.0f} tokens/s, {seconds * 1e3:.1f} ms a step", file=sys.stderr)
# --8<-- [end:flops]
