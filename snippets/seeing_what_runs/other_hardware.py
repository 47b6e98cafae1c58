"""Compiling with jaxpar for hardware this machine does not have: 8 H100s, 2 hosts of them, a TPU v5e-8.

The site's MLP, widened to 1024 -> 4096 -> 1024 so that its layers have a real layer's
sizes, with float32 parameters, bfloat16 compute and momentum SGD, in the four layouts
of the GPT page (replicated, FSDP, tensor parallel, FSDP x tensor) on a 2 x 4 mesh.
`jaxpar.compile_for` compiles each training step for XLA:CPU (this machine's 8 simulated
devices), for 8 NVIDIA H100s (XLA:GPU) and for a TPU v5e-8 (XLA:TPU), without a GPU or a
TPU: XLA's "deviceless" compiling. `jaxpar.summarise` reads each compiled program: its
collectives (kind, element type, group, mesh axes, asynchronous or not) and its memory
per device. Then: FSDP within hosts and data parallelism across them on 2 hosts of 8
H100s (what crosses hosts), attention's temporaries on each backend, and the limits.
Nothing here runs on the targets: it compiles. Compile times go to standard error.
"""

# needs 8 devices: XLA:CPU compiles the same 2 x 4 mesh as the 8 GPUs and TPU chips; on a machine with GPUs run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import sys
import time
from collections import Counter

import jax.numpy as jnp
import optax
from jax.sharding import AxisType

from jaxpar import TARGETS, compile_for, summarise

mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
ALL = ("data", "model")  # both axes: all 8 devices
SHAPES = {"hidden": (1024, 4096), "out": (4096, 1024)}
LAYOUTS = {  # a partition spec per weight, and the batch's
    "replicated": ({"hidden": jax.P(), "out": jax.P()}, jax.P(ALL)),
    "FSDP": ({"hidden": jax.P(ALL, None), "out": jax.P(ALL, None)}, jax.P(ALL)),
    "tensor parallel": (
        {"hidden": jax.P(None, "model"), "out": jax.P("model", None)},
        jax.P("data"),
    ),
    "FSDP x tensor": (
        {"hidden": jax.P("data", "model"), "out": jax.P("model", "data")},
        jax.P("data"),
    ),
}
BATCH = 256
tx = optax.sgd(0.01, momentum=0.9)


def loss_fn(params, x, y):
    """Float32 parameters, bfloat16 compute: the usual mixed precision."""
    bf16 = jax.tree.map(lambda w: w.astype(jnp.bfloat16), params)
    h = jax.nn.relu(x.astype(jnp.bfloat16) @ bf16["hidden"])
    return jnp.mean(jnp.square((h @ bf16["out"]).astype(jnp.float32) - y))


@jax.jit(donate_argnums=(0, 1))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def abstract(shape, spec, dtype=jnp.float32, on=mesh):
    """Shape, dtype and sharding only: compiling needs no array, so no memory."""
    return jax.ShapeDtypeStruct(shape, dtype, sharding=jax.NamedSharding(on, spec))


def arguments(layout, on=mesh):
    specs, batch = LAYOUTS[layout]
    params = {name: abstract(SHAPES[name], specs[name], on=on) for name in SHAPES}
    opt_state = jax.tree.map(  # momentum buffers sharded like their weights
        lambda leaf: abstract(leaf.shape, specs[next(n for n in SHAPES if SHAPES[n] == leaf.shape)], on=on)
        if leaf.shape in SHAPES.values() else abstract(leaf.shape, jax.P(), leaf.dtype, on),
        jax.eval_shape(tx.init, params),
    )  # fmt: skip
    return (
        params,
        opt_state,
        abstract((BATCH, 1024), batch, on=on),
        abstract((BATCH, 1024), batch, on=on),
    )


