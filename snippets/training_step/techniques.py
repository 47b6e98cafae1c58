"""Memory and communication, technique by technique, measured with jaxpar, on the GPT of gpt.py.

The model of `gpt.py` (beside this file), created in its FSDP x tensor shards on a 2x4 mesh
`("data", "model")`. One technique at a time is added to its step: donation, bfloat16
compute with float32 master weights, rematerialisation (and what two `jax.checkpoint`
policies keep), and gradient accumulation over micro-batches three ways: a plain
`lax.scan`, `jax.shard_map` with one reduction per step (and whether `psum_scatter` lowers
inside it), and gradients typed *unreduced*. For each, the compiled step's memory
(`memory_analysis()`) and collectives (its HLO), per device, on XLA:CPU, and the bfloat16
collectives the program asks for before XLA:CPU widens them to float32. Then the bfloat16
and float32 loss curves side by side, and the bfloat16 step's model writes a sample.
"""

# needs 8 devices: the techniques are compared on a 2 x 4 mesh; elsewhere run it with JAX_PLATFORMS=cpu
# numbers within 5e-4 in cells curves, same_losses: XLA:CPU picks its bfloat16 matmul kernels by CPU (AVX512-BF16, AMX, AVX2), so bf16 losses differ in the 4th decimal between CPUs
import jax

jax.config.update("jax_num_cpu_devices", 8)


# %% setup
import collections
import concurrent.futures
import contextlib
import io
import pathlib
import tempfile
import textwrap

import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import find_collectives, summarise

from gpt import (
    BATCH,
    CONTEXT,
    GPT,
    VOCAB,
    Config,
    chars,
    collectives,
    create,
    get_batch,
    loss_fn,
    mesh,
    place,
    rules,
    shaped,
    step,
    text,
    train_step,
    tx,
)

# %% variants
# --8<-- [start:variants]
LAYOUT = "FSDP x tensor"  # the layout of every row of the table below
_, params, opt_state = create(LAYOUT)  # in their shards, as on the previous page
initial = (params, opt_state)


def graphdef_of(config):
    """The structure of the model under `config`: its dtype and remat policy are part of it."""
    with jax.set_mesh(mesh), nnx.logical_axis_rules(rules(LAYOUT)):
        return nnx.graphdef(nnx.eval_shape(lambda: GPT(config, nnx.Rngs(0))))


plain_step = jax.jit(step, static_argnames="graphdef")  # train_step, without donation
# --8<-- [end:variants]


# %% measure
# --8<-- [start:measure]
MICRO = 4  # micro-batches per step, in rows 5 to 7


def memory_row(label, compiled):
    """Bytes per device from memory_analysis(), and the compute from cost_analysis()."""
    memory = compiled.memory_analysis()
    sizes = (memory.argument_size_in_bytes, memory.output_size_in_bytes)
    sizes += (memory.alias_size_in_bytes, memory.temp_size_in_bytes)
    # XLA counts the flops of a loop body once, whatever the number of iterations.
    looped = summarise(compiled).counts(in_loop=True)
    mflop = "-" if looped else f"{compiled.cost_analysis()['flops'] / 1e6:.0f}"
    return f"{label:27}" + "".join(f"{size:>11,}" for size in sizes) + f"{mflop:>7}"


def collectives_row(label, compiled):
    """For each kind: how many run once, + N x how many run N times a step (those in the
    loop over micro-batches); then the bytes each device sends in one step."""
    found, cells = summarise(compiled).collectives, []
    for kind in ("all-gather", "all-reduce"):
        runs = collections.Counter(c.runs for c in found if c.kind == kind)
        parts = [f"{count}" if n == 1 else f"{n}x{count}" for n, count in sorted(runs.items())]
        cells.append(" + ".join(parts) or "0")
    sent = sum(c.sent_bytes * c.runs for c in found)  # ring model, group sizes from the HLO
    return f"{label:27}" + "".join(f"{cell:>12}" for cell in cells) + f"{sent:>13,}"


MEMORY = f"{'bytes per device':27}{'arguments':>11}{'outputs':>11}{'aliased':>11}"
MEMORY += f"{'temporary':>11}{'MFLOP':>7}"
COMMUNICATION = f"{'per device and step':27}{'all-gather':>12}{'all-reduce':>12}"
COMMUNICATION += f"{'bytes sent':>13}"
# --8<-- [end:measure]


# %% accumulation
# --8<-- [start:accumulation]
def without(spec, axes):
    """`spec` with the mesh axes `axes` taken out of every entry."""
    entries = [() if e is None else (e,) if isinstance(e, str) else e for e in spec.partitions]
    kept = [tuple(a for a in entry if a not in axes) for entry in entries]
    return P(*(None if not k else k[0] if len(k) == 1 else k for k in kept))


