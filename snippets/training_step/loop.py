"""A training loop as a real job writes it.

A learning-rate schedule, gradient clipping and a weight-decay mask, all inside optax; a
loss weighted by real tokens, carried through gradient accumulation and across devices;
dropout, its random key threaded through the sharded step; an evaluation step on the same
mesh; and metrics that stay on the devices, fetched every few steps, under
`jax.transfer_guard("disallow")`, which refuses every implicit transfer.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)
# numbers within 5e-4 in cells train, weighting, host_sync: XLA:CPU picks its float32 matmul kernels by CPU, and losses printed to 4 decimals can move in the last one

# %% data
# --8<-- [start:data]
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

VOCAB, WIDTH, LENGTH, BATCH, MICRO, PAD = 64, 32, 24, 32, 2, 0
mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))


def sequences(key, count):
    """`count` sequences that count up (1, 2, ...) from a random start, each of a random
    length from 4 to LENGTH + 1 tokens, padded with PAD: inputs, targets and their mask."""
    start_key, length_key = jax.random.split(key)
    starts = jax.random.randint(start_key, (count, 1), 1, VOCAB)
    tokens = (starts + jnp.arange(LENGTH + 1) - 1) % (VOCAB - 1) + 1  # never PAD
    lengths = jax.random.randint(length_key, (count, 1), 4, LENGTH + 2)
    tokens = jnp.where(jnp.arange(LENGTH + 1) < lengths, tokens, PAD)
    return tokens[:, :-1], tokens[:, 1:], tokens[:, 1:] != PAD


with jax.set_mesh(mesh):
    # 24 training batches of MICRO micro-batches, and one evaluation set, all placed on the
    # devices before the loop, split over "data" along the batch.
    train = jax.device_put(
        [
            x.reshape(24, MICRO, BATCH // MICRO, LENGTH)
            for x in sequences(jax.random.key(0), 24 * BATCH)
        ],
        P(None, None, "data", None),
    )
    held_out = jax.device_put(sequences(jax.random.key(1), 4 * BATCH), P("data", None))
inputs, targets, mask = train
print(
    f"training batches: {inputs.shape}, real tokens in the first: {int(mask[0].sum())} of {mask[0].size}"
)
# --8<-- [end:data]


# %% model
# --8<-- [start:model]
class LanguageModel(nnx.Module):
    """Embedding, a layer norm, and an MLP with biases and dropout: something of each kind
    to decay, and randomness to thread through the step."""

    def __init__(self, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.norm = nnx.LayerNorm(WIDTH, rngs=rngs)
        self.hidden = nnx.Linear(WIDTH, 4 * WIDTH, rngs=rngs)
        self.out = nnx.Linear(4 * WIDTH, VOCAB, rngs=rngs)
        self.dropout = nnx.Dropout(0.1)

    def __call__(self, tokens, key=None):
        """Logits; with a random `key`, dropout is on (training), without, off."""
        split = jax.typeof(tokens).sharding.spec  # rows looked up stay split as the tokens
        x = self.embed(tokens, out_sharding=P(*split, None))
        hidden = jax.nn.gelu(self.hidden(self.norm(x)))
        return self.out(self.dropout(hidden, rngs=key, deterministic=key is None))


# --8<-- [end:model]


# %% optimizer
# --8<-- [start:optimizer]
STEPS, WARMUP = 24, 4
schedule = optax.warmup_cosine_decay_schedule(
    init_value=0.0, peak_value=1e-2, warmup_steps=WARMUP, decay_steps=STEPS, end_value=1e-3
)


def decays(params):
    """Weight decay on the layers' matrices (2-D, or 3-D when stacked for a scan over
    layers) only: not on norms, biases or embedding tables."""
    return jax.tree.map_with_path(
        lambda path, p: p.ndim >= 2 and "embedding" not in jax.tree_util.keystr(path), params
    )


optimizer_chain = optax.chain(
    optax.clip_by_global_norm(1.0),  # over all parameters, on every device: no code for sharding
    optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=0.1, mask=decays),
)
with jax.set_mesh(mesh):
    model = nnx.jit(lambda: LanguageModel(nnx.Rngs(0)))()
    optimizer = nnx.Optimizer(model, optimizer_chain, wrt=nnx.Param)
flat = [
    (".".join(map(str, path)), v.get_value())
    for path, v in nnx.to_flat_state(decays(nnx.state(model, nnx.Param)))
]
print("decayed:", ", ".join(name for name, decay in flat if decay))
print("not decayed:", ", ".join(name for name, decay in flat if not decay))
print("learning rate at steps 0, 2, 4, 14, 24:", [f"{schedule(s):.4f}" for s in (0, 2, 4, 14, 24)])
# --8<-- [end:optimizer]


# %% loss
# --8<-- [start:loss]
def summed_loss(model, inputs, targets, mask, key=None):
    """The sum of the losses of the real tokens, and how many there are."""
    losses = optax.softmax_cross_entropy_with_integer_labels(model(inputs, key), targets)
    return jnp.sum(losses * mask), jnp.sum(mask)


# --8<-- [end:loss]


# %% step
# --8<-- [start:step]
@nnx.jit(donate_argnames=("model", "optimizer"))
def train_step(model, optimizer, key, inputs, targets, mask):
    """Accumulate loss sums, token counts and gradient sums over the micro-batches, then
    divide once by all the batch's real tokens, and update. Returns device values only."""
    # Differentiate the parameters only. `rest` holds any other state, read-only here (there
    # is none); state the forward pass changes, such as batch-norm statistics, would have
    # to be carried through the scan and written back with nnx.update.
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    # The run's key, folded with the step number, then one key per micro-batch: every
    # step draws new dropout masks, and a resumed run draws the same ones again.
    keys = jax.random.split(jax.random.fold_in(key, optimizer.step[...]), MICRO)

    def micro_loss(params, micro_batch):
        return summed_loss(nnx.merge(graphdef, params, rest), *micro_batch)

    def accumulate(carry, micro_batch):
        loss_sum, count, grad_sum = carry
        (loss, tokens), grads = jax.value_and_grad(micro_loss, has_aux=True)(params, micro_batch)
        return (loss_sum + loss, count + tokens, jax.tree.map(jnp.add, grad_sum, grads)), None

    zeros = jax.tree.map(jnp.zeros_like, params)
    (loss_sum, count, grad_sum), _ = jax.lax.scan(
        accumulate, (0.0, 0, zeros), (inputs, targets, mask, keys)
    )
    grads = jax.tree.map(lambda g: g / jnp.maximum(count, 1), grad_sum)  # all padding: 0
    # The rate this update uses: adamw counts its steps as the optimizer does (not under
    # optax.MultiSteps or apply_if_finite, which skip some).
    learning_rate = schedule(optimizer.step[...])
    optimizer.update(model, grads)
    norm = optax.tree.norm(grads)  # before clipping
    return {"loss_sum": loss_sum, "tokens": count, "grad_norm": norm, "lr": learning_rate}