def compiled_for(target, layout, on=mesh):
    start = time.perf_counter()
    compiled = compile_for(target, train_step, *arguments(layout, on))
    print(f"{layout} for {target}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return compiled


def collectives(summary):
    """One line per kind of collective: count, element types, megabytes of results, group
    size, mesh axes, and whether it is an asynchronous start/done pair."""
    kinds, sizes = Counter(), Counter()
    for c in summary.collectives:
        key = (
            c.kind,
            "/".join(c.element_types),
            c.group_size,
            ",".join(c.axes or ("?",)),
            c.asynchronous,
        )
        kinds[key] += 1
        sizes[key] += c.result_bytes
    return [
        f"{count} {kind} {types} {megabytes(sizes[key])} MB among {key[2]} ({key[3]})"
        + (" async" if key[4] else "")
        for key, count in sorted(kinds.items())
        for kind, types in [key[:2]]
    ]  # fmt: skip


def megabytes(n):
    return f"{n / 1e6:.1f}"


# --8<-- [end:setup]


# %% targets
# --8<-- [start:targets]
for name in ("cpu", "h100-8", "h100-16", "v5e-8"):
    target = TARGETS[name]
    print(f"{name:8} {target.backend}  {target.description}")
# --8<-- [end:targets]

# %% layouts
# --8<-- [start:layouts]
summaries = {}
for layout in LAYOUTS:
    print(f"{layout}:")
    for target in ("cpu", "h100-8", "v5e-8"):
        summary = summarise(compiled_for(target, layout))
        summaries[layout, target] = summary
        print(f"  {target:7} " + "\n          ".join(collectives(summary)))
# --8<-- [end:layouts]

# %% memory
# --8<-- [start:memory]
print(f"{'MB per device':23} arguments  outputs  aliased  temporaries   peak")
for (layout, target), s in summaries.items():
    print(f"{layout:15} {target:7} {megabytes(s.argument_bytes):>9} {megabytes(s.output_bytes):>8}"
          f" {megabytes(s.alias_bytes):>8} {megabytes(s.temp_bytes):>12} {megabytes(s.peak_bytes):>6}")  # fmt: skip
# --8<-- [end:memory]

# %% scheduler
# --8<-- [start:scheduler]
# XLA options apply to one compile: here, XLA:GPU's latency-hiding scheduler turned off.
for scheduler in (True, False):
    options = {"xla_gpu_enable_latency_hiding_scheduler": scheduler}
    summary = summarise(
        compile_for("h100-8", train_step, *arguments("FSDP"), compiler_options=options)
    )
    print(f"scheduler {'on' if scheduler else 'off'}:")
    print("\n".join(f"  {line}" for line in collectives(summary)))
# --8<-- [end:scheduler]

# %% two_hosts
# --8<-- [start:two_hosts]
# 2 hosts x 8 H100s: FSDP over the 8 GPUs of a host (NVLink), data parallelism across hosts
# (InfiniBand). An AbstractMesh: this machine has 8 devices, the target 16.
hosts = jax.sharding.AbstractMesh((2, 8), ("hosts", "gpus"), axis_types=(AxisType.Auto,) * 2)
LAYOUTS["FSDP in hosts"] = (
    {"hidden": jax.P("gpus", None), "out": jax.P("gpus", None)},
    jax.P(("hosts", "gpus")),
)
summary = summarise(compiled_for("h100-16", "FSDP in hosts", on=hosts))
for c in summary.collectives:
    print(
        f"{c.kind:15} {'/'.join(c.element_types):8} along {','.join(c.axes):6} sends {c.sent_bytes:>10,} B"
    )
crossing = sum(c.sent_bytes for c in summary.collectives if "hosts" in c.axes)
print(
    f"bytes each GPU sends to the other host per step: {crossing:,} of {sum(c.sent_bytes for c in summary.collectives):,}"
)
# --8<-- [end:two_hosts]


# %% attention
# --8<-- [start:attention]
def attention(q, k, v):  # the textbook form: all T x T scores, then softmax
    scores = jnp.einsum("htd,hsd->hts", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    return jnp.einsum("hts,hsd->htd", jax.nn.softmax(scores, axis=-1), v)


one = jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])  # one device of each target
q = abstract((8, 2048, 128), jax.P(), jnp.bfloat16, on=one)
scores = 8 * 2048 * 2048 * 2  # bytes of one bfloat16 T x T score matrix per head, 8 heads
print(f"8 heads x 2048 tokens, bfloat16: the scores take {megabytes(scores)} MB")
# XLA:CPU hands this whole computation to a library call (YNNPACK) on CPUs it picks it for,
# and its plan then counts none of the call's buffers: off here, so every CPU plans alike.
no_library = {"xla_cpu_experimental_ynn_fusion_type": ""}
for target in ("cpu", "h100-8", "v5e-8"):
    options = no_library if target == "cpu" else None
    s = summarise(compile_for(target, attention, q, q, q, compiler_options=options))
    print(
        f"  {target:7} temporaries {megabytes(s.temp_bytes):>5} MB, peak {megabytes(s.peak_bytes):>6} MB"
    )
# --8<-- [end:attention]

# %% limits
# --8<-- [start:limits]
gpu = compiled_for("h100-8", "FSDP")
print("cost_analysis() on XLA:GPU without a GPU:", gpu.cost_analysis())
try:
    gpu(*arguments("FSDP"))
except Exception as error:  # compile-only devices: nothing can run
    print(type(error).__name__ + ":", str(error).splitlines()[0][:90])
try:
    compile_for("v5e-8", train_step, *arguments("FSDP in hosts", on=hosts))
except ValueError as error:
    print("ValueError:", error)
# --8<-- [end:limits]
