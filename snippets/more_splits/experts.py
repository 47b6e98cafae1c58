"""A mixture-of-experts layer written with jax.shard_map: all_to_all at a fixed capacity, counted with jaxpar.

One expert per simulated CPU device, tokens routed top-2 at a fixed capacity and
exchanged with `all_to_all`, checked against a dense computation with the same routing;
the collectives (read with `jaxpar.summarise`, on XLA:CPU) beside the bytes the formula
gives; `ragged_all_to_all`, which XLA:CPU cannot run, planned and compiled for GPUs and
TPUs with `jaxpar.compile_for`; and what one-hot routing costs as the tokens routed
together grow, beside routing in groups and sorting by expert for `jax.lax.ragged_dot`.
"""

# needs 8 devices: 8 experts, one per device; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jaxpar import compile_for, summarise

from counting import show

N = 8  # devices: 8 experts
EXPLICIT = (AxisType.Explicit,)

# %% experts
# --8<-- [start:experts]
rng = np.random.default_rng(0)
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
