"""JAX in one page, for PyTorch users.

`jax.numpy` as NumPy on accelerators, immutable arrays and `.at[]` updates, buffer
donation, the composable transformations `grad`, `jit` and `vmap`, what makes `jit`
trace and compile again, explicit PRNG keys, asynchronous dispatch, and the everyday
conversions between JAX arrays, Python numbers and NumPy.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
import logging

import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

np.set_printoptions(precision=4)  # JAX arrays print through NumPy

# %% numpy
# --8<-- [start:numpy]
x = jnp.arange(6.0).reshape(2, 3)  # the NumPy API, on the default device
print(x)
print(x.dtype, x.shape, x.device)
print(jnp.tanh(x) @ x.T)  # element-wise functions, matmul, broadcasting: as in NumPy
print(jnp.asarray(np.ones(3)).dtype)  # NumPy's float64 becomes float32, as in PyTorch
# --8<-- [end:numpy]

# %% device_put
# --8<-- [start:device_put]
devices = jax.devices()
print(len(devices), "devices; the default is", devices[0])
on_last = jax.device_put(np.arange(4.0), devices[-1])  # like .to("cuda:7") on 8 GPUs
print(on_last, "lives on", on_last.device)
# --8<-- [end:device_put]

# %% immutable
# --8<-- [start:immutable]
x = jnp.zeros(5)
try:
    x[0] = 1.0
except TypeError as error:
    print(f"TypeError: {error}")
# --8<-- [end:immutable]

# %% at_set
# --8<-- [start:at_set]
y = x.at[0].set(1.0)  # a new array; x is unchanged
z = y.at[1:3].add(10.0)  # also .multiply, .min, .max, .get, ...
print("x:", x)
print("y:", y)
print("z:", z)
# --8<-- [end:at_set]


# %% donation
# --8<-- [start:donation]
def add_to_first(x):
    return x.at[0].add(1.0)


x = jnp.zeros(1_000_000)  # 4,000,000 bytes of float32
copying = jax.jit(add_to_first)
donating = jax.jit(add_to_first, donate_argnums=0)  # x's buffer may hold the result
for name, step in [("jax.jit(f)", copying), ("jax.jit(f, donate_argnums=0)", donating)]:
    memory = step.lower(x).compile().memory_analysis()  # XLA's accounting, per device
    print(
        f"{name:29} argument {memory.argument_size_in_bytes:,} B, "
        f"output {memory.output_size_in_bytes:,} B, aliased {memory.alias_size_in_bytes:,} B"
    )

y = donating(x)  # y is written into x's buffer, and x is deleted
print("x deleted:", x.is_deleted())
try:
    print(x + 1.0)
except RuntimeError as error:
    print(f"RuntimeError: {str(error).splitlines()[0]}")
# --8<-- [end:donation]


# %% grad
# --8<-- [start:grad]
def f(x):
    return x**3 + 2.0 * x


df = jax.grad(f)  # a new function: x -> f'(x) = 3x^2 + 2
d2f = jax.grad(df)  # f''(x) = 6x
d3f = jax.grad(d2f)  # f'''(x) = 6
print(f"f(2) = {f(2.0)}, f'(2) = {df(2.0)}, f''(2) = {d2f(2.0)}, f'''(2) = {d3f(2.0)}")

value, slope = jax.value_and_grad(f)(2.0)  # value and gradient in one pass
print(f"value_and_grad: ({value}, {slope})")
# --8<-- [end:grad]


# %% grad_pytree
# --8<-- [start:grad_pytree]
def loss(params, x, y):
    prediction = params["w"] * x + params["b"]
    return jnp.mean((prediction - y) ** 2)


params = {"w": jnp.ones(()), "b": jnp.zeros(())}  # two scalars in a dict: a pytree
xs = jnp.array([1.0, 2.0, 3.0])
ys = jnp.array([3.0, 5.0, 7.0])
grads = jax.grad(loss)(params, xs, ys)  # differentiates the first argument
print(grads)  # the same structure as params
# --8<-- [end:grad_pytree]


# %% stop_gradient
# --8<-- [start:stop_gradient]
def g(x):
    return x * jax.lax.stop_gradient(x)  # the second factor is a constant to grad


print(jax.grad(g)(3.0), "instead of", jax.grad(lambda x: x * x)(3.0))
# --8<-- [end:stop_gradient]


# %% jit_trace
# --8<-- [start:jit_trace]
@jax.jit
def scaled_sum(x, scale):
    print(f"  tracing with x = {x}, scale = {scale}")  # Python: runs only while tracing
    return jnp.sum(x) * scale


print("1:", scaled_sum(jnp.ones(3), 2.0))  # first call: trace, compile, run
print("2:", scaled_sum(jnp.arange(3.0), 5.0))  # same shapes and dtypes: run only
print("3:", scaled_sum(jnp.ones(4), 2.0))  # new shape: traced again
print("4:", scaled_sum(jnp.ones(3, dtype=jnp.int32), 2.0))  # new dtype: traced again
print("5:", scaled_sum(jnp.ones(3), 2))  # a Python int instead of a float: traced again
# --8<-- [end:jit_trace]


# %% jit_static
# --8<-- [start:jit_static]
def power(x, n):
    result = x
    for _ in range(n - 1):  # a Python loop needs a Python int n
        result = result * x
    return result


try:
    jax.jit(power)(2.0, 3)  # n becomes a tracer: range() cannot use it
except jax.errors.TracerIntegerConversionError as error:
    print(f"{type(error).__name__}: {str(error).splitlines()[0]}")


@jax.jit(static_argnames="n")
def static_power(x, n):
    print(f"  tracing with n = {n}")
    return power(x, n)


print(static_power(2.0, n=3))
print(static_power(3.0, n=3))  # same n: no new trace
print(static_power(2.0, n=4))  # new n: a new trace and a new compilation
# --8<-- [end:jit_static]


# %% cache_key
class PrintReasons(logging.Handler):
    """Print what JAX logs about `total` below, without the file paths and timings."""

    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Compiling jit(total)"):
            print("  compiling")
        for line in message.splitlines():
            if line.lstrip().startswith("* "):  # the reason for a cache miss
                print("  cache miss:", line.strip()[2:])


reasons = PrintReasons()
logging.getLogger("jax").addHandler(reasons)


# --8<-- [start:cache_key]
@jax.jit
def total(arrays):
    print("  tracing with", arrays)
    return sum(jnp.sum(a) for a in jax.tree.leaves(arrays))


a, b = jnp.ones(8), jnp.arange(8.0)
mesh = jax.make_mesh((len(devices),), ("data",), axis_types=(AxisType.Explicit,))
with jax.explain_cache_misses(True), jax.log_compiles(True):  # log why, and each compile
    print("1:", total([a, b]))
    print("2:", total([b, a]))  # same types: the cached program
    print("3:", total([jax.device_put(a, devices[-1]), b]))  # committed elsewhere: compiled
    print("4:", total([jax.device_put(a, NamedSharding(mesh, P("data"))), b]))  # new type
    print("5:", total((a, b)))  # a tuple, not a list: a new pytree structure
    with jax.set_mesh(mesh):
        print("6:", total([a, b]))  # the arrays of call 1, under a mesh: a new context
    with jax.enable_x64(True):
        print("7:", total([a, b]))  # the arrays of call 1, with 64-bit types enabled
# --8<-- [end:cache_key]
logging.getLogger("jax").removeHandler(reasons)


# %% debug_print
# --8<-- [start:debug_print]
@jax.jit
def normalize(x):
    norm = jnp.linalg.norm(x)
    print("print:", norm)  # at trace time: a tracer, no value yet
    jax.debug.print("jax.debug.print: norm = {n:.4f}", n=norm)  # at run time, every call
    return x / norm


print(normalize(jnp.array([3.0, 4.0])))
print(normalize(jnp.array([6.0, 8.0])))
# --8<-- [end:debug_print]


# %% vmap
# --8<-- [start:vmap]
def predict(w, b, x):
    """ONE example: x has shape (3,)."""
    return jnp.dot(w, x) + b


w = jnp.array([1.0, 2.0, 3.0])
b = jnp.array(0.5)
batch = jnp.arange(12.0).reshape(4, 3)  # 4 examples, one per row

# in_axes: map axis 0 of `batch`; share w and b (None) across the batch.
batched_predict = jax.vmap(predict, in_axes=(None, None, 0))
print(batched_predict(w, b, batch))
print(jax.vmap(predict, in_axes=(None, None, 1))(w, b, batch.T))  # examples as columns
# --8<-- [end:vmap]


# %% per_example_grads
# --8<-- [start:per_example_grads]
def example_loss(w, b, x, y):
    return (predict(w, b, x) - y) ** 2


targets = jnp.array([8.0, 26.0, 44.0, 62.0])
print("errors:", batched_predict(w, b, batch) - targets)
# grad w.r.t. w of ONE example's loss, mapped over the examples and their targets.
per_example = jax.vmap(jax.grad(example_loss), in_axes=(None, None, 0, 0))(w, b, batch, targets)
print(per_example.shape)  # one gradient of w per example: 2 * error * x
print(per_example)
# --8<-- [end:per_example_grads]

# %% random
# --8<-- [start:random]
key = jax.random.key(0)  # all the state a random number generator has
print(jax.random.normal(key, (3,)))
print(jax.random.normal(key, (3,)))  # same key, same numbers: nothing advanced

key, subkey = jax.random.split(key)  # new, independent keys; never reuse a used one
print(jax.random.normal(subkey, (3,)))
layer_keys = jax.random.split(key, 4)  # one key per layer, per device, per epoch...
print(layer_keys.shape, layer_keys.dtype)
# --8<-- [end:random]


# %% async
# --8<-- [start:async]
@jax.jit
def matmul_chain(a):
    for _ in range(10):
        a = jnp.tanh(a @ a)
    return a


a = jax.random.uniform(jax.random.key(1), (512, 512))
result = matmul_chain(a)  # returns at once: the work is queued on the device
result = result.block_until_ready()  # wait for it (what you do before stopping a timer)
print(result.shape, result.dtype)
jax.block_until_ready({"a": a, "result": result})  # also works on a pytree
# --8<-- [end:async]

# %% convert
# --8<-- [start:convert]
total = jnp.sum(jnp.arange(4.0))
print(float(total), total.item())  # a Python float: waits for the value
host = np.asarray(jnp.arange(4.0))  # a NumPy copy on the host
print(type(host).__name__, host)
print(type(jnp.asarray(host)).__name__)  # and back onto the default device
# --8<-- [end:convert]
