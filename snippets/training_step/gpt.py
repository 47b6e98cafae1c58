"""The small GPT of the training-step chapter, with a jaxpar helper: data, model, rules, step.

A decoder-only transformer in Flax NNX (1 layer, width 64, 4 heads, context 64, tied
embeddings) that learns to write like `json/__init__.py` of the standard library, character
by character. Its parameters carry logical axis names (`embed`, `heads`, `mlp`, `vocab`); a
rules table maps them to the axes of a 2x4 mesh `("data", "model")`, so that the same model
runs as data parallelism, FSDP, tensor parallelism or FSDP x tensor parallelism by changing
only the rules. The output layer leaves the vocabulary split, and the loss is computed on
the split logits. `collectives` lists what a compiled step communicates, with
`jaxpar.summarise`. The scripts of the chapter's first two pages import this file: keep
them beside it. Run alone, it describes its data.
"""

# needs 8 devices: its mesh is 2 x 4; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)


# %% setup
import dataclasses
import inspect
import json

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import summarise

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


# %% model
# --8<-- [start:model]
@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = VOCAB
    context: int = CONTEXT
    width: int = 64
    heads: int = 4
    layers: int = 1
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
        # Scores and softmax in float32, whatever the dtype of the computation: the product
        # accumulates and returns float32 (preferred_element_type), not a rounded bfloat16.
        scores = jnp.einsum("bthd,bshd->bhts", q, k, preferred_element_type=jnp.float32)
        causal = jnp.tril(jnp.ones((t, t), dtype=bool))
        scores = jnp.where(causal, scores / np.sqrt(q.shape[-1]), -1e9)
        weights = jax.nn.softmax(scores, axis=-1)
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
        batch = jax.typeof(tokens).sharding.spec.partitions  # (batch, time), as they come
        spec = P(*batch, None)  # the activations: batch split as the tokens are
        table = self.tokens.embedding[...]
        # Whole along `embed` before the lookup, still split as the rules split `vocab`. Rows
        # looked up keep the table's split of `embed`; over the batch's own mesh axis (FSDP x
        # tensor) that is a layout XLA's partitioner reaches only by replicating them.
        vocab = jax.typeof(table).sharding.spec.partitions[0]
        table = jax.reshard(table, P(vocab, None))
        x = table.at[tokens].get(out_sharding=spec)  # a lookup into a table split by rows
        positions = jax.reshard(self.positions.embedding[...], P())  # gathered whole
        x = (x + positions[: tokens.shape[1]]).astype(self.config.dtype)
        for block in self.blocks:
            if self.config.remat is None:
                x = block(x)
            else:  # keep only what the policy saves; recompute the rest in the backward pass
                x = nnx.remat(lambda block, x: block(x), policy=self.config.remat)(block, x)
        # Tied output layer; the logits keep the table's split of the vocabulary.
        return self.tokens.attend(self.norm(x), out_sharding=P(*batch, vocab))


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


# --8<-- [end:create]


# %% place
# --8<-- [start:place]
def place(state, layout, mesh=mesh):
    """Copies of the arrays of `state`, in the shardings that the layout's rules give them."""
    with nnx.logical_axis_rules(rules(layout)):
        shardings = nnx.get_named_sharding(state, mesh)
    return jax.device_put(state, shardings, may_alias=False)


# --8<-- [end:place]


# %% step
# --8<-- [start:step]
def cross_entropy(logits, labels):
    """Mean cross-entropy of integer labels, on logits whose vocabulary may be split: a
    sum over the vocabulary's devices (logsumexp), and a comparison instead of a gather."""
    label_logits = jnp.where(jnp.arange(logits.shape[-1]) == labels[..., None], logits, 0.0)
    return (jax.nn.logsumexp(logits, axis=-1) - label_logits.sum(axis=-1)).mean()


def loss_fn(params, graphdef, x, y):
    logits = nnx.merge(graphdef, params)(x).astype(jnp.float32)
    return cross_entropy(logits, y)


def step(params, opt_state, x, y, graphdef):
    loss, grads = jax.value_and_grad(loss_fn)(params, graphdef, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


train_step = jax.jit(step, static_argnames="graphdef", donate_argnames=("params", "opt_state"))


# --8<-- [end:step]


# %% collectives
# --8<-- [start:collectives]
def collectives(compiled):
    """One line per kind of collective and size of device group in a compiled program:
    how many, the bytes of their results, and the bytes each device sends for them."""
    return [
        f"{kind} x{count} in groups of {group}: results {size:,} B, sends {sent:,} B"
        for (kind, group), (count, size, sent) in summarise(compiled).by_group().items()
    ]


# --8<-- [end:collectives]


# --8<-- [start:shaped]
def shaped(shape, dtype, spec):  # an argument for .lower(): a type, no data
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


# --8<-- [end:shaped]


# %% summary
if __name__ == "__main__":
    print(f"{len(text)} characters, {len(chars)} distinct, vocabulary padded to {VOCAB}")
