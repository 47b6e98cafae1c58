"""Compiling ahead of time, and what the compiler says a step needs: memory and FLOPs.

The training step of the FSDP page (the digits MLP, momentum SGD, donated parameters and
optimizer state) is compiled ahead of time from shapes and shardings alone, replicated
and fully sharded, before any array exists. `compiled.memory_analysis()` gives the bytes
of the arguments, outputs, aliased outputs and temporaries on each device;
`compiled.cost_analysis()` the FLOPs. Then the arrays are created for real, and
`jax.live_arrays()` counts what device 0 holds; `device.memory_stats()` is shown for
what it is on CPU. Compile times go to standard error.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import sys
import time

import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

n = jax.device_count()
mesh = jax.make_mesh((n,), ("data",), axis_types=(AxisType.Auto,))
tx = optax.sgd(0.1, momentum=0.9)
SHAPES = {
    "hidden": {"kernel": (64, 128), "bias": (128,)},
    "out": {"kernel": (128, 10), "bias": (10,)},
}
LAYOUTS = {  # a partition spec per parameter, as on the FSDP page
    "replicated": {"hidden": {"kernel": P(), "bias": P()}, "out": {"kernel": P(), "bias": P()}},
    "FSDP": {  # first dimension over all devices; the 10-entry output bias stays whole
        "hidden": {"kernel": P("data"), "bias": P("data")},
        "out": {"kernel": P("data"), "bias": P()},
    },
}
BATCH = 256  # examples per step, split over the devices


def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["hidden"]["kernel"] + params["hidden"]["bias"])
    logits = h @ params["out"]["kernel"] + params["out"]["bias"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def shardings_of(layout):
    """The shardings of the parameters and of the optimizer state (which mirrors them)."""
    params = jax.tree.map(lambda spec: NamedSharding(mesh, spec), LAYOUTS[layout])
    abstract = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct(s, jnp.float32), SHAPES, is_leaf=is_shape
    )
    state = optax.tree_map_params(
        tx, lambda _, sharding: sharding, jax.eval_shape(tx.init, abstract), params,
        transform_non_params=lambda _: NamedSharding(mesh, P()),
    )  # fmt: skip
    return params, state


def is_shape(x):
    return isinstance(x, tuple) and all(isinstance(d, int) for d in x)


def make_step(layout):
    params, state = shardings_of(layout)

    @jax.jit(
        out_shardings=(params, state, NamedSharding(mesh, P())),
        donate_argnames=("params", "opt_state"),
    )
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


# --8<-- [end:setup]


# %% aot
# --8<-- [start:aot]
def abstract_arguments(layout):
    """Shapes, dtypes and shardings of the step's arguments: no array is created."""
    params, state = shardings_of(layout)
    abstract = jax.tree.map(
        lambda shape, sharding: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=sharding),
        SHAPES, params, is_leaf=is_shape,
    )  # fmt: skip
    opt_state = jax.tree.map(
        lambda a, sharding: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding),
        jax.eval_shape(tx.init, abstract), state,
    )  # fmt: skip
    batch = NamedSharding(mesh, P("data"))
    x = jax.ShapeDtypeStruct((BATCH, 64), jnp.float32, sharding=batch)
    y = jax.ShapeDtypeStruct((BATCH,), jnp.int32, sharding=batch)
    return abstract, opt_state, x, y


compiled = {}
for layout in LAYOUTS:
    step = make_step(layout)
    start = time.perf_counter()
    lowered = step.lower(*abstract_arguments(layout))  # traced and lowered to StableHLO
    lowered_at = time.perf_counter()
    compiled[layout] = lowered.compile()  # compiled by XLA for these shapes and shardings
    print(f"{layout}: compiled ahead of time, before any array exists")
    print(
        f"{layout}: lowering {lowered_at - start:.3f} s, compiling "
        f"{time.perf_counter() - lowered_at:.3f} s",
        file=sys.stderr,
    )
# --8<-- [end:aot]


# %% memory
# --8<-- [start:memory]
def bytes_per_device(tree):
    """Bytes one device holds of each abstract array, from its sharding's shard shape."""
    return sum(
        a.dtype.itemsize * int(np.prod(a.sharding.shard_shape(a.shape)))
        for a in jax.tree.leaves(tree)
    )


for layout, program in compiled.items():
    params, opt_state, x, y = abstract_arguments(layout)
    memory = program.memory_analysis()  # per device, before anything runs
    parts = [bytes_per_device(t) for t in (params, opt_state, (x, y))]
    print(f"{layout}, bytes per device (XLA:CPU):")
    print(f"  arguments   {memory.argument_size_in_bytes:6}"
          f" = parameters {parts[0]} + optimizer state {parts[1]} + batch {parts[2]}:"
          f" {memory.argument_size_in_bytes == sum(parts)}")  # fmt: skip
    print(f"  outputs     {memory.output_size_in_bytes:6}")
    print(f"  aliased     {memory.alias_size_in_bytes:6} (outputs written over donated arguments)")
    print(f"  temporaries {memory.temp_size_in_bytes:6}")
    print(f"  peak        {memory.peak_memory_in_bytes:6}")
# --8<-- [end:memory]

# %% cost
# --8<-- [start:cost]
for layout, program in compiled.items():
    cost = program.cost_analysis()  # per device: a dict of XLA's estimates
    print(f"{layout}: {cost['flops']:,.0f} FLOPs, {cost['bytes accessed']:,.0f} bytes accessed")
# --8<-- [end:cost]

# %% live
# --8<-- [start:live]
print("memory_stats() on", jax.devices()[0].platform, "->", jax.devices()[0].memory_stats())


def on_device_0():
    """Bytes of the live arrays on device 0: what the program holds there. A shard read
    through .addressable_shards is a live array too, a view of the same buffer: each
    buffer is counted once."""
    device, buffers = jax.devices()[0], {}
    for a in jax.live_arrays():
        for shard in a.addressable_shards:
            if shard.device == device:
                buffers[shard.data.unsafe_buffer_pointer()] = shard.data.nbytes
    return sum(buffers.values())


layout = "FSDP"
params_sharding, state_sharding = shardings_of(layout)


@jax.jit(out_shardings=(params_sharding, state_sharding))
def init(key):  # born sharded: no device ever holds the whole model or optimizer state
    keys = iter(jax.random.split(key, 4))
    params = jax.tree.map(
        lambda shape: 0.1 * jax.random.normal(next(keys), shape), SHAPES, is_leaf=is_shape
    )
    return params, tx.init(params)


before = on_device_0()
params, opt_state = init(jax.random.key(0))
batch = NamedSharding(mesh, P("data"))
x = jax.device_put(np.ones((BATCH, 64), np.float32), batch)  # host data, split
y = jax.device_put(np.zeros(BATCH, np.int32), batch)
held = on_device_0() - before
print(f"{layout}: device 0 holds {held} bytes of parameters, optimizer state and batch")
params, opt_state, loss = compiled[layout](params, opt_state, x, y)  # the AOT program
print(f"after one step: {on_device_0() - before - loss.nbytes} bytes, and the loss")
try:
    compiled[layout](params, opt_state, x[:128], y[:128])
except TypeError as error:
    print("TypeError:", str(error).splitlines()[0].split(". ")[0])
# --8<-- [end:live]
