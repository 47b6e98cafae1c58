"""Sharding the model in JAX, the twin of `fsdp2_and_tp.py`: one training step, three tables of specs (jaxpar counts the collectives).

The digits MLP starts from `same_start.py`'s weights three times, as in the PyTorch twin:
fully sharded over a mesh axis `"data"` (FSDP), split column- then row-wise over an axis
`"model"` (tensor parallelism), and both on a 2-D mesh. In PyTorch each layout is a
different wrapper (`fully_shard`, `parallelize_module`); in JAX it is only where each
parameter and the batch are placed, and `jax.jit` compiles the same step for each. It
prints the losses, which must equal the PyTorch twin's, the parameter bytes each device
keeps, and the collectives of the compiled step on XLA:CPU and, compiled without the
hardware, on XLA:GPU (8 H100s).
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# numbers within 5e-6 in cells fsdp, tp, fsdp_tp: XLA:CPU picks its float32 matmul kernels by CPU, and the last digit of a loss can move (1e-6 seen)

# %% setup
import optax
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import jaxpar

from same_start import LEARNING_RATE, STEPS, WEIGHT_DECAY, batch, flax_mlp

n = jax.device_count()
graphdef, initial = nnx.split(flax_mlp())
initial = jax.device_get(initial)  # on the host: each layout below copies it to its mesh
# Auto axes: the compiler decides where to gather and reduce, as FSDP2's hooks and
# DTensor's rules do in PyTorch (Explicit axes would ask for out_sharding in the matmuls).
AUTO = AxisType.Auto
optimizer = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)


def loss_fn(params, images, labels):
    logits = nnx.merge(graphdef, params)(images)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


# --8<-- [start:train]
@jax.jit(donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, images, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def train(mesh: jax.sharding.Mesh, specs: dict[str, P], batch_spec: P) -> None:
    """Train 8 steps with the parameters and batches placed by `specs` and `batch_spec`;
    print the losses, a device's parameter bytes and the step's collectives."""
    with jax.set_mesh(mesh):
        params = jax.device_put(initial, nnx.State({
            layer: {kind: specs[f"{layer}.{kind}"] for kind in ("kernel", "bias")}
            for layer in ("hidden", "out")
        }))  # fmt: skip
        opt_state = optimizer.init(params)  # AdamW's moments sharded like the parameters
        losses = []
        for step in range(STEPS):
            images, labels = jax.device_put(batch(step), batch_spec)
            params, opt_state, loss = train_step(params, opt_state, images, labels)
            losses.append(loss)
        print("  losses:", " ".join(f"{loss:.6f}" for loss in jax.device_get(losses)))
        kept = sum(p.addressable_shards[0].data.nbytes for p in jax.tree.leaves(params))
        print(f"  parameters: {kept:,} bytes on device 0")
        for target in ("cpu", "h100-8"):
            compiled = jaxpar.compile_for(target, train_step, params, opt_state, images, labels)
            kinds = jaxpar.summarise(compiled).by_kind()
            counted = ", ".join(f"{k} {c} ({b:,} bytes)" for k, (c, b) in kinds.items())
            print(f"  {jaxpar.TARGETS[target].backend}: {counted or 'no collective'}")


# --8<-- [end:train]

# %% fsdp
# --8<-- [start:fsdp]
mesh = jax.make_mesh((n,), ("data",), axis_types=(AUTO,))
fsdp = {
    "hidden.kernel": P(None, "data"), "hidden.bias": P("data"),
    "out.kernel": P("data", None), "out.bias": P(),  # 10 classes: not split 8 ways
}  # fmt: skip
print(f"FSDP over {n} devices, each its share of the batch:")
train(mesh, fsdp, batch_spec=P("data"))
# --8<-- [end:fsdp]

# %% tp
# --8<-- [start:tp]
mesh = jax.make_mesh((n,), ("model",), axis_types=(AUTO,))
tp = {
    "hidden.kernel": P(None, "model"), "hidden.bias": P("model"),  # column-parallel
    "out.kernel": P("model", None), "out.bias": P(),  # row-parallel
}  # fmt: skip
print(f"tensor parallelism over {n} devices, each the whole batch:")
train(mesh, tp, batch_spec=P())
# --8<-- [end:tp]

# %% fsdp_tp
# --8<-- [start:fsdp_tp]
mesh = jax.make_mesh((min(n, 2), n // min(n, 2)), ("data", "model"), axis_types=(AUTO,) * 2)
fsdp_tp = {
    "hidden.kernel": P("data", "model"), "hidden.bias": P("model"),
    "out.kernel": P("model", "data"), "out.bias": P(),
}  # fmt: skip
print(f"FSDP over data x tensor parallelism over model, mesh {tuple(mesh.shape.values())}:")
train(mesh, fsdp_tp, batch_spec=P("data"))
# --8<-- [end:fsdp_tp]
