"""Sharding diagrams with jaxpar: SVG pictures of where an array lives, any number of dimensions.

`jaxpar.sharding_diagram` draws the layouts of the distributed-arrays chapter as inline
SVG, for web pages and notebooks, computed from `sharding.devices_indices_map`. Unlike
`jax.debug.visualize_array_sharding` it needs no `rich` and also draws arrays of three or
more dimensions, folding the unsharded ones.
"""

# needs 8 devices: the pictures are of 4x2 and 2x4 meshes; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import sharding_diagram

mesh = jax.make_mesh((4, 2), ("batch", "features"), axis_types=(AxisType.Explicit,) * 2)
x = jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("batch", "features")))
diagram = sharding_diagram(x)
print(diagram.description)
# --8<-- [end:setup]

# %% svg_2d
print(diagram)  # the SVG markup: paste it into a page, or let a notebook render it

# %% replicated
# --8<-- [start:replicated]
rows = jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("batch")))
print(sharding_diagram(rows).description)
# --8<-- [end:replicated]

# %% svg_replicated
print(sharding_diagram(rows))

# %% three_d
# --8<-- [start:three_d]
wide = jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Explicit,) * 2)
activations = jax.device_put(jnp.zeros((2, 8, 4)), NamedSharding(wide, P(None, "x", "y")))
three_d = sharding_diagram(activations)
print(jax.typeof(activations))
print(three_d.description)
print("folded dimensions:", three_d.layout.folded)
# --8<-- [end:three_d]

# %% svg_three_d
print(three_d)

# %% no_sharding
# --8<-- [start:no_sharding]
# A sharding without an array: give the shape.
print(sharding_diagram(NamedSharding(wide, P("y", "x")), shape=(16, 16)).description)
# --8<-- [end:no_sharding]
