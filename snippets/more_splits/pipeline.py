"""A GPipe pipeline written with jax.shard_map, its bubble and its collectives, counted with jaxpar.

An MLP of 8 layers split into 8 stages on a "stage" axis, one per simulated CPU device,
run on GPipe's schedule forward and backward and checked against the same computation on
one device: its schedule and bubble, its collectives (read with `jaxpar.summarise`, on
XLA:CPU) beside the bytes the formula gives, the pipeline on a 2 x 4 mesh with data
parallelism, the error a carry of the wrong type gives, and the NaN gradients a layer
undefined at zero gives in the bubble unless its input is masked first.
"""

# needs 8 devices: 8 stages, one per device; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import textwrap

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from counting import show

N = 8  # devices: 8 stages
EXPLICIT = (AxisType.Explicit,)
# --8<-- [end:setup]

# %% pipeline
# --8<-- [start:pipeline]
D, MICRO, ROWS = 64, 4, 4  # width; micro-batches of ROWS rows: a batch of 16
stage_mesh = jax.make_mesh((N,), ("stage",), axis_types=EXPLICIT)


def layer(w, b, x):
    return jnp.tanh(x @ w + b)


def reference_loss(params, xs, ys, layer=layer):
    """The unsplit model: 8 layers, one after the other, on the whole batch."""
    x, _ = lax.scan(lambda x, wb: (layer(*wb, x), None), xs.reshape(-1, D), params)
    return jnp.mean((x - ys.reshape(-1, D)) ** 2)


def active(tick, stage, micro):
    """GPipe's schedule: at tick t, stage s works on micro-batch t - s, if there is one."""
    return (tick >= stage) & (tick - stage < micro)


def pipeline_loss(params, xs, ys, data=None, vary=True, layer=layer, guard=True):
    """The same loss, stage s of the model on device s of "stage": xs, ys are (MICRO, ROWS, D)."""
    batch = P(None, data)  # micro-batches whole, their rows split over `data` if given

    @jax.shard_map(in_specs=(P("stage"), batch, batch), out_specs=(P(), P("stage")))
    def run(params, xs, ys):
        w, b = (p[0] for p in params)  # this stage's layer
        if data and vary:  # per-device weight gradients in the loop; one sum after it
            w, b = (lax.pcast(p, data, to="varying") for p in (w, b))
        stage, stages = lax.axis_index("stage"), lax.axis_size("stage")
        micro = xs.shape[0]

        def tick(carry, t):
            x, total = carry
            x = jnp.where(stage == 0, xs[jnp.minimum(t, micro - 1)], x)  # stage 0 reads input
            if guard:  # in the bubble, ones: a value every layer is defined at (see pitfalls)
                x = jnp.where(active(t, stage, micro), x, 1.0)
            y = layer(w, b, x)
            leaving = t - (stages - 1)  # the micro-batch the last stage finishes at tick t
            loss = jnp.mean((y - ys[jnp.maximum(leaving, 0)]) ** 2)
            total += jnp.where((stage == stages - 1) & (leaving >= 0), loss, 0.0)
            x = lax.ppermute(y, "stage", [(s, s + 1) for s in range(stages - 1)])  # next stage
            return (x, total), active(t, stage, micro)

        # The carry changes from device to device: it must start "varying" over the axes.
        axes = ("stage", data) if data else "stage"
        start = lax.pcast((jnp.zeros(xs.shape[1:]), jnp.zeros(())), axes, to="varying")
        (_, total), busy = lax.scan(tick, start, jnp.arange(micro + stages - 1))
        return lax.psum(total, axes) / (micro * (lax.axis_size(data) if data else 1)), busy[None]

    return run(params, xs, ys)


rng = np.random.default_rng(0)
params = (  # one layer per stage: weights (N, D, D), biases (N, D)
    rng.standard_normal((N, D, D), np.float32) / np.float32(np.sqrt(D)),
    np.zeros((N, D), np.float32),
)
xs = rng.standard_normal((MICRO, ROWS, D), np.float32)
ys = rng.standard_normal((MICRO, ROWS, D), np.float32)
# --8<-- [end:pipeline]

# %% pipeline_check
# --8<-- [start:pipeline_check]
with jax.set_mesh(stage_mesh):
    split = jax.device_put(params, P("stage"))
    step = jax.jit(jax.value_and_grad(pipeline_loss, has_aux=True))
    compiled = step.lower(split, xs, ys).compile()
    (loss, busy), grads = compiled(split, xs, ys)
