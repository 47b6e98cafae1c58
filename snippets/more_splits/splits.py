"""More ways to split: pipeline, collective matmul, ring attention and experts, counted with jaxpar.

Four splits written with `jax.shard_map` and the collectives they need, each on the 8
simulated CPU devices and checked against the same computation unsplit: a GPipe pipeline
of 8 stages on a "stage" axis (forward and backward, its bubble, and the NaN gradients a
layer undefined at zero gives in the bubble unless its input is masked first), the
all-gather matmul rewritten as a ring of `ppermute` steps, causal ring attention over a
sequence split on "seq" (contiguous and zig-zag layouts, beside all-gather context
parallelism), and a mixture-of-experts layer with one expert per device, exchanging tokens
with `all_to_all` at a fixed capacity (and what its one-hot routing costs as the tokens
routed together grow, beside routing in groups and sorting by expert for
`jax.lax.ragged_dot`). For each, the collectives of the compiled program (read with
`jaxpar.summarise`, on XLA:CPU) beside the bytes the textbook formula for that pattern
gives.
"""

# needs 8 devices: 8 stages, 8 sequence blocks and 8 experts, one per device; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import collections
import contextlib
import io
import re
import textwrap

import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jaxpar import compile_for, summarise

N = 8  # devices: stages, sequence blocks, experts
EXPLICIT = (AxisType.Explicit,)


def show(compiled, trips=None):
    """Print each kind of collective of a compiled program (its HLO opcode, `-start` where
    it is asynchronous): how many, where, and the bytes of their results on one device.
    One in a loop body appears once in the HLO but runs once per iteration: its bytes are
    multiplied by `trips`, the loop's trip count."""
    found = {}
    for c in summarise(compiled).collectives:
        kind = c.kind + ("-start" if c.asynchronous else "")
        count, size = found.get((kind, c.in_loop), (0, 0))
        found[kind, c.in_loop] = (count + 1, size + c.result_bytes)
    for (kind, in_loop), (count, size) in sorted(found.items()):
        if in_loop:
            print(f"  {kind} x{count} in the loop: {size:,} B x {trips} trips = {size * trips:,} B")
        else:
            print(f"  {kind} x{count} once: {size:,} B")


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

# %% collective_matmul
# --8<-- [start:collective_matmul]
ring_mesh = jax.make_mesh((N,), ("x",), axis_types=EXPLICIT)
A = rng.standard_normal((16, 64), np.float32)  # columns split over x: A[I, J_x]
B = rng.standard_normal((64, 64), np.float32)  # columns split over x: B[J, K_x]


def allgather_matmul(a, b):
    """Gather all of A's columns, then multiply: C[I, K_x]."""
    return lax.all_gather(a, "x", axis=1, tiled=True) @ b


def ring_matmul(a, b):
    """The same product, one block of A's columns at a time, passed around a ring."""
    n, me, width = lax.axis_size("x"), lax.axis_index("x"), a.shape[1]

    def step(i, carry):
        c, a = carry
        incoming = lax.ppermute(a, "x", [(j, (j - 1) % n) for j in range(n)])  # travels...
        rows = lax.dynamic_slice_in_dim(b, (me + i) % n * width, width)
        return c + a @ rows, incoming  # ...while this block is multiplied

    c = lax.pcast(jnp.zeros((a.shape[0], b.shape[1])), "x", to="varying")
    c, a = lax.fori_loop(0, n - 1, step, (c, a))
    return c + a @ lax.dynamic_slice_in_dim(b, (me + n - 1) % n * width, width)


specs = dict(in_specs=(P(None, "x"), P(None, "x")), out_specs=P(None, "x"))
with jax.set_mesh(ring_mesh):
    a, b = jax.device_put((A, B), P(None, "x"))
    results = {}
    for f in (allgather_matmul, ring_matmul):
        compiled = jax.jit(jax.shard_map(f, **specs)).lower(a, b).compile()
        results[f.__name__] = compiled(a, b)
        print(f"{f.__name__}:")
        show(compiled, N - 1)
