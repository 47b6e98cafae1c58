"""A real training step: a small GPT on a 2-D mesh, laid out four ways by one rules table.

A decoder-only transformer in Flax NNX (2 layers, width 64, 4 heads, context 64, tied
embeddings) learns to write like `json/__init__.py` of the standard library, character by
character. Its parameters carry logical axis names (`embed`, `heads`, `mlp`, `vocab`); a
rules table maps them to the axes of a 2x4 mesh `("data", "model")`, so that the same model
runs as data parallelism, FSDP, tensor parallelism or FSDP x tensor parallelism by changing
only the rules. For each layout: the bytes each device holds, the collectives in the
compiled step, and the losses of 10 steps against the same training on one device.
"""

# needs 8 devices: the four layouts are compared on a 2 x 4 mesh; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)


# %% setup
import dataclasses
import inspect
import json
import re
import textwrap

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

# %% data
# --8<-- [start:data]
text = inspect.getsource(json)  # the source of json/__init__.py: nothing to download
chars = sorted(set(text))
VOCAB = -(-len(chars) // 8) * 8  # padded to a multiple of 8, so that any mesh axis splits it
data = np.array([chars.index(c) for c in text], dtype=np.int32)
CONTEXT, BATCH = 64, 32


def get_batch(step):
    """BATCH windows of CONTEXT characters, and the same shifted by one: the targets."""
    starts = np.random.default_rng(step).integers(0, len(data) - CONTEXT - 1, BATCH)
    windows = data[starts[:, None] + np.arange(CONTEXT + 1)]
    return windows[:, :-1], windows[:, 1:]


# --8<-- [end:data]
print(f"{len(text)} characters, {len(chars)} distinct, vocabulary padded to {VOCAB}")


# %% model
# --8<-- [start:model]
@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = VOCAB
    context: int = CONTEXT
    width: int = 64
    heads: int = 4
    layers: int = 2
    dtype: jnp.dtype = jnp.float32  # the dtype of the computation; parameters stay float32
    remat: object = None  # a jax.checkpoint policy for each block, or None: no remat


def dense(fan_in, fan_out, names, init, config, rngs):
    """A bias-free linear layer whose kernel carries logical axis names."""
    return nnx.Linear(
        fan_in, fan_out, use_bias=False, rngs=rngs,
        kernel_init=nnx.with_partitioning(init, names),
        dtype=config.dtype, param_dtype=jnp.float32,
    )  # fmt: skip


normal, zeros = nnx.initializers.normal(0.02), nnx.initializers.zeros_init()


class Block(nnx.Module):
    """Causal self-attention, then an MLP, each after a layer norm and around a residual."""

    def __init__(self, config: Config, rngs: nnx.Rngs):
        width, norm = config.width, {"dtype": config.dtype, "rngs": rngs}
        self.heads = config.heads
        self.norm1, self.norm2 = nnx.LayerNorm(width, **norm), nnx.LayerNorm(width, **norm)
        # q, k and v of each head side by side (as Megatron-LM lays them out), so that a
        # split of "heads" gives every device whole heads.
        self.qkv = dense(width, 3 * width, ("embed", "heads"), normal, config, rngs)
        self.out = dense(width, width, ("heads", "embed"), zeros, config, rngs)
        self.up = dense(width, 4 * width, ("embed", "mlp"), normal, config, rngs)
        self.down = dense(4 * width, width, ("mlp", "embed"), zeros, config, rngs)

    def __call__(self, x):
        spec = jax.typeof(x).sharding.spec  # the activations' layout: batch split, as it came
        b, t, width = x.shape
        qkv = self.qkv(self.norm1(x))
        q, k, v = jnp.unstack(qkv.reshape(b, t, self.heads, 3, width // self.heads), axis=3)
        scores = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(q.shape[-1])
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        weights = jax.nn.softmax(jnp.where(causal, scores.astype(jnp.float32), -1e9), axis=-1)
        attention = jnp.einsum("bhts,bshd->bthd", weights.astype(v.dtype), v).reshape(b, t, width)
        # The sum over heads: on a mesh that splits "heads", an all-reduce back to `spec`.
        # Named, so that a remat policy can choose to keep it (`save_only_these_names`).
        x = x + checkpoint_name(self.out(attention, out_sharding=spec), "attention")
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))), out_sharding=spec)


class GPT(nnx.Module):
    def __init__(self, config: Config, rngs: nnx.Rngs):
        self.config = config
        embed = {"dtype": config.dtype, "param_dtype": jnp.float32, "rngs": rngs}
        init = nnx.with_partitioning(normal, ("vocab", "embed"))
        self.tokens = nnx.Embed(config.vocab, config.width, embedding_init=init, **embed)
        init = nnx.with_partitioning(normal, (None, "embed"))
        self.positions = nnx.Embed(config.context, config.width, embedding_init=init, **embed)
        self.blocks = nnx.List([Block(config, rngs) for _ in range(config.layers)])
        self.norm = nnx.LayerNorm(config.width, dtype=config.dtype, rngs=rngs)

    def __call__(self, tokens):  # (batch, time) integers -> (batch, time, vocab) logits
        spec = P(*jax.typeof(tokens).sharding.spec, None)  # batch split as the tokens are
        table = self.tokens.embedding[...]
        x = table.at[tokens].get(out_sharding=spec)  # a lookup into a sharded table
        positions = jax.reshard(self.positions.embedding[...], P())  # gathered whole
        x = (x + positions[: tokens.shape[1]]).astype(self.config.dtype)
        for block in self.blocks:
            if self.config.remat is None:
                x = block(x)
            else:  # keep only what the policy saves; recompute the rest in the backward pass
                x = nnx.remat(lambda block, x: block(x), policy=self.config.remat)(block, x)
        return self.tokens.attend(self.norm(x), out_sharding=spec)  # tied output layer