loss_1, grads_1 = jax.jit(jax.value_and_grad(reference_loss))(params, xs, ys)
print(
    f"loss: pipeline {loss:.4f}, one device {loss_1:.4f}, "
    f"within 1e-6 relative: {np.allclose(loss, loss_1, rtol=1e-6, atol=0)}"
)
close = [np.allclose(g, g1, rtol=1e-5, atol=1e-6) for g, g1 in zip(grads, grads_1, strict=True)]
print(f"gradients within 1e-5 relative (1e-6 absolute) of one device's: {all(close)}")
print(f"gradient of the weights: {jax.typeof(grads[0])}")
ticks = MICRO + N - 1
print(f"schedule, {MICRO} micro-batches through {N} stages in {ticks} ticks (# works, . idle):")
busy = np.asarray(busy)  # (stage, tick): True where the stage worked on a micro-batch
for s, row in enumerate(busy):
    print(f"  stage {s}  " + "".join("#" if b else "." for b in row))
print(f"bubble: measured {1 - busy.mean():.4f}, (S-1)/(M+S-1) = {(N - 1) / ticks:.4f}")
print("collectives, forward and backward:")
show(compiled, ticks)
print(
    f"one activation: {ROWS} x {D} x 4 B = {ROWS * D * 4:,} B; x {ticks} ticks x 2 passes = "
    f"{2 * ticks * ROWS * D * 4:,} B"
)
# --8<-- [end:pipeline_check]

# %% bubble
# --8<-- [start:bubble]
print(f"{'micro-batches':>13} {'ticks':>6} {'bubble':>7} {'(S-1)/(M+S-1)':>14}")
for micro in (1, 2, 4, 8, 16, 32, 64):
    ticks = micro + N - 1
    grid = active(np.arange(ticks)[None, :], np.arange(N)[:, None], micro)
    print(f"{micro:>13} {ticks:>6} {1 - grid.mean():>7.4f} {(N - 1) / ticks:>14.4f}")
# --8<-- [end:bubble]

# %% pipeline_data
# --8<-- [start:pipeline_data]
data_mesh = jax.make_mesh((2, 4), ("data", "stage"), axis_types=EXPLICIT * 2)
with jax.set_mesh(data_mesh):
    four = jax.device_put(jax.tree.map(lambda p: p[:4], params), P("stage"))
    batch = jax.device_put((xs, ys), P(None, "data"))
    for vary in (False, True):
        lowered = jax.jit(
            jax.value_and_grad(pipeline_loss, has_aux=True), static_argnums=(3, 4)
        ).lower(four, *batch, "data", vary)
        print(f"2 x 4 mesh, weights made varying over data before the loop: {vary}")
        show(lowered.compile(), MICRO + 4 - 1)
stage_bytes = (D * D + D) * 4
print(
    f"one stage's weights and biases: ({D} x {D} + {D}) x 4 B = {stage_bytes:,} B; "
    f"x {MICRO + 4 - 1} ticks = {(MICRO + 4 - 1) * stage_bytes:,} B"
)
# --8<-- [end:pipeline_data]


# %% invariant_carry
# --8<-- [start:invariant_carry]
def passed_round(x):
    """Adds x to a value passed round the ring, from zeros not marked as varying."""

    def tick(total, _):
        return lax.ppermute(total + x, "stage", [(s, (s + 1) % N) for s in range(N)]), None

    return lax.scan(tick, jnp.zeros(x.shape), length=3)[0]


with jax.set_mesh(stage_mesh):
    rows = jax.device_put(np.zeros((N, D), np.float32), P("stage"))  # a row on each device
    try:
        jax.jit(jax.shard_map(passed_round, in_specs=P("stage"), out_specs=P("stage"))).trace(rows)
    except TypeError as error:
        lines = [line for line in f"TypeError: {error}".splitlines() if line][:3]
        print("\n".join(textwrap.fill(line, 88) for line in lines))
# --8<-- [end:invariant_carry]


# %% bubble_nan
# --8<-- [start:bubble_nan]
def normalised(w, b, x):
    """A layer undefined at 0: RMS normalisation without an epsilon, 0 / 0 for zeros."""
    y = x @ w + b
    return y / jnp.sqrt(jnp.mean(y**2, axis=-1, keepdims=True))


nan_in = lambda grads: any(bool(np.isnan(g).any()) for g in grads)  # noqa: E731
loss_1, grads_1 = jax.jit(jax.value_and_grad(reference_loss), static_argnames="layer")(
    params, xs, ys, layer=normalised
)
print(f"one device: loss {loss_1:.4f}, NaN in the gradients: {nan_in(grads_1)}")
with jax.set_mesh(stage_mesh):
    step = jax.jit(
        jax.value_and_grad(pipeline_loss, has_aux=True), static_argnames=("layer", "guard")
    )
    for guard in (False, True):
        (loss, _), grads = step(split, xs, ys, layer=normalised, guard=guard)
        print(f"pipeline, bubble inputs replaced by ones: {guard}")
        print(f"  loss {loss:.4f}, NaN in the gradients: {nan_in(grads)}")
        same = all(
            np.allclose(g, g1, rtol=1e-5, atol=1e-6) for g, g1 in zip(grads, grads_1, strict=True)
        )
        print(f"  gradients within 1e-5 relative (1e-6 absolute) of one device's: {same}")
# --8<-- [end:bubble_nan]
