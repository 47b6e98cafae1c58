"""Counting collectives with jaxpar: the helper that the scripts of "More ways to split" share.

`show(compiled, trips)` prints each kind of collective in a compiled program (its HLO
opcode, `-start` where it is asynchronous): how many, whether it runs once or in a loop,
and the bytes of their results on one device. The chapter's scripts import it: keep them
beside it. Run alone, it shows what a sum over devices communicates.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jaxpar import summarise


def show(compiled, trips=None):
    """Print each kind of collective of a compiled program (its HLO opcode, `-start` where
    it is asynchronous): how many, where, and the bytes of their results on one device.
    One in a loop body appears once in the HLO but runs once per iteration: its bytes are
    multiplied by `trips`, the loop's trip count."""
    found = {}
    for c in summarise(compiled).collectives:
        kind = c.kind + ("-start" if c.asynchronous else "")
        count, size = found.get((kind, c.in_loop), (0, 0))
        found[kind, c.in_loop] = (count + 1, size + c.result_bytes)
    for (kind, in_loop), (count, size) in sorted(found.items()):
        if in_loop:
            print(f"  {kind} x{count} in the loop: {size:,} B x {trips} trips = {size * trips:,} B")
        else:
            print(f"  {kind} x{count} once: {size:,} B")


# --8<-- [end:setup]

# %% example
if __name__ == "__main__":
    mesh = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(AxisType.Explicit,))
    with jax.set_mesh(mesh):
        x = jax.device_put(np.ones((jax.device_count(), 4), np.float32), P("x"))
        print("the sum of an array split over x:")
        show(jax.jit(jnp.sum).lower(x).compile())