# --8<-- [end:model]


# %% rules
# --8<-- [start:rules]
mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)
LOGICAL = ("batch", "embed", "heads", "mlp", "vocab")
LAYOUTS = {  # for each logical axis, in the order above: the mesh axes that split it
    "data parallel": (("data", "model"), None, None, None, None),
    "FSDP": (("data", "model"), ("data", "model"), None, None, None),
    "tensor parallel": ("data", None, "model", "model", "model"),
    "FSDP x tensor": ("data", "data", "model", "model", "model"),
}


def rules(layout):
    """The layout as Flax's logical axis rules: (logical name, mesh axes) pairs."""
    return tuple(zip(LOGICAL, LAYOUTS[layout], strict=True))


# --8<-- [end:rules]


# %% create
# --8<-- [start:create]
tx = optax.adamw(3e-3)


def create(layout, config=Config(), mesh=mesh):
    """The model and its optimizer state, each array created in its shards."""
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules(layout)):
        model = jax.jit(lambda: GPT(config, nnx.Rngs(0)))()
        graphdef, params = nnx.split(model)
        opt_state = jax.jit(tx.init)(params)  # Explicit axes: the moments follow their parameter
    return graphdef, params, opt_state


def bytes_on_device_0(tree):
    return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(tree))


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


# %% step
# --8<-- [start:step]
def loss_fn(params, graphdef, x, y):
    logits = nnx.merge(graphdef, params)(x).astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


@jax.jit(static_argnames="graphdef", donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, x, y, graphdef):
    loss, grads = jax.value_and_grad(loss_fn)(params, graphdef, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


# --8<-- [end:step]


# %% collectives
# --8<-- [start:collectives]
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
OP = re.compile(rf"= (.+?) ({'|'.join(KINDS)})(?:-start)?\(")  # -start: the async forms
SHAPE = re.compile(r"\b(pred|bf16|[fsu]\d+)\[([\d,]*)\]")


def result_bytes(shapes):
    """Bytes of an HLO result type such as `f32[64,64]{1,0}` or a tuple of them."""
    total = 0
    for dtype, dims in SHAPE.findall(shapes):
        itemsize = 1 if dtype == "pred" else 2 if dtype == "bf16" else int(dtype[1:]) // 8
        total += itemsize * int(np.prod([int(d) for d in dims.split(",") if d]))
    return total


def collectives(compiled):
    """{kind: (count, bytes of their results on each device)} in a compiled program. Those
    in the body of a loop (a `lax.scan`) are counted apart: they run once per iteration."""
    found, hlo, computation = {}, compiled.as_text(), None
    bodies = set(re.findall(r"\bbody=%?([\w.-]+)", hlo))  # the computations loops repeat
    for line in hlo.splitlines():
        if line.endswith("{") and not line[0].isspace():  # a computation begins
            computation = line.removeprefix("ENTRY ").split()[0].lstrip("%")
        elif match := OP.search(line):
            kind = match[2] + (" in loop" if computation in bodies else "")
            count, size = found.get(kind, (0, 0))
            found[kind] = (count + 1, size + result_bytes(match[1]))
    return dict(sorted(found.items()))


# --8<-- [end:collectives]


# %% layouts
# --8<-- [start:layouts]
STEPS = 10


def place(state, layout, mesh=mesh):
    """Copies of the arrays of `state`, in the shardings that the layout's rules give them."""
    with nnx.logical_axis_rules(rules(layout)):
        shardings = nnx.get_named_sharding(state, mesh)
    return jax.device_put(state, shardings, may_alias=False)


def train(layout, params, opt_state, steps=STEPS, mesh=mesh):
    """Compile the step for `layout` and train `steps` steps; the losses stay on device."""
    batch = NamedSharding(mesh, P(LAYOUTS[layout][0], None))  # the rules' "batch" entry
    with jax.set_mesh(mesh):
        x, y = jax.device_put(get_batch(0), batch)
        compiled = train_step.lower(params, opt_state, x, y, graphdef).compile()
        losses = []
        for step in range(steps):
            x, y = jax.device_put(get_batch(step), batch)
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
    for kind, (count, size) in collectives(compiled).items():
        print(f"  {kind} x{count}: {size:,} B")
# --8<-- [end:layouts]

# %% reference
# --8<-- [start:reference]
# The same training on one device: a 1 x 1 mesh of device 0, nothing split.
one_device = jax.make_mesh(
    (1, 1), ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:1]
)
_, reference = train("data parallel", *place(initial, "data parallel", one_device), mesh=one_device)
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
