"""From PyTorch to JAX, the JAX half: the safetensors checkpoint of `save_for_jax.py` loaded into the sharded MLP, shard by shard.

Each device reads only its own block of each tensor from the file
(`jax.make_array_from_callback` asks for it, and safetensors' `get_slice` reads only those
bytes), transposing PyTorch's `(outputs, inputs)` weights into Flax's `(inputs, outputs)`
kernels on the way: no whole tensor is ever read into memory, and with several
processes each reads only the blocks of its own devices. The model then computes the
loss on the batch after the last one PyTorch trained on, which must equal the loss
`save_for_jax.py` printed. Both use the folder `digits-from-pytorch` in the folder they
run in.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# numbers within 5e-6 in cell next_loss: XLA:CPU picks its float32 matmul kernels by CPU, and the last digit of a loss can move (1e-6 seen)

# output checked through save_for_jax.py: it reads the checkpoint that one writes

# %% setup
from pathlib import Path

import optax
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from safetensors import safe_open

from same_start import STEPS, batch, flax_mlp

CHECKPOINT = Path("digits-from-pytorch")  # in the folder it runs in
mesh = jax.make_mesh(
    (jax.device_count(),), ("data",), axis_types=(AxisType.Auto,)
)  # as sharded_mlp.py

# %% load
# --8<-- [start:load]
# Flax's name -> PyTorch's name, and where each parameter goes (FSDP over "data").
FROM_PYTORCH = {"hidden.kernel": "0.weight", "hidden.bias": "0.bias",
                "out.kernel": "2.weight", "out.bias": "2.bias"}  # fmt: skip
SPECS = {"hidden.kernel": P(None, "data"), "hidden.bias": P("data"),
         "out.kernel": P("data", None), "out.bias": P()}  # fmt: skip
read_by_device_0 = 0


def load(name: str, tensors) -> jax.Array:
    """One parameter, sharded by SPECS[name], each device reading only its block."""
    stored = tensors.get_slice(FROM_PYTORCH[name])  # reads nothing yet
    transpose = name.endswith("kernel")  # nn.Linear keeps (outputs, inputs)
    shape = tuple(stored.get_shape()[::-1] if transpose else stored.get_shape())
    sharding = NamedSharding(mesh, SPECS[name])

    def read(index: tuple[slice, ...]):  # this device's block, in Flax's layout
        global read_by_device_0
        block = stored[index[::-1]].T if transpose else stored[index]
        if index == sharding.addressable_devices_indices_map(shape)[jax.devices()[0]]:
            read_by_device_0 += block.nbytes
        return block

    return jax.make_array_from_callback(shape, sharding, read)


(file,) = CHECKPOINT.glob("*.safetensors")  # the consolidated file of whole tensors
with safe_open(file, framework="numpy") as tensors:
    params = {name: load(name, tensors) for name in FROM_PYTORCH}
print(f"device 0 read {read_by_device_0:,} of {file.stat().st_size:,} bytes")
# --8<-- [end:load]

# %% next_loss
# --8<-- [start:next_loss]
graphdef, state = nnx.split(nnx.eval_shape(flax_mlp))  # the model's structure, no weights
for name, value in params.items():
    layer, kind = name.split(".")
    state[layer][kind] = nnx.Param(value)
model = nnx.merge(graphdef, state)


@jax.jit
def loss_on(model, images, labels):
    logits = model(images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


with jax.set_mesh(mesh):
    images, labels = jax.device_put(batch(STEPS), P("data"))
    print(f"JAX, loss on the next batch: {loss_on(model, images, labels):.6f}")
# --8<-- [end:next_loss]
