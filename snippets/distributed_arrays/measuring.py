"""Measuring sharded code honestly with jaxpar.benchmark: warm-up, blocking, the median.

A 1024x1024 matrix product, unsharded on one device and sharded by rows over all devices
(8 simulated CPU devices here, or a machine's accelerators if their count divides 1024),
timed with `jaxpar.benchmark`: one call at a time (latency), then independent calls
dispatched back to back (throughput). The timings
go to standard error: they depend on the machine, so the recorded output (and the page)
shows only the method and the checks.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import sys

import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import benchmark

n = jax.device_count()
mesh = jax.make_mesh((n,), ("rows",), axis_types=(AxisType.Explicit,))
a = jax.random.normal(jax.random.key(0), (1024, 1024))
b = jax.random.normal(jax.random.key(1), (1024, 1024))
a_rows = jax.device_put(a, NamedSharding(mesh, P("rows", None)))
b_everywhere = jax.device_put(b, NamedSharding(mesh, P()))
matmul = jax.jit(jnp.matmul)
# --8<-- [end:setup]

# %% async
# --8<-- [start:async]
result = matmul(a, b)  # returns at once: the work is queued, not necessarily done
result.block_until_ready()  # wait for it; a timer must stop only after this
print("ready after block_until_ready:", result.is_ready())
# --8<-- [end:async]

# %% timing
# --8<-- [start:timing]
one_device = benchmark(matmul, a, b, warmup=2, repeats=10)
with jax.set_mesh(mesh):
    sharded = benchmark(matmul, a_rows, b_everywhere, warmup=2, repeats=10)
    # Throughput: 4 independent calls dispatched back to back, then one wait; the time is
    # per call.
    pipelined = benchmark(matmul, a_rows, b_everywhere, warmup=2, repeats=5, pipeline=4)
    same = np.allclose(matmul(a_rows, b_everywhere), result, atol=1e-3)
print(f"timed {one_device.repeats} calls each, after 2 warm-up calls that include compilation")
print(f"pipelined: {pipelined.repeats} runs of {pipelined.pipeline} calls, one wait per run")
print("sharded result equals unsharded:", same)
# Timings depend on the machine: printed to standard error, not recorded.
print(f"one device:            {one_device}", file=sys.stderr)
print(f"sharded over {n} devices: {sharded}", file=sys.stderr)
print(f"sharded, pipelined:    {pipelined}", file=sys.stderr)
# --8<-- [end:timing]
