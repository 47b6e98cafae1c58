"""Sharded matrix multiplication: the layouts that matter and the collectives they cost.

`A @ B` on a 2x4 mesh of 8 simulated CPU devices with A, B or both sharded, including the
contracting dimension. For each layout: the result's sharding, the collective XLA puts in
the compiled program (read from its HLO), and the bytes each device holds. Then control
over intermediate shardings: `out_sharding` and `jax.reshard` on an Explicit mesh,
`jax.lax.with_sharding_constraint` on an Auto mesh. The collectives are those of XLA:CPU;
GPU and TPU compilers rewrite some of them (an all-reduce then a slice: a reduce-scatter).
"""

# needs 8 devices: the lesson is a 2x4 mesh; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import re

import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
A = jnp.arange(8 * 16, dtype=jnp.float32).reshape(8, 16)  # 512 bytes
B = jnp.ones((16, 8), dtype=jnp.float32)  # 512 bytes
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def collectives(f, *args):
    """The collectives in the compiled program of f(*args), read from its HLO."""
    hlo = jax.jit(f).lower(*args).compile().as_text()
    return sorted({c for c in COLLECTIVES if f" {c}(" in hlo or f" {c}-start(" in hlo}) or ["none"]


def bytes_on_device_0(*arrays):
    return [a.addressable_shards[0].data.nbytes for a in arrays]


# --8<-- [end:setup]


# %% layouts
# --8<-- [start:layouts]
def matmul(a, b):
    return a @ b


layouts = {
    "both replicated": (P(), P()),
    "rows of A sharded": (P("x", None), P()),
    "columns of B sharded": (P(), P(None, "y")),
    "rows of A and columns of B": (P("x", None), P(None, "y")),
}
with jax.set_mesh(mesh):
    for name, (spec_a, spec_b) in layouts.items():
        a = jax.device_put(A, NamedSharding(mesh, spec_a))
        b = jax.device_put(B, NamedSharding(mesh, spec_b))
        c = matmul(a, b)
        print(f"{name}: C is {jax.typeof(c)}, collectives: {', '.join(collectives(matmul, a, b))}")
        print(f"  bytes on device 0 for A, B, C: {bytes_on_device_0(a, b, c)}")
        jax.debug.visualize_array_sharding(c)
# --8<-- [end:layouts]

# %% contracting
# --8<-- [start:contracting]
a = jax.device_put(A, NamedSharding(mesh, P(None, "y")))  # columns of A over y
b = jax.device_put(B, NamedSharding(mesh, P("y", None)))  # rows of B over y
try:
    with jax.set_mesh(mesh):
        matmul(a, b)
except Exception as error:  # jax's ShardingTypeError is not public API
    print(f"{type(error).__name__}: {str(error).split('. Please')[0]}")
# --8<-- [end:contracting]


# %% out_sharding
# --8<-- [start:out_sharding]
# Each device holds a slice of the sum's terms; say where the result should live.
def all_reduced(f, *args):
    """The per-device shapes that the compiled program of f(*args) all-reduces."""
    hlo = jax.jit(f).lower(*args).compile().as_text()
    return re.findall(r"= (\w+\[[\d,]*\])\S* all-reduce(?:-start)?\(", hlo)


with jax.set_mesh(mesh):
    for out in [P(), P("y", None)]:

        def matmul_to(a, b, out=out):
            return jnp.matmul(a, b, out_sharding=out)

        c = matmul_to(a, b)
        print(
            f"out_sharding={out}: C is {jax.typeof(c)}, collectives: {', '.join(collectives(matmul_to, a, b))}"
        )
        print(f"  bytes on device 0 for A, B, C: {bytes_on_device_0(a, b, c)}")
        print(
            f"  all-reduced on each device: {', '.join(all_reduced(matmul_to, a, b))},"
            f" then kept: {c.addressable_shards[0].data.shape}"
        )
# --8<-- [end:out_sharding]

# %% reshard
# --8<-- [start:reshard]
with jax.set_mesh(mesh):
    rows = jax.device_put(A, NamedSharding(mesh, P("x", None)))
    gathered = jax.reshard(rows, P())  # an explicit all-gather: every device gets all of A
    print("before:", jax.typeof(rows), "after jax.reshard:", jax.typeof(gathered))
    print("collectives:", ", ".join(collectives(lambda r: jax.reshard(r, P()), rows)))
# --8<-- [end:reshard]

# %% constraint
# --8<-- [start:constraint]
auto = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)
a = jax.device_put(A, NamedSharding(auto, P("x", "y")))
b = jax.device_put(B, NamedSharding(auto, P("y", None)))


def constrained_matmul(a, b):
    c = a @ b  # on Auto axes, XLA chooses this intermediate's sharding...
    # ...unless told: rows over x, and a full copy across y (the old `replicate(1)`).
    return jax.lax.with_sharding_constraint(c, NamedSharding(auto, P("x", None)))


c = jax.jit(constrained_matmul)(a, b)
print("with_sharding_constraint: C has spec", c.sharding.spec)
print("collectives:", ", ".join(collectives(constrained_matmul, a, b)))
jax.debug.visualize_array_sharding(c)
# --8<-- [end:constraint]
