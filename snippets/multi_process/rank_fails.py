"""A rank that fails: what `python -m jaxpar.launch` does when one rank raises.

Rank 1 raises after the first step, while rank 0 waits for it inside the next collective.
The launcher shows rank 1's traceback once, stops rank 0 at once, and exits with rank 1's
status, instead of hanging at JAX's shutdown barrier:

    python -m jaxpar.launch --nproc 2 --devices-per-process 1 rank_fails.py
"""

# jaxpar.launch: --nproc 2 --devices-per-process 1 --timeout 60
# exits with status 1: rank 1 raises on purpose

import jax

from jaxpar import initialize_distributed

initialize_distributed()

import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

# --8<-- [start:fail]
mesh = jax.make_mesh((jax.device_count(),), ("data",))
batch = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), np.ones(1))
total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))

if jax.process_index() == 0:
    print("step 0: every rank joins the all-reduce")
total(batch).block_until_ready()
if jax.process_index() == 1:
    raise ValueError("rank 1 found a corrupt batch")
total(batch).block_until_ready()  # rank 0 waits here for rank 1, which never comes
print("never printed")
# --8<-- [end:fail]