def spec_of(array):
    return jax.typeof(array).sharding.spec


def update(params, opt_state, grads, loss):
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def accumulate_scan(params, opt_state, xs, ys, graphdef):
    """A lax.scan over micro-batches: each micro-batch's gradient is reduced over "data"
    inside the loop, into accumulators split as the parameters are (FSDP2's default)."""

    def micro_step(grads, batch):
        loss, new = jax.value_and_grad(loss_fn)(params, graphdef, *batch)
        return jax.tree.map(jnp.add, grads, new), loss

    grads, losses = jax.lax.scan(micro_step, jax.tree.map(jnp.zeros_like, params), (xs, ys))
    return update(params, opt_state, jax.tree.map(lambda g: g / MICRO, grads), losses.mean())


def accumulate_shard_map(params, opt_state, xs, ys, graphdef):
    """Per-device gradients summed over micro-batches, then one reduction: DDP's no_sync()."""
    # FSDP's all-gather, done once for all the micro-batches: whole along "data".
    whole = jax.tree.map(lambda p: jax.reshard(p, without(spec_of(p), "data")), params)

    @jax.shard_map(in_specs=(P(), P(None, "data")), out_specs=(P(), P()), axis_names={"data"})
    def per_device(whole, batches):
        # Marked as varying over "data", the parameters get per-device gradients: no sum
        # over devices inside jax.grad (see "The naive port" on the data-parallel pages).
        local = jax.tree.map(lambda p: jax.lax.pcast(p, "data", to="varying"), whole)

        def micro_step(grads, batch):
            loss, new = jax.value_and_grad(loss_fn)(local, graphdef, *batch)
            return jax.tree.map(jnp.add, grads, new), loss

        grads, losses = jax.lax.scan(micro_step, jax.tree.map(jnp.zeros_like, local), batches)
        n = MICRO * jax.lax.axis_size("data")
        grads = jax.tree.map(lambda g: g / n, jax.lax.psum(grads, "data"))  # the one reduction
        return grads, jax.lax.psum(losses.sum(), "data") / n

    grads, loss = per_device(whole, (xs, ys))
    # Back to the parameters' shards: each device keeps its slice of the sum.
    grads = jax.tree.map(lambda g, p: jax.reshard(g, spec_of(p)), grads, params)
    return update(params, opt_state, grads, loss)


def reduced(param):
    """Whole along "data", and typed *reduced* over it: its gradient comes out unreduced."""
    return jax.reshard(param, without(spec_of(param), "data").update(reduced={"data"}))


def accumulate_unreduced(params, opt_state, xs, ys, graphdef):
    """Unreduced gradients added up in a plain lax.scan, then one reduction over "data"."""
    # The matrices, whole along "data" and reduced over it. The layer norms' 1-D scales and
    # biases meet the batch elementwise, which JAX refuses for a reduced input: they stay.
    whole = jax.tree.map(lambda p: reduced(p) if p.ndim > 1 else p, params)

    def micro_step(grads, batch):
        loss, new = jax.value_and_grad(loss_fn)(whole, graphdef, *batch)
        return jax.tree.map(jnp.add, grads, new), loss

    def zeros(p):  # typed as the gradients will be: unreduced where `p` is reduced
        return jnp.zeros(
            p.shape, out_sharding=spec_of(p).update(reduced=set(), unreduced=spec_of(p).reduced)
        )

    grads, losses = jax.lax.scan(micro_step, jax.tree.map(zeros, whole), (xs, ys))
    # The one reduction: each unreduced sum, resharded to its parameter's shards.
    grads = jax.tree.map(lambda g, p: jax.reshard(g, spec_of(p)) / MICRO, grads, params)
    return update(params, opt_state, grads, losses.mean())


def micro_batches(number):
    """The batch of step `number`, 32 sequences, as MICRO micro-batches of 8."""
    return [part.reshape(MICRO, -1, CONTEXT) for part in get_batch(number)]


# --8<-- [end:accumulation]


# %% scatter
# --8<-- [start:scatter]
def scatter(g):
    """Sum over "data", each device keeping its half of the columns: a reduce-scatter."""
    g = jax.lax.pcast(g, "data", to="varying")  # a per-device gradient, as in the loop
    return jax.lax.psum_scatter(g, "data", scatter_dimension=1, tiled=True)


down = shaped((256, 64), jnp.float32, P("model", None))  # a gradient of `down`, whole along "data"
with jax.set_mesh(mesh):
    for axes in (("data",), ("data", "model")):  # "model" left Explicit, or made manual too
        split = "model" if "model" in axes else None
        scatter_in = jax.shard_map(
            scatter, in_specs=P(split), out_specs=P(split, "data"), axis_names=set(axes)
        )
        try:
            (line,) = collectives(jax.jit(scatter_in).lower(down).compile())
        except ValueError as error:  # jax 0.12 cannot lower it with "model" Explicit
            line = f"{type(error).__name__}: {str(error).split('. ')[0]}."
        print(f"shard_map over {' and '.join(axes)}: {line}")
