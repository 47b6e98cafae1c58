"""Debugging a sharded program: NaNs, printing inside `jax.jit`, HLO dumps, and the errors readers search for.

A step that takes the log of a negative number is run under `jax.debug_nans`, which names
the operation, and under `checkify`, which returns the error as a value. `jax.debug.print`
and `jax.debug.callback` report values from inside a sharded `jax.jit`. XLA's dump of one
compile (`xla_dump_to`, `xla_dump_hlo_pass_re`) shows a bfloat16 all-reduce before and after
the XLA:CPU pass that widens it. Then four sharding mistakes raise their errors, whose
first lines are printed as JAX words them, each followed by its fix.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import os
import re
import tempfile

import jax.numpy as jnp
from jax.experimental import checkify
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((jax.device_count(),), ("data",), axis_types=(AxisType.Explicit,))
with jax.set_mesh(mesh):
    x = jax.device_put(jnp.linspace(-1.0, 1.0, 16 * 8).reshape(16, 8), P("data", None))
    w = jax.device_put(jnp.full((8, 4), 0.5), P())


def loss(w, x):
    """A loss that goes wrong: the log of a number that is negative for some rows."""
    return jnp.mean(jnp.log(1.0 + x @ w))


def first_line(error):
    """The error as a traceback's last line starts, and where that ends with a colon, the
    two lines that follow it."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    shown = lines[:3] if lines[0].endswith(":") else lines[:1]
    return f"{type(error).__name__}: " + "\n    ".join(shown)


# --8<-- [end:setup]

# %% nans
# --8<-- [start:nans]
with jax.set_mesh(mesh):
    print("loss:", jax.jit(loss)(w, x))  # no error: a NaN is a value like any other
    with jax.debug_nans(True):  # or JAX_DEBUG_NANS=1, or jax.config.update("jax_debug_nans", True)
        try:
            jax.jit(loss)(w, x)
        except FloatingPointError as error:
            print(first_line(error))
# --8<-- [end:nans]

# %% checkify
# --8<-- [start:checkify]
checked = jax.jit(checkify.checkify(loss, errors=checkify.float_checks))
with jax.set_mesh(mesh):
    error, value = checked(w, x)  # the error comes back as a value, no exception inside jit
print(f"value {value}, error: {error.get().splitlines()[0]}")
# --8<-- [end:checkify]


# %% debug_print
# --8<-- [start:debug_print]
@jax.jit
def inspected_loss(w, x):
    y = 1.0 + x @ w
    jax.debug.print("smallest argument of the log: {y:.3f}", y=y.min())  # printed when it runs
    jax.debug.callback(lambda n: negatives.append(int(n)), (y <= 0).sum())  # any Python code
    return jnp.mean(jnp.log(y))


negatives = []
with jax.set_mesh(mesh):
    jax.block_until_ready(inspected_loss(w, x))
print(f"the callback received: {negatives} (arguments of the log that are not positive)")
# --8<-- [end:debug_print]


# %% dump
# --8<-- [start:dump]
def gradient(w, x):
    """The gradient of a bfloat16 loss over a batch split over "data": an all-reduce."""
    return jax.grad(lambda w: jnp.mean(x @ w).astype(jnp.float32))(w)


with tempfile.TemporaryDirectory() as folder, jax.set_mesh(mesh):
    bf16 = w.astype(jnp.bfloat16), x.astype(jnp.bfloat16)
    options = {"xla_dump_to": folder, "xla_dump_hlo_pass_re": "all-reduce-promotion"}
    jax.jit(gradient).lower(*bf16).compile(options)
    for name in sorted(os.listdir(folder)):  # module_0001.jit_gradient.<stage>.txt, ...
        stage = re.sub(r"^module_\d+\.jit_gradient\.", "", name)
        if "all-reduce-promotion" in stage or stage.endswith("optimizations.txt"):
            text = open(os.path.join(folder, name)).read()
            reduces = re.findall(r"= (\w+)\[[\d,]*\][^ ]* all-reduce\(", text)
            print(f"{stage}\n    all-reduces of: {', '.join(reduces) or 'none'}")
# --8<-- [end:dump]


# %% errors
# --8<-- [start:errors]
def show(mistake):
    """Run `mistake` and print the first line of what it raises."""
    try:
        mistake()
        print("  no error")
    except Exception as error:
        print(" ", first_line(error))


f = jax.shard_map(lambda rows: rows.sum(), in_specs=P("data"), out_specs=P())
with jax.set_mesh(mesh):
    print(f"1. a dimension the mesh axis does not divide (10 rows, {jax.device_count()} devices):")
    show(lambda: jax.device_put(jnp.ones((10, 8)), P("data", None)))
    print("2. a product over a dimension split on both sides (x.T @ x):")
    show(lambda: jax.jit(lambda x: x.T @ x)(x))
    print("3. shard_map returning a per-device value as if it were replicated:")
    show(lambda: jax.jit(f)(x))
    print("4. a collective over a mesh axis in jax.jit, outside shard_map:")
    show(lambda: jax.jit(lambda x: jax.lax.psum(x, "data"))(x))
# --8<-- [end:errors]

# %% fixes
# --8<-- [start:fixes]
fixed = jax.shard_map(
    lambda rows: jax.lax.psum(rows.sum(), "data"), in_specs=P("data"), out_specs=P()
)
with jax.set_mesh(mesh):
    print("1.", jax.typeof(jax.device_put(jnp.ones((16, 8)), P("data", None))))  # pad to 16 rows
    print("2.", jax.typeof(jax.jit(lambda x: jnp.matmul(x.T, x, out_sharding=P()))(x)))
    print("3.", jax.typeof(jax.jit(fixed)(x)))  # summed over "data": replicated for real
    print("4.", jax.typeof(jax.jit(lambda x: x.sum(axis=0))(x)))  # jit sees the whole batch
# --8<-- [end:fixes]
