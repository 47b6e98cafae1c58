"""Sharding the model itself: fully sharded data parallel and tensor parallelism with Flax NNX.

The digits MLP on a 2x4 mesh `("data", "model")` of 8 simulated CPU devices, its
parameters annotated with `nnx.with_partitioning`: replicated (plain data parallelism),
fully sharded (FSDP), and tensor-parallel (a column-parallel then a row-parallel layer).
For each: the parameter bytes each device holds, the collectives in the compiled training
step, and the trained parameters compared with training on a single device.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
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
mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
ALL = ("data", "model")  # both mesh axes together: 8 ways
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


# %% train
# --8<-- [start:train]
def train(specs, batch_spec, mesh=mesh):
    with jax.set_mesh(mesh):
        graphdef, params = nnx.split(MLP(specs, nnx.Rngs(0)))
        # Place each parameter as its annotation says.
        shardings = jax.tree.map(
            lambda spec: NamedSharding(mesh, spec), nnx.get_partition_spec(params)
        )
        params = jax.device_put(params, shardings)
        tx = optax.sgd(learning_rate=0.1, momentum=0.9)
        opt_state = tx.init(params)  # the momentum is sharded like the parameters

        def loss_fn(params, x, y):
            logits = nnx.merge(graphdef, params)(x)
            return -(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 10)).sum(-1).mean()

        @jax.jit
        def train_step(params, opt_state, x, y):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        batch_sharding = NamedSharding(mesh, batch_spec)
        for step in range(STEPS):
            start = (step * BATCH) % len(x_train)
            x = jax.device_put(x_train[start : start + BATCH], batch_sharding)
            y = jax.device_put(y_train[start : start + BATCH], batch_sharding)
            params, opt_state, loss = train_step(params, opt_state, x, y)
        hlo = train_step.lower(params, opt_state, x, y).compile().as_text()
    collectives = [c for c in COLLECTIVES if f" {c}(" in hlo or f" {c}-start(" in hlo]
    return params, float(loss), collectives


# --8<-- [end:train]


# %% compare
# --8<-- [start:compare]
def bytes_on_device_0(params):
    return sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(params))


trained = {}
for name, (specs, batch_spec) in layouts.items():
    params, loss, collectives = train(specs, batch_spec)
    trained[name] = params
    total = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    print(f"{name}: loss {loss:.4f}, collectives: {', '.join(collectives)}")
    print(f"  parameter bytes on device 0: {bytes_on_device_0(params)} of {total}")
    print("  hidden kernel spec:", params["hidden"]["kernel"][...].sharding.spec)
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
one_device = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("data", "model"))
reference, _, _ = train(*layouts["replicated"], mesh=one_device)
for name in ("replicated", "FSDP", "tensor parallel"):
    difference = max_relative_difference(reference, trained[name])
    print(f"{name} vs one device: max relative difference < 1e-5: {difference < 1e-5}")
# --8<-- [end:same_result]

# %% picture
# --8<-- [start:picture]
print("tensor-parallel hidden kernel (64 x 128), columns over 'model':")
jax.debug.visualize_array_sharding(trained["tensor parallel"]["hidden"]["kernel"][...])
# --8<-- [end:picture]
