"""A collective matmul written with jax.shard_map: the all-gather as a ring of ppermute steps, counted with jaxpar.

A product whose left operand is split by columns over 8 simulated CPU devices, computed
by gathering the operand first and by passing its blocks around a ring with `ppermute`
while multiplying, checked against NumPy, with the collectives of each compiled program
(read with `jaxpar.summarise`, on XLA:CPU) beside the bytes the formula gives.
"""

# needs 8 devices: 8 blocks, one per device; elsewhere run it with JAX_PLATFORMS=cpu
import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from counting import show

N = 8  # devices: 8 blocks
EXPLICIT = (AxisType.Explicit,)

# %% collective_matmul
# --8<-- [start:collective_matmul]
rng = np.random.default_rng(0)
ring_mesh = jax.make_mesh((N,), ("x",), axis_types=EXPLICIT)
A = rng.standard_normal((16, 64), np.float32)  # columns split over x: A[I, J_x]
B = rng.standard_normal((64, 64), np.float32)  # columns split over x: B[J, K_x]


def allgather_matmul(a, b):
    """Gather all of A's columns, then multiply: C[I, K_x]."""
    return lax.all_gather(a, "x", axis=1, tiled=True) @ b


def ring_matmul(a, b):
    """The same product, one block of A's columns at a time, passed around a ring."""
    n, me, width = lax.axis_size("x"), lax.axis_index("x"), a.shape[1]

    def step(i, carry):
        c, a = carry
        incoming = lax.ppermute(a, "x", [(j, (j - 1) % n) for j in range(n)])  # travels...
        rows = lax.dynamic_slice_in_dim(b, (me + i) % n * width, width)
        return c + a @ rows, incoming  # ...while this block is multiplied

    c = lax.pcast(jnp.zeros((a.shape[0], b.shape[1])), "x", to="varying")
    c, a = lax.fori_loop(0, n - 1, step, (c, a))
    return c + a @ lax.dynamic_slice_in_dim(b, (me + n - 1) % n * width, width)


specs = dict(in_specs=(P(None, "x"), P(None, "x")), out_specs=P(None, "x"))
with jax.set_mesh(ring_mesh):
    a, b = jax.device_put((A, B), P(None, "x"))
    results = {}
    for f in (allgather_matmul, ring_matmul):
        compiled = jax.jit(jax.shard_map(f, **specs)).lower(a, b).compile()
        results[f.__name__] = compiled(a, b)
        print(f"{f.__name__}:")
        show(compiled, N - 1)
same = np.allclose(results["ring_matmul"], results["allgather_matmul"], atol=1e-5)
exact = all(np.allclose(c, A @ B, atol=1e-5) for c in results.values())
print(f"ring_matmul equal to allgather_matmul within 1e-5: {same}")
print(f"both within 1e-5 of NumPy's A @ B: {exact}")
v = A.nbytes
print(f"A is {v:,} B; an all-gather brings (N-1)/N of it to each device: {v * (N - 1) // N:,} B")
print(f"the ring: N-1 = {N - 1} blocks of {v // N:,} B: {(N - 1) * (v // N):,} B")
# --8<-- [end:collective_matmul]