same = np.allclose(results["ring_matmul"], results["allgather_matmul"], atol=1e-5)
exact = all(np.allclose(c, A @ B, atol=1e-5) for c in results.values())
print(f"ring_matmul equal to allgather_matmul within 1e-5: {same}")
print(f"both within 1e-5 of NumPy's A @ B: {exact}")
v = A.nbytes
print(f"A is {v:,} B; an all-gather brings (N-1)/N of it to each device: {v * (N - 1) // N:,} B")
print(f"the ring: N-1 = {N - 1} blocks of {v // N:,} B: {(N - 1) * (v // N):,} B")
# --8<-- [end:collective_matmul]

# %% ring_attention
# --8<-- [start:ring_attention]
BATCH, T, HEAD = 2, 64, 16
seq_mesh = jax.make_mesh((N,), ("seq",), axis_types=EXPLICIT)


def attention(q, k, v):
    """Causal attention on one device: the whole T x T score matrix."""
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(HEAD)
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


def ring_attention(q, k, v, positions):
    """Each device keeps its queries; key/value blocks go round the ring. `positions[i]`
    are the positions of the tokens device i holds, for the causal mask."""
    n, me = lax.axis_size("seq"), lax.axis_index("seq")
    mine = positions[me]

    def attend(state, k, v, owner):
        out, high, total, useful = state  # online softmax: running max, sum, output
        seen = mine[:, None] >= positions[owner][None, :]  # causal, by position
        s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(HEAD)
        s = jnp.where(seen, s, -jnp.inf)
        new_high = jnp.maximum(high, s.max(-1))
        scale, p = jnp.exp(high - new_high), jnp.exp(s - new_high[..., None])
        out = out * scale[..., None] + p @ v
        useful = useful + jnp.stack([seen.sum(), seen.any()])  # scores, blocks that count
        return out, new_high, total * scale + p.sum(-1), useful

    def step(carry, i):
        state, k, v = carry
        incoming = lax.ppermute((k, v), "seq", [(j, (j + 1) % n) for j in range(n)])
        return (attend(state, k, v, (me - i) % n), *incoming), None

    rows = q.shape[:2]
    state = (jnp.zeros(q.shape), jnp.full(rows, -jnp.inf), jnp.zeros(rows), jnp.zeros(2, int))
    state = lax.pcast(state, "seq", to="varying")
    (state, k, v), _ = lax.scan(step, (state, k, v), jnp.arange(n - 1))
    out, _, total, useful = attend(state, k, v, (me + 1) % n)
    return out / total[..., None], useful[None]