@nnx.jit
def evaluate(model, inputs, targets, mask):
    """The held-out set's token-weighted loss: no key (no dropout), no gradient, nothing
    donated."""
    return jnp.divide(*summed_loss(model, inputs, targets, mask))


# --8<-- [end:step]


# %% train
# --8<-- [start:train]
LOG_EVERY = 8
# What a data loader hands the loop: each step's arrays, on the devices already.
batches = [(inputs[step], targets[step], mask[step]) for step in range(STEPS)]
# The run's random key, replicated over the mesh like the parameters: a key on one device
# would be copied to every device at each step, a transfer the guard below refuses.
key = jax.device_put(jax.random.key(2), jax.NamedSharding(mesh, P()))
history = []
with jax.set_mesh(mesh), jax.transfer_guard("disallow"):  # any implicit transfer raises
    for step, batch in enumerate(batches):
        history.append(train_step(model, optimizer, key, *batch))
        if (step + 1) % LOG_EVERY == 0:
            held_out_loss = evaluate(model, *held_out)
            # The only wait for the devices: one explicit fetch every LOG_EVERY steps.
            fetched, held_out_loss = jax.device_get((history, held_out_loss))
            history = []
            # The window's loss, token-weighted as the steps' own; the last step's others.
            loss = sum(m["loss_sum"] for m in fetched) / sum(m["tokens"] for m in fetched)
            last = fetched[-1]
            if jax.process_index() == 0:  # one line per run, not per host
                print(f"steps {step - LOG_EVERY + 2:2}-{step + 1:2}: loss {loss:.4f}, held out "
                      f"{held_out_loss:.4f}, gradient norm {last['grad_norm']:.4f}, "
                      f"learning rate {last['lr']:.4f}")  # fmt: skip
# --8<-- [end:train]


# %% weighting
# --8<-- [start:weighting]
@jax.jit
def three_averages(model, inputs, targets, mask):
    """One batch's loss three ways: whole, as the mean of its micro-batches' means, and
    as the sum of their sums over the sum of their counts."""
    whole = jnp.divide(*summed_loss(model, inputs, targets, mask))  # all micro-batches at once
    sums, counts = jax.vmap(summed_loss, in_axes=(None, 0, 0, 0))(model, inputs, targets, mask)
    return whole, jnp.mean(sums / counts), jnp.sum(sums) / jnp.sum(counts)


# A batch whose micro-batches differ: the first as trained on, the second with random
# targets (nothing to learn), and fewer real tokens in the second.
inputs_0, targets_0, mask_0 = (np.array(x) for x in jax.device_get(batches[0]))
mask_0[1, :, 4:] = False  # 4 tokens a sequence at most
noise = np.random.default_rng(0).integers(1, VOCAB, size=targets_0[1].shape)
targets_0[1] = np.where(mask_0[1], noise, PAD)
with jax.set_mesh(mesh):
    averages = three_averages(
        model, *jax.device_put((inputs_0, targets_0, mask_0), P(None, "data", None))
    )
print("real tokens per micro-batch:", [int(n) for n in mask_0.sum(axis=(1, 2))])
print("loss of the whole batch {:.4f}, mean of micro-batch means {:.4f}, "
      "token-weighted {:.4f}".format(*averages))  # fmt: skip
# --8<-- [end:weighting]


# %% host_sync
# --8<-- [start:host_sync]
with jax.set_mesh(mesh), jax.transfer_guard("disallow"):
    try:  # indexing the batches inside the loop: each step sends the index to the devices
        metrics = train_step(model, optimizer, key, inputs[0], targets[0], mask[0])
    except jax.errors.JaxRuntimeError as error:
        print(f"{type(error).__name__}: {str(error).splitlines()[0]}")
    metrics = train_step(model, optimizer, key, *batches[0])
    loss = float(metrics["loss_sum"] / metrics["tokens"])  # raises on GPU and TPU, not CPU
print(f"float(loss) under the guard, on {jax.devices()[0].platform}: {loss:.4f}")
# --8<-- [end:host_sync]