# --8<-- [end:scatter]


# %% table
# --8<-- [start:table]
bf16 = {"dtype": jnp.bfloat16}
named = {**bf16, "remat": jax.checkpoint_policies.save_only_these_names("attention")}
accumulating = {"static_argnames": "graphdef", "donate_argnames": ("params", "opt_state")}
ROWS = {  # rows 2 to 4 each add one technique to the row above; 5 to 7 accumulate on row 4
    "1 float32": (Config(), plain_step),
    "2 + donation": (Config(), train_step),  # the previous page's step
    "3 + bfloat16 compute": (Config(**bf16), train_step),
    "4 + remat, names policy": (Config(**named), train_step),
    "5 + accumulate, lax.scan": (Config(**named), jax.jit(accumulate_scan, **accumulating)),
    "6 + accumulate, shard_map": (Config(**named), jax.jit(accumulate_shard_map, **accumulating)),
    "7 + accumulate, unreduced": (Config(**named), jax.jit(accumulate_unreduced, **accumulating)),
}
batch = NamedSharding(mesh, P("data", None))
micro = NamedSharding(mesh, P(None, "data", None))  # (micro-batch, sequence, position)


# The table reads what XLA's passes decide (buffers, collectives), which LLVM's
# optimisation of the machine code after them does not change: skipping it halves the time.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def compile_row(label):
    """One row's step, compiled ahead of time for these inputs (no step runs)."""
    config, function = ROWS[label]
    with jax.set_mesh(mesh):  # the mesh is set per thread
        if "accumulate" in label:
            inputs = jax.device_put(micro_batches(0), micro)
        else:
            inputs = jax.device_put(get_batch(0), batch)
        lowered = function.lower(params, opt_state, *inputs, graphdef_of(config))
        return lowered.compile(compiler_options=FAST_COMPILE)


# XLA compiles outside Python's lock: the seven programs compile side by side, on every core.
with concurrent.futures.ThreadPoolExecutor() as pool:
    compiled = dict(zip(ROWS, pool.map(compile_row, ROWS), strict=True))
print(MEMORY)
for label, program in compiled.items():
    print(memory_row(label, program))
print(COMMUNICATION)
for label, program in compiled.items():
    print(collectives_row(label, program))
# --8<-- [end:table]
peaks = [
    compiled[row].memory_analysis().peak_memory_in_bytes for row in ("1 float32", "2 + donation")
]
print(
    f"peak_memory_in_bytes (XLA:CPU, without temporaries): {peaks[0]:,} in row 1, {peaks[1]:,} in row 2"
)


# %% widened
# --8<-- [start:widened]
def kinds_and_types(found):
    """'all-gather bf16 x7, ...': the collectives by kind and element type."""
    counts = collections.Counter(f"{c.kind} {'+'.join(c.element_types)}" for c in found)
    return ", ".join(f"{kind} x{count}" for kind, count in sorted(counts.items()))


# Row 3 again, with XLA's dump of the program as SPMD partitioning left it: the collectives
# the JAX program asks for, before XLA:CPU's own passes rewrite them.
with tempfile.TemporaryDirectory() as folder, jax.set_mesh(mesh):
    options = {"xla_dump_to": folder, "xla_dump_hlo_pass_re": "spmd-partitioning", **FAST_COMPILE}
    inputs = jax.device_put(get_batch(0), batch)
    lowered = train_step.lower(params, opt_state, *inputs, graphdef_of(Config(**bf16)))
    lowered.compile(compiler_options=options)
    (partitioned,) = pathlib.Path(folder).glob("*after_spmd-partitioning*")
    asked = find_collectives(partitioned.read_text())
print(f"row 3, as partitioned: {kinds_and_types(asked)}")
print(
    f"row 3, as compiled:    {kinds_and_types(summarise(compiled['3 + bfloat16 compute']).collectives)}"
)
# --8<-- [end:widened]


# %% policies
# --8<-- [start:policies]
POLICIES = {
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    'save_only_these_names("attention")': named["remat"],  # the policy of rows 4 and 5
}


def saved_by(policy, x):
    """What the backward pass keeps of one block under `policy`, besides its inputs."""
    graphdef = graphdef_of(Config(**bf16))

    def block(params, x):
        return nnx.merge(graphdef, params).blocks[0](x)

    with contextlib.redirect_stdout(io.StringIO()) as listing:  # traced, not compiled
        jax.ad_checkpoint.print_saved_residuals(jax.checkpoint(block, policy=policy), params, x)
    lines = listing.getvalue().splitlines()  # "<type> <what it is> from <where>"
    return [line.split(" from ")[0] for line in lines if " from the argument " not in line]


