"""Sharding the model itself: fully sharded data parallel and tensor parallelism with Flax NNX.

The digits MLP on a 2x4 mesh `("data", "model")` of 8 simulated CPU devices (on fewer
devices the "data" axis shrinks), its parameters annotated with `nnx.with_partitioning`:
replicated (plain data parallelism), fully sharded (FSDP), and tensor-parallel (a
column-parallel then a row-parallel layer). The model is created inside `jax.jit` under
`jax.set_mesh`, so each parameter is born in its shards; without a mesh, creating it
raises. For each layout: the parameter and optimizer-state bytes each device holds, the
collectives and the memory of the compiled training step (XLA:CPU), and the trained
parameters compared with training on a single device. Last, the tensor-parallel model on
Explicit axes, where the row-parallel product asks for an `out_sharding`.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import re
import textwrap

import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from sklearn.datasets import load_digits

digits = load_digits()
order = np.random.default_rng(0).permutation(len(digits.target))
images = (digits.data[order] / 16.0).astype(np.float32)
labels = digits.target[order].astype(np.int32)
x_train, y_train = images[:1536], labels[:1536]
BATCH, STEPS = 256, 20


def get_batch(step):
    start = (step * BATCH) % len(x_train)
    return x_train[start : start + BATCH], y_train[start : start + BATCH]


COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


# %% model
# --8<-- [start:model]
class MLP(nnx.Module):
    """The digits MLP, with a partition spec for each parameter."""

    def __init__(self, specs: dict[str, tuple], rngs: nnx.Rngs):
        kernel, zeros = nnx.initializers.lecun_normal(), nnx.initializers.zeros_init()
        self.hidden = nnx.Linear(
            64, 128, rngs=rngs,
            kernel_init=nnx.with_partitioning(kernel, specs["hidden kernel"]),
            bias_init=nnx.with_partitioning(zeros, specs["hidden bias"]),
        )  # fmt: skip
        self.out = nnx.Linear(
            128, 10, rngs=rngs,
            kernel_init=nnx.with_partitioning(kernel, specs["out kernel"]),
            bias_init=nnx.with_partitioning(zeros, specs["out bias"]),
        )  # fmt: skip

    def __call__(self, x):
        return self.out(jax.nn.relu(self.hidden(x)))


# --8<-- [end:model]


# %% layouts
# --8<-- [start:layouts]
# A 2 x 4 mesh on 8 devices; with fewer devices the "data" axis shrinks first.
MODEL = min(4, jax.device_count())
mesh = jax.make_mesh(
    (jax.device_count() // MODEL, MODEL), ("data", "model"), axis_types=(AxisType.Auto,) * 2
)
ALL = ("data", "model")  # both mesh axes together: all the devices
layouts = {
    # name: (partition spec of each parameter, partition spec of the batch)
    "replicated": (
        {
            "hidden kernel": (None, None),
            "hidden bias": (None,),
            "out kernel": (None, None),
            "out bias": (None,),
        },
        P(ALL),
    ),
    "FSDP": (
        {
            "hidden kernel": (ALL, None),
            "hidden bias": (ALL,),
            "out kernel": (ALL, None),
            "out bias": (None,),
        },
        P(ALL),
    ),
    "tensor parallel": (
        {
            "hidden kernel": (None, "model"),
            "hidden bias": ("model",),
            "out kernel": ("model", None),
            "out bias": (None,),
        },
        P("data"),
    ),
}
# --8<-- [end:layouts]


# %% create
# --8<-- [start:create]
@jax.jit(static_argnames="name")
def create(name):
    """The model of layout `name`. Called under jax.set_mesh, each annotated parameter is
    born sharded; inside jax.jit, each device computes only its own shards of it."""
    return MLP(layouts[name][0], nnx.Rngs(0))


def bytes_on_device_0(tree):
    return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(tree))


with jax.set_mesh(mesh):
    for name in layouts:
        graphdef, params = nnx.split(create(name))
        total = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
        print(f"{name}: created with {bytes_on_device_0(params)} of {total} bytes on device 0")
# --8<-- [end:create]

# %% no_mesh
# --8<-- [start:no_mesh]
try:
    create("FSDP")  # annotated parameters, and no mesh to shard them on
except ValueError as error:
    print(textwrap.fill(f"ValueError: {str(error).splitlines()[0]}", 88, subsequent_indent="  "))
with nnx.use_eager_sharding(False):  # the annotation is only recorded, not applied
    kernel = create("FSDP").hidden.kernel
print("eager sharding off:", jax.typeof(kernel[...]), "on", len(kernel[...].devices()), "device,")
print("  annotation kept:", nnx.get_partition_spec(kernel).get_value())
# --8<-- [end:no_mesh]


# %% train
# --8<-- [start:train]
def train(name, mesh=mesh):
    with jax.set_mesh(mesh):
        graphdef, params = nnx.split(create(name))
    tx = optax.sgd(learning_rate=0.1, momentum=0.9)
    # The shardings the annotations ask for, of the parameters and of the optimizer
    # state: the momentum carries its parameter's annotation, the rest is replicated.
    shardings = nnx.get_named_sharding((params, jax.eval_shape(tx.init, params)), mesh)
    opt_state = jax.jit(tx.init, out_shardings=shardings[1])(params)

    def loss_fn(params, x, y):
        logits = nnx.merge(graphdef, params)(x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    # out_shardings: the step returns parameters and optimizer state laid out as they
    # came in; on Auto axes the partitioner would otherwise choose.
    @jax.jit(
        out_shardings=(*shardings, NamedSharding(mesh, P())),
        donate_argnames=("params", "opt_state"),
    )
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    batch_sharding = NamedSharding(mesh, layouts[name][1])
    initial = params  # donated to the first step: deleted by it
    with jax.set_mesh(mesh):
        for step in range(STEPS):
            x, y = jax.device_put(get_batch(step), batch_sharding)
            params, opt_state, loss = train_step(params, opt_state, x, y)
        compiled = train_step.lower(params, opt_state, x, y).compile()
    deleted = all(leaf.is_deleted() for leaf in jax.tree.leaves(initial))
    return params, opt_state, float(loss), compiled, deleted


# --8<-- [end:train]


# %% unpinned_init
# --8<-- [start:unpinned_init]
with jax.set_mesh(mesh):
    graphdef, params = nnx.split(create("FSDP"))
total = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
tx = optax.sgd(learning_rate=0.1, momentum=0.9)
opt_state = jax.jit(tx.init)(params)  # no out_shardings: XLA chooses the layout
print(
    f"FSDP momentum from jax.jit(tx.init): {bytes_on_device_0(opt_state)} of {total} bytes on device 0"
)
# --8<-- [end:unpinned_init]


# %% compare
# --8<-- [start:compare]
trained, deleted = {}, []
for name in layouts:
    params, opt_state, loss, compiled, donated_deleted = train(name)
    trained[name] = params
    deleted.append(donated_deleted)
    hlo, memory = compiled.as_text(), compiled.memory_analysis()
    counts = {c: len(re.findall(rf"\b{c}(-start)?\(", hlo)) for c in COLLECTIVES}
    collectives = ", ".join(f"{n} {c}" for c, n in counts.items() if n) or "none"
    total = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    print(f"{name}: loss {loss:.4f}, collectives in the step (XLA:CPU): {collectives}")
    print(f"  parameter bytes on device 0: {bytes_on_device_0(params)} of {total}")
    print(f"  optimizer state bytes on device 0: {bytes_on_device_0(opt_state)} of {total}")
    print(
        f"  compiled step per device (XLA:CPU): arguments {memory.argument_size_in_bytes},"
        f" temporaries {memory.temp_size_in_bytes}, donated {memory.alias_size_in_bytes} bytes"
    )
    print("  hidden kernel spec:", params["hidden"]["kernel"][...].sharding.spec)
print("parameters donated to a step deleted by it, in every layout:", all(deleted))
# --8<-- [end:compare]


# %% same_result
# --8<-- [start:same_result]
def max_relative_difference(a, b):
    return max(
        # On the host: the runs live on different devices.
        float(np.max(np.abs(np.asarray(u) - np.asarray(v))) / np.max(np.abs(np.asarray(u))))
        for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


# The reference: the same training on a single device (a 1x1 mesh of device 0).
one_device = jax.make_mesh(
    (1, 1), ("data", "model"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:1]
)
reference, _, reference_loss, _, _ = train("replicated", mesh=one_device)
print(f"one device: loss {reference_loss:.4f}")
for name in ("replicated", "FSDP", "tensor parallel"):
    difference = max_relative_difference(reference, trained[name])
    print(f"{name} vs one device: max relative difference < 1e-5: {difference < 1e-5}")
# --8<-- [end:same_result]

# %% explicit_tp
# --8<-- [start:explicit_tp]
# The same mesh with Explicit axes: shardings are part of the types.
explicit = jax.make_mesh(mesh.axis_sizes, mesh.axis_names, axis_types=(AxisType.Explicit,) * 2)
with jax.set_mesh(explicit):
    model = create("tensor parallel")
    x = jax.device_put(x_train[:BATCH], NamedSharding(explicit, P("data")))
    try:
        jax.jit(lambda model, x: model(x))(model, x)
    except Exception as error:  # ShardingTypeError
        line = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        print(textwrap.fill(line, 88, subsequent_indent="  "))
# --8<-- [end:explicit_tp]

# %% picture
# --8<-- [start:picture]
print("tensor-parallel hidden kernel (64 x 128), columns over 'model':")
jax.debug.visualize_array_sharding(trained["tensor parallel"]["hidden"]["kernel"][...])
# --8<-- [end:picture]