def allgather_attention(q, k, v, positions):
    """Context parallelism without a ring: each device gathers all of K and V at once."""
    k, v = (lax.all_gather(a, "seq", axis=1, tiled=True) for a in (k, v))
    mine, every = positions[lax.axis_index("seq")], positions.reshape(-1)
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(HEAD)
    s = jnp.where(mine[:, None] >= every[None, :], s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


q, k, v = rng.standard_normal((3, BATCH, T, HEAD), np.float32)
contiguous = np.arange(T).reshape(N, T // N)  # device i holds positions 8i .. 8i+7
chunks = np.arange(T).reshape(2 * N, T // (2 * N))
zigzag = np.concatenate([chunks[:N], chunks[::-1][:N]], axis=1)  # chunks i and 2N-1-i
# --8<-- [end:ring_attention]

# %% ring_check
# --8<-- [start:ring_check]
full = jax.jit(attention)
expected = full(q, k, v)
seq = P(None, "seq")
ring = jax.jit(
    jax.shard_map(ring_attention, in_specs=(seq, seq, seq, P()), out_specs=(seq, P("seq")))
)
with jax.set_mesh(seq_mesh):
    for name, layout in (("contiguous", contiguous), ("zig-zag", zigzag)):
        order = layout.reshape(-1)  # token order along the split sequence
        inputs = jax.device_put((q[:, order], k[:, order], v[:, order]), seq)
        if name == "contiguous":
            compiled = ring.lower(*inputs, layout).compile()  # one program for both layouts
        out, useful = compiled(*inputs, layout)
        same = np.allclose(np.asarray(out)[:, np.argsort(order)], expected, atol=1e-5)
        useful = np.asarray(useful).reshape(N, 2)
        print(f"{name}: equal to full attention within 1e-5: {same}")
        print(f"  blocks with a score to compute, per device: {useful[:, 1].tolist()}")
        print(
            f"  scores to compute, per device, of {N} x {(T // N) ** 2} = {T * T // N}: "
            f"{useful[:, 0].tolist()}, {useful[:, 0].sum():,} in all"
        )
    gather = jax.jit(
        jax.shard_map(allgather_attention, in_specs=(seq, seq, seq, P()), out_specs=seq)
    )
    gathered = gather.lower(*inputs, layout).compile()
    same = np.allclose(
        np.asarray(gathered(*inputs, layout))[:, np.argsort(order)], expected, atol=1e-5
    )
print(f"all-gather context parallelism: equal to full attention within 1e-5: {same}")
print("collectives of ring attention:")
show(compiled, N - 1)
print("collectives of all-gather context parallelism:")
show(gathered)
kv = 2 * BATCH * (T // N) * HEAD * 4
print(
    f"K and V blocks: 2 x {BATCH} x {T // N} x {HEAD} x 4 B = {kv:,} B; x (N-1) = {(N - 1) * kv:,} B,"
    f" what all-gathering K and V brings: {(N - 1) * 2 * k.nbytes // N:,} B"
)
one = summarise(full.lower(q, k, v).compile())
per_device = summarise(compiled)
print(
    f"temporary bytes on XLA:CPU: full attention on one device {one.temp_bytes:,}; per device, "
    f"all-gather context parallelism {summarise(gathered).temp_bytes:,}, "
    f"ring attention {per_device.temp_bytes:,}"
)
print(
    f"scores: full {BATCH * T * T * 4:,} B, one device's queries {BATCH * T * T * 4 // N:,} B, "
    f"one block {BATCH * (T // N) ** 2 * 4:,} B"
)
# --8<-- [end:ring_check]


# %% ring_memory
# --8<-- [start:ring_memory]
def kept_for_backward(f, *args):
    """The types of what jax.grad(f) keeps from the forward pass for the backward pass."""
    with contextlib.redirect_stdout(io.StringIO()) as listing:
        jax.ad_checkpoint.print_saved_residuals(f, *args)
    return [line.split(" ")[0] for line in listing.getvalue().splitlines()]


def bytes_per_device(kind):
    """`f32[56@seq,2,8,16]`: 4-byte floats, the first dimension split over the 8 devices."""
    dtype, dims = re.fullmatch(r"(\w+)\[(.*)\]", kind).groups()
    sizes = [int(d.split("@")[0]) // (N if "@" in d else 1) for d in dims.split(",") if d]
    return int(np.prod(sizes)) * {"f32": 4, "i32": 4, "bool": 1}[dtype]


def ring_loss(q, k, v, positions):
    return ring(q, k, v, positions)[0].sum()


steps = f"[{(N - 1) * N}@seq,"  # a leading axis of 7 steps on each of the 8 devices
with jax.set_mesh(seq_mesh):
    inputs = jax.device_put((q, k, v), seq)  # in order: the contiguous layout
    for name, f in (("without remat", ring_loss), ("jax.checkpoint", jax.checkpoint(ring_loss))):
        kept = kept_for_backward(f, *inputs, contiguous)
        per_step = collections.Counter(kind for kind in kept if steps in kind)
        total = sum(map(bytes_per_device, kept))
        stacked = sum(map(bytes_per_device, per_step.elements()))
        print(f"{name}: the backward pass keeps {len(kept)} arrays, {total:,} B per device")
        print(f"  one per step: {sum(per_step.values())}, {stacked:,} B per device")
        for kind, count in sorted(per_step.items()):
            print(f"    {kind} x{count}")
# --8<-- [end:ring_memory]

# %% experts
# --8<-- [start:experts]
TOKENS, WIDTH, HIDDEN, TOP_K = 16, 32, 64, 2  # tokens per device
CAPACITY = TOKENS * TOP_K // N  # per expert, from each device: capacity factor 1
expert_mesh = jax.make_mesh((N,), ("expert",), axis_types=EXPLICIT)


def route(x, router, capacity=CAPACITY):
    """Top-k routing at a fixed capacity, as one-hot tables (token, expert, slot): `send`
    says where each token goes, `combine` also weighs each result by its gate; and how
    many tokens chose each expert."""
    gates, experts = lax.top_k(jax.nn.softmax(x @ router), TOP_K)
    gates /= gates.sum(-1, keepdims=True)
    chosen = jax.nn.one_hot(experts, N, dtype=jnp.int32)  # (token, k, expert)
    # Each choice's place in its expert's queue: all first choices, then all second ones.
    queue = jnp.cumsum(chosen.swapaxes(0, 1).reshape(-1, N), 0).reshape(TOP_K, -1, N)
    slot = jax.nn.one_hot(queue.swapaxes(0, 1) - 1, capacity)  # all zero past the capacity
    send = chosen[..., None] * slot  # (token, k, expert, slot)
    return send.sum(1), (gates[..., None, None] * send).sum(1), chosen.sum((0, 1))


def moe(x, router, w_in, w_out):
    """Each device routes its tokens, sends each expert its share, gets the results back."""
    send, combine, _ = route(x, router)
    outgoing = jnp.einsum("tes,tw->esw", send, x)  # (expert, slot, width)
    received = lax.all_to_all(outgoing, "expert", 0, 0, tiled=True)  # (device, slot, width)
    done = jax.nn.relu(received @ w_in[0]) @ w_out[0]  # this device's expert, on all of it
    back = lax.all_to_all(done, "expert", 0, 0, tiled=True)  # (expert, slot, width) again
    dropped = TOKENS * TOP_K - send.sum()  # choices that found no free slot
    return jnp.einsum("tes,esw->tw", combine, back), dropped[None]


def dense_moe(x, router, w_in, w_out):
    """The reference on one device: every expert on every token, weighed by the same
    routing, computed for the same groups of 16 tokens as the devices route."""
    _, combine, wanted = jax.vmap(route, (0, None))(x.reshape(N, TOKENS, WIDTH), router)
    every = jax.nn.relu(jnp.einsum("tw,ewh->teh", x, w_in))
    every = jnp.einsum("teh,ehw->tew", every, w_out)  # (token, expert, width)
    weights = combine.sum(-1).reshape(-1, N)  # (token, expert): the gate, or 0
    return jnp.einsum("te,tew->tw", weights, every), wanted.sum(0)


x = rng.standard_normal((N * TOKENS, WIDTH), np.float32)
router = rng.standard_normal((WIDTH, N), np.float32)
w_in = rng.standard_normal((N, WIDTH, HIDDEN), np.float32) / np.float32(np.sqrt(WIDTH))
w_out = rng.standard_normal((N, HIDDEN, WIDTH), np.float32) / np.float32(np.sqrt(HIDDEN))
# --8<-- [end:experts]

# %% experts_check
# --8<-- [start:experts_check]
split_moe = jax.jit(
    jax.shard_map(
        moe,
        in_specs=(P("expert"), P(), P("expert"), P("expert")),
        out_specs=(P("expert"), P("expert")),
    )
)
with jax.set_mesh(expert_mesh):
    inputs = (jax.device_put(x, P("expert")), router, *jax.device_put((w_in, w_out), P("expert")))
    compiled = split_moe.lower(*inputs).compile()
    out, dropped = compiled(*inputs)
expected, wanted = jax.jit(dense_moe)(x, router, w_in, w_out)
print(f"equal to the dense reference within 1e-5: {np.allclose(out, expected, atol=1e-5)}")
print(
    f"choices per expert, of {N * TOKENS * TOP_K}: {np.asarray(wanted, int).tolist()} "
    f"(room for {N * CAPACITY} each)"
)
print(
    f"choices dropped, per device: {np.asarray(dropped, int).tolist()}, "
    f"{int(np.asarray(dropped).sum())} of {N * TOKENS * TOP_K}"
)
print("collectives:")
show(compiled)
buffer = N * CAPACITY * WIDTH * 4
print(
    f"each all-to-all: N x capacity x width x 4 B = {buffer:,} B per device, "
    f"(N-1)/N of it to other devices: {buffer * (N - 1) // N:,} B"
)
# --8<-- [end:experts_check]


# %% ragged
# --8<-- [start:ragged]
def exchange_plan(x, router):
    """The arguments of a ragged exchange without a capacity: each expert receives exactly
    the choices routed to it, from every device."""
    _, experts = lax.top_k(x @ router, TOP_K)  # the same choices as the softmax's
    order = jnp.argsort(experts.reshape(-1))  # the choices, grouped by expert
    send_sizes = jnp.bincount(experts.reshape(-1), length=N)  # rows to each expert
    recv_sizes = lax.all_to_all(send_sizes, "expert", 0, 0, tiled=True)  # rows from each device
    # output_offsets say where the rows land in each *receiver's* buffer: each receiver
    # works out where every sender's rows start, and an all_to_all hands that to the senders.
    output_offsets = lax.all_to_all(jnp.cumsum(recv_sizes) - recv_sizes, "expert", 0, 0, tiled=True)
    # The result takes its type from the buffer it is written into: make it varying.
    room = lax.pcast(jnp.zeros((N * TOKENS, WIDTH)), "expert", to="varying")  # for all tokens
    return (
        x[order // TOP_K], room, jnp.cumsum(send_sizes) - send_sizes, send_sizes,
        output_offsets, recv_sizes,
    )  # fmt: skip


def ragged_dispatch(x, router):
    return lax.ragged_all_to_all(*exchange_plan(x, router), axis_name="expert")


def documented_exchange(rows, room, input_offsets, send_sizes, output_offsets, recv_sizes):
    """ragged_all_to_all as its docstring defines it, in NumPy, for all devices at once
    (each argument stacked by device): device d writes its rows for device e into e's room."""
    result = np.array(room)
    for d in range(N):
        for e in range(N):
            sent = rows[d, input_offsets[d, e] :][: send_sizes[d, e]]
            result[e, output_offsets[d, e] :][: len(sent)] = sent
    assert (recv_sizes == send_sizes.T).all()  # what each device expects, from whom
    return result


by_expert = dict(in_specs=(P("expert"), P()), out_specs=P("expert"))
split_plan = jax.jit(jax.shard_map(exchange_plan, **by_expert))
ragged = jax.jit(jax.shard_map(ragged_dispatch, **by_expert))
with jax.set_mesh(expert_mesh):
    plan = [np.asarray(a).reshape(N, -1, *a.shape[1:]) for a in split_plan(inputs[0], router)]
    try:
        ragged.lower(inputs[0], router).compile()
    except Exception as error:  # JaxRuntimeError
        print(f"{type(error).__name__}: {str(error).split('. ')[0]}.")
received = documented_exchange(*plan)
chosen = np.asarray(lax.top_k(x @ router, TOP_K)[1])  # (token, k), for all 128 tokens
exact = True
for e in range(N):
    rows = x[(chosen == e).any(1)]  # the tokens that chose e, by device, in token order
    exact &= np.array_equal(received[e, : len(rows)], rows) and not received[e, len(rows) :].any()
print(f"the plan through the documented semantics: each expert gets exactly its choices: {exact}")
print(f"rows per expert: {plan[-1].sum(1).tolist()}, of room for {N * TOKENS} each")
# Compiled without the hardware for 8 H100s and a TPU v5e-8 (jaxpar.compile_for), with a
# shard_map of its own: one without mesh= keeps the mesh of its first call, XLA:CPU's here.
for target in ("h100-8", "v5e-8"):
    exchange = jax.jit(jax.shard_map(ragged_dispatch, **by_expert))
    for c in summarise(compile_for(target, exchange, inputs[0], router)).collectives:
        print(f"{target}: {c.kind} of {'/'.join(c.element_types)}, {c.result_bytes:,} B")
# --8<-- [end:ragged]


# %% experts_scale
# --8<-- [start:experts_scale]
def one_hot_moe(x, router, w_in, w_out):
    """This page's layer on one device holding all 8 experts: its tokens are one routing
    group, at a capacity factor of 1."""
    send, combine, _ = route(x, router, capacity=len(x) * TOP_K // N)
    buffer = jnp.einsum("tes,tw->esw", send, x)
    done = jnp.einsum("esh,ehw->esw", jax.nn.relu(jnp.einsum("esw,ewh->esh", buffer, w_in)), w_out)
    return jnp.einsum("tes,esw->tw", combine, done)


def grouped_moe(x, router, w_in, w_out, group=256):
    """GShard's groups: the same routing within each group of 256 tokens."""
    groups = x.reshape(-1, group, x.shape[-1])
    return jax.vmap(one_hot_moe, (0, None, None, None))(groups, router, w_in, w_out).reshape(
        x.shape
    )


def sorted_moe(x, router, w_in, w_out):
    """Dropless: sort the choices by expert, multiply each expert's rows by its weights."""
    gates, experts = lax.top_k(jax.nn.softmax(x @ router), TOP_K)
    gates /= gates.sum(-1, keepdims=True)
    order = jnp.argsort(experts.reshape(-1))  # the choices, grouped by expert
    sizes = jnp.bincount(experts.reshape(-1), length=N)  # rows in each group
    hidden = jax.nn.relu(lax.ragged_dot(x[order // TOP_K], w_in, sizes))
    out = lax.ragged_dot(hidden, w_out, sizes) * gates.reshape(-1)[order, None]
    return jnp.zeros_like(x).at[order // TOP_K].add(out)  # each token: its 2 results


def dropless_reference(x, router, w_in, w_out):
    """Every expert on every token, weighed by the top-2 gates, none dropped."""
    gates, experts = lax.top_k(jax.nn.softmax(x @ router), TOP_K)
    gates /= gates.sum(-1, keepdims=True)
    every = jnp.einsum("teh,ehw->tew", jax.nn.relu(jnp.einsum("tw,ewh->teh", x, w_in)), w_out)
    return jnp.einsum("te,tew->tw", (jax.nn.one_hot(experts, N) * gates[..., None]).sum(1), every)


def compiled_cost(f, tokens):
    """Temporaries (MiB) and FLOPs (millions) of f compiled for `tokens` tokens."""
    x = jax.ShapeDtypeStruct((tokens, WIDTH), jnp.float32)
    compiled = jax.jit(f).lower(x, router, w_in, w_out).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes / 2**20
    return f"{temp:6.1f} MiB {compiled.cost_analysis()['flops'] / 1e6:7,.1f} MFLOP"


print("one device, XLA:CPU: the one-hot layer, all its tokens one routing group")
print(f"{'tokens':>8} {'send entries':>13} {'temporaries':>11} {'FLOPs':>13}")
for tokens in (256, 1024, 2048):
    entries = tokens * N * (tokens * TOP_K // N)  # (token, expert, slot)
    print(f"{tokens:>8,} {entries:>13,} {compiled_cost(one_hot_moe, tokens)}")
print(f"2,048 tokens in groups of 256:  {compiled_cost(grouped_moe, 2048)}")
print(f"2,048 tokens sorted by expert:  {compiled_cost(sorted_moe, 2048)}")
one_chip = jax.make_mesh((1,), ("x",), (AxisType.Auto,), devices=jax.devices()[:1])
tokens = jax.ShapeDtypeStruct((2048, WIDTH), jnp.float32, sharding=jax.NamedSharding(one_chip, P()))
tpu = compile_for("v5e-8", sorted_moe, tokens, router, w_in, w_out).cost_analysis()["flops"]
print(f"the same, compiled for one TPU v5e chip: {tpu / 1e6:,.1f} MFLOP")
useful = 2048 * TOP_K * 2 * (WIDTH * HIDDEN + HIDDEN * WIDTH) / 1e6  # 2 FLOPs a multiply-add
print(f"the experts' own products, 2,048 tokens x {TOP_K} choices: {useful:.1f} MFLOP")
many = rng.standard_normal((2048, WIDTH), np.float32)
sparse, dense = (jax.jit(f)(many, router, w_in, w_out) for f in (sorted_moe, dropless_reference))
print(
    f"sorted, equal to the dropless reference within 1e-5: {np.allclose(sparse, dense, atol=1e-5)}"
)
# --8<-- [end:experts_scale]
