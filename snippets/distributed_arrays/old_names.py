"""Corrections to older material: names from blog posts and books, checked against JAX 0.12.

Each row of the corrections table: whether the old name still exists (and whether it warns
that it is deprecated), and the code that replaces it, run on 8 simulated CPU devices.
"""

# needs 8 devices: the table's 2x4 mesh and 8-way pmap; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import importlib
import warnings

import jax.numpy as jnp
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


def exists(module: str, name: str | None = None) -> bool:
    """Whether `module` imports (and has `name`)."""
    try:
        imported = importlib.import_module(module)
    except ImportError:
        return False
    return name is None or hasattr(imported, name)


# %% gone
# --8<-- [start:gone]
old_names = [
    ("jax", "tree_map"),
    ("jax", "device_put_replicated"),
    ("jax", "device_put_sharded"),
    ("jax.numpy", "random"),
    ("jax.sharding", "PositionalSharding"),
    ("jax.experimental.maps", None),
    ("jax.interpreters.pxla", "ShardedDeviceArray"),
    ("jax.sharding", "use_mesh"),
    ("jax", "xla_computation"),
    ("jax.experimental", "PartitionSpec"),
    ("jax.experimental.pjit", "PartitionSpec"),
    ("jax.sharding", "PmapSharding"),
    ("jax.lax", "pvary"),
]
for module, name in old_names:
    print(f"{module + '.' + name if name else module:40s} exists: {exists(module, name)}")
# --8<-- [end:gone]

# %% attributes
# --8<-- [start:attributes]
x = jnp.arange(8.0)
for old in ("device_buffers", "device_buffer"):
    try:
        getattr(x, old)
    except AttributeError as error:
        print(f"x.{old}: {error}")
try:
    x.device()
except TypeError as error:
    print(f"x.device(): {error}; x.device is a property: {x.device}")
# The older Mesh(mesh_utils.create_device_mesh(...)) still runs, but with Auto axes, while
# jax.make_mesh gives Explicit ones: the same code, under other typing rules.
older = Mesh(mesh_utils.create_device_mesh((2, 4)), ("x", "y"))
print("Mesh(create_device_mesh((2, 4)), ...):", older.axis_types)
print("jax.make_mesh((2, 4), ...):", jax.make_mesh((2, 4), ("x", "y")).axis_types)
# --8<-- [end:attributes]

# %% random
# --8<-- [start:random]
# Old posts: jnp.random.rand(8, 4), which never existed. Random numbers take a key:
x = jax.random.uniform(jax.random.key(0), (8, 4))
print(jax.typeof(x), f"min {x.min():.3f} max {x.max():.3f}")
# --8<-- [end:random]

# %% positional
# --8<-- [start:positional]
# Old: PositionalSharding(jax.devices()).reshape(2, 4), and .replicate(1) for a copy
# along the second mesh dimension. Today: a mesh with named axes and a PartitionSpec.
mesh = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
tiled = jax.device_put(x, NamedSharding(mesh, P("x", "y")))
replicated_over_y = jax.device_put(x, NamedSharding(mesh, P("x", None)))  # was .replicate(1)
print("reshape(2, 4):", jax.typeof(tiled), " replicate(1):", jax.typeof(replicated_over_y))
# --8<-- [end:positional]

# %% tree
# --8<-- [start:tree]
params = {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}
print("jax.tree.map:", jax.tree.map(lambda a: a.shape, params))
# --8<-- [end:tree]

# %% arrays
# --8<-- [start:arrays]
out = jax.pmap(lambda v: v + 1)(np.arange(8.0))
print(
    "pmap returns a jax.Array:",
    isinstance(out, jax.Array),
    "with",
    len(out.addressable_shards),
    "shards",
)
# --8<-- [end:arrays]


# %% pjit_and_mesh
# --8<-- [start:pjit_and_mesh]
def scale(a):
    return a * 2


placed = jax.device_put(np.ones((8, 4), np.float32), NamedSharding(mesh, P("x", None)))
# Old: pjit(scale, in_shardings=..., out_shardings=...) under `with mesh:`.
jitted = jax.jit(scale, out_shardings=NamedSharding(mesh, P("x", "y")))
with jax.set_mesh(mesh):  # today's way to make a mesh current
    result = jitted(placed)
print("jax.jit with out_shardings:", jax.typeof(result))


def old_spelling():
    from jax.experimental.pjit import pjit  # deprecated

    with mesh:  # deprecated
        return pjit(scale, out_shardings=NamedSharding(mesh, P("x", "y")))(placed)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old = old_spelling()
print("pjit under `with mesh:` still runs:", jax.typeof(old), "and warns:")
for warning in caught:
    print(f"  {warning.category.__name__}: {str(warning.message).splitlines()[0]}")
# --8<-- [end:pjit_and_mesh]

# %% shard_map
# --8<-- [start:shard_map]
row_sums = jax.jit(
    jax.shard_map(
        lambda block: block.sum(axis=1),
        mesh=mesh,
        in_specs=P("x", None),
        out_specs=P("x"),
        check_vma=True,
    )
)
# Old: xmap over a named axis. Today, for per-example code: vmap with spmd_axis_name.
doubled = jax.jit(jax.vmap(lambda row: row * 2, spmd_axis_name="x"))
with jax.set_mesh(mesh):
    sums, twice = row_sums(placed), doubled(placed)
print("jax.shard_map:", jax.typeof(sums), sums.tolist())
print("jax.vmap(..., spmd_axis_name='x'):", jax.typeof(twice))


def old_shard_map_spelling():
    from jax.experimental.shard_map import shard_map  # deprecated

    sum_rows = shard_map(
        lambda block: block.sum(axis=1), mesh, P("x", None), P("x"), check_rep=True
    )
    return jax.jit(sum_rows)(placed)


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    old = old_shard_map_spelling()
print("jax.experimental.shard_map still runs:", old.tolist(), "and warns:")
for warning in caught:
    print(f"  {warning.category.__name__}: {str(warning.message).splitlines()[0]}")
# --8<-- [end:shard_map]