with jax.set_mesh(mesh):
    x = jax.device_put(np.zeros((BATCH, CONTEXT, 64), jnp.bfloat16), P("data"))  # a block's input
    for name, policy in POLICIES.items():
        print(f"{name} keeps:")
        for line in saved_by(policy, x):
            print(f"  {line}")
# --8<-- [end:policies]


# %% curves
# --8<-- [start:curves]
# Rows 2 and 3, each from its own copy of the initial parameters (`place` copies; the steps
# donate). A third run, in float32 on the same data in another order, shows how much a loss
# curve moves anyway.
CURVE_STEPS = 8
runs = {
    "float32": (compiled["2 + donation"], 0),
    "bfloat16": (compiled["3 + bfloat16 compute"], 0),
    "float32, other order": (compiled["2 + donation"], 1000),  # batches 1000, 1001, ...
}
curves, trained = {}, {}
with jax.set_mesh(mesh):
    for name, (program, first) in runs.items():
        state, losses = place(initial, LAYOUT), []
        for step_number in range(CURVE_STEPS):
            x, y = jax.device_put(get_batch(first + step_number), batch)
            *state, loss = program(*state, x, y)
            losses.append(loss)
        curves[name], trained[name] = np.array(jax.device_get(losses)), state[0]
print(f"{'step':>4}" + "".join(f"{name:>22}" for name in curves))
for step_number in range(0, CURVE_STEPS, 2):
    print(
        f"{step_number:>4}" + "".join(f"{curve[step_number]:>22.4f}" for curve in curves.values())
    )
for name in ("bfloat16", "float32, other order"):
    gap = np.mean(curves[name][4:]) - np.mean(curves["float32"][4:])
    print(f"mean loss over steps 4-7, {name} minus float32: {gap:+.3f}")
# --8<-- [end:curves]


# %% same_losses
# --8<-- [start:same_losses]
with jax.set_mesh(mesh):
    losses = {}
    for label in list(ROWS)[3:]:  # row 4, and the three ways to accumulate
        state, losses[label] = place(initial, LAYOUT), []  # a copy: the steps donate
        for step_number in range(3):
            if "accumulate" in label:
                inputs = jax.device_put(micro_batches(step_number), micro)
            else:
                inputs = jax.device_put(get_batch(step_number), batch)
            *state, loss = compiled[label](*state, *inputs)
            losses[label].append(loss)
for label, values in losses.items():
    print(f"{label:27} losses " + " ".join(f"{v:.4f}" for v in jax.device_get(values)))
# --8<-- [end:same_losses]


# %% unreduced
# --8<-- [start:unreduced]
def every_parameter_reduced(params, x, y, graphdef):  # the layer norms' too
    return loss_fn(jax.tree.map(reduced, params), graphdef, x, y)


with jax.set_mesh(mesh):
    x, y = jax.device_put(get_batch(0), batch)
    gradient = jax.jit(jax.grad(every_parameter_reduced), static_argnames="graphdef")
    try:
        gradient.trace(params, x, y, graphdef_of(Config()))
    except Exception as error:  # a ShardingTypeError, which jax 0.12 does not export
        print(textwrap.fill(f"{type(error).__name__}: {error}", 88, subsequent_indent="  "))
# --8<-- [end:unreduced]


# %% sample
# --8<-- [start:sample]
@jax.jit(static_argnames=("graphdef", "length"))
def generate(params, prompt, key, graphdef, length):
    """`length` characters after `prompt`, each drawn from the model (temperature 0.8)."""
    model = nnx.merge(graphdef, params)

    def next_character(window, key):
        logits = model(window)[0, -1].astype(jnp.float32)
        logits = jnp.where(jnp.arange(VOCAB) < len(chars), logits, -jnp.inf)  # no padding
        character = jax.random.categorical(key, logits / 0.8)
        return jnp.concatenate([window[:, 1:], character[None, None]], axis=1), character

    _, characters = jax.lax.scan(next_character, prompt, jax.random.split(key, length))
    return characters


# A model this small writes faster on one device than across the mesh.
one_device = jax.make_mesh(
    (1, 1), ("data", "model"), axis_types=(AxisType.Explicit,) * 2, devices=jax.devices()[:1]
)
prompt = text[:CONTEXT]
with jax.set_mesh(one_device):
    weights = jax.device_put(trained["bfloat16"], NamedSharding(one_device, P()))
    window = jnp.array([[chars.index(c) for c in prompt]])
    written = generate(weights, window, jax.random.key(0), graphdef_of(Config(**bf16)), 120)
print(prompt + "|" + "".join(chars[i] for i in jax.device_get(written)))
# --8<-- [end:sample]
