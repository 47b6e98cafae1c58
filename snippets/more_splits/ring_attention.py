"""Causal ring attention written with jax.shard_map, contiguous and zig-zag, counted with jaxpar.

Attention over a sequence split into 8 blocks on a "seq" axis, one per simulated CPU
device: K and V passed around a ring with `ppermute`, in contiguous and zig-zag layouts,
beside all-gather context parallelism, each checked against full attention; the work each
device does, the collectives of each (read with `jaxpar.summarise`, on XLA:CPU) beside the
bytes the formula gives, and what the backward pass keeps per device, with and without
`jax.checkpoint`.
"""

# needs 8 devices: 8 sequence blocks, one per device; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import collections
import contextlib
import io
import re

import jax.ad_checkpoint
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jaxpar import summarise

from counting import show

N = 8  # devices: 8 sequence blocks
EXPLICIT = (AxisType.Explicit,)

# %% ring_attention
# --8<-- [start:ring_attention]
rng = np.random.default_rng(0)
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
