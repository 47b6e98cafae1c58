"""What makes a training step compile again, and a compilation cache shared by processes.

One data-parallel training step is called with a new static argument, a smaller last
batch, another dtype, another sharding and another pytree structure: each call compiles
again, and `jax.explain_cache_misses` says why (the script prints the reasons; JAX's own
log, with file names and timings, goes to standard error). `jax.monitoring` counts the
compilations. Then two fresh Python processes compile a step with the same
`jax_compilation_cache_dir`: the first writes the compiled program, the second reads it.
Compile times go to standard error.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import logging
import sys

import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

n = jax.device_count()
mesh = jax.make_mesh((n,), ("data",), axis_types=(AxisType.Explicit,))
tx = optax.sgd(1.0, momentum=0.9)  # the step scales its updates by lr


def loss_fn(params, batch):
    logits = jax.nn.relu(batch["x"] @ params["hidden"]) @ params["out"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()


# lr is static on purpose, to show what a static argument costs (see "the fix" below).
@jax.jit(static_argnames="lr", donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, batch, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return jax.tree.map(lambda p, u: p + lr * u, params, updates), opt_state, loss


@jax.jit(out_shardings=NamedSharding(mesh, P()))  # born replicated on every device
def init(key):
    k1, k2 = jax.random.split(key)
    params = {"hidden": jax.random.normal(k1, (64, 128)), "out": jax.random.normal(k2, (128, 10))}
    return params, tx.init(params)


rng = np.random.default_rng(0)
x, y = rng.normal(size=(256, 64)).astype(np.float32), rng.integers(0, 10, 256).astype(np.int32)
SPLIT = NamedSharding(mesh, P("data"))  # split along the batch dimension


def batch_of(x, y, y_spec=SPLIT):
    # Host data, split over the devices (y_spec: another layout for the labels).
    return {"x": jax.device_put(x, SPLIT), "y": jax.device_put(y, y_spec)}


# --8<-- [end:setup]


# %% watch
# --8<-- [start:watch]
compiles = []  # (function, seconds) of every XLA compilation


def on_event(event, seconds, fun_name="", **_):  # jax.monitoring calls it for each event
    if event == "/jax/core/compile/backend_compile_duration":
        compiles.append((fun_name, seconds))


jax.monitoring.register_event_duration_secs_listener(on_event)


class Reasons(logging.Handler):
    """Keep why jit traced again (jax_explain_cache_misses); print JAX's log to stderr."""

    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        message = record.getMessage()
        print(message, file=sys.stderr)
        for line in message.splitlines()[1:]:
            line = line.strip()
            if line.startswith("* ") or line == "never seen function:" or "unavailable" in line:
                self.lines.append(line.removeprefix("* ").rstrip(":"))


reasons = Reasons()
logging.getLogger("jax").addHandler(reasons)
# --8<-- [end:watch]


# %% recompiles
# --8<-- [start:recompiles]
def call(label, batch, lr=0.1):
    global params, opt_state
    before, reasons.lines[:] = len(compiles), []
    with jax.set_mesh(mesh), jax.explain_cache_misses(True), jax.log_compiles(True):
        params, opt_state, loss = train_step(params, opt_state, batch, lr=lr)
    compiled = len(compiles) > before
    print(f"{label}: {'compiled' if compiled else 'cached'}")
    for line in reasons.lines:
        print("    " + line)


params, opt_state = init(jax.random.key(0))
call("1 first call", batch_of(x, y))
call("2 next batch, same types", batch_of(x[::-1].copy(), y[::-1].copy()))
call("3 lr=0.05, a static argument", batch_of(x, y), lr=0.05)
call("4 last batch, 192 examples", batch_of(x[:192], y[:192]))
call("5 labels replicated, not split", batch_of(x, y, NamedSharding(mesh, P())))
call("6 bfloat16 inputs", batch_of(x.astype(jax.numpy.bfloat16), y))
weights = jax.device_put(np.ones(256, np.float32), SPLIT)
call("7 an extra 'weights' entry", {**batch_of(x, y), "weights": weights})
steps = [name for name, _ in compiles if name == "jit(train_step)"]
print(f"train_step compiled {len(steps)} times in 7 calls")
print(f"compile seconds: {[round(s, 2) for _, s in compiles]}", file=sys.stderr)
# --8<-- [end:recompiles]


# %% fix
# --8<-- [start:fix]
@jax.jit(donate_argnames=("params", "opt_state"))
def train_step_lr(params, opt_state, batch, lr):  # lr traced: a float32 scalar, any value
    loss, grads = jax.value_and_grad(loss_fn)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return jax.tree.map(lambda p, u: p + lr * u, params, updates), opt_state, loss


before = len(compiles)
batch = batch_of(x, y)
with jax.set_mesh(mesh):
    for lr in (0.1, 0.05, 0.01):
        params, opt_state, loss = train_step_lr(params, opt_state, batch, lr)
print(f"train_step_lr with 3 learning rates: compiled {len(compiles) - before} time")
before = len(compiles)
with jax.set_mesh(mesh):  # the same value as an array: a float32 that is not weakly typed
    params, opt_state, loss = train_step_lr(params, opt_state, batch, np.float32(0.01))
print(f"then an np.float32 learning rate: compiled {len(compiles) - before} time")
logging.getLogger("jax").removeHandler(reasons)
jax.monitoring.unregister_event_duration_listener(on_event)
# --8<-- [end:fix]

# %% persistent
# --8<-- [start:persistent]
import json
import subprocess
import tempfile
from pathlib import Path

# What each fresh process runs: compile a training step, with the cache folder in argv[1].
PROCESS = r"""
import json, sys
import jax
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # cache even fast ones
import jax.numpy as jnp

events, seconds = [], []
jax.monitoring.register_event_listener(lambda event, **_: events.append(event))
jax.monitoring.register_event_duration_secs_listener(
    lambda event, s, **_: seconds.append(s)
    if event == "/jax/core/compile/backend_compile_duration" else None)

@jax.jit(donate_argnames="params")
def train_step(params, x, y):
    def loss_fn(params):
        logits = jax.nn.relu(x @ params["hidden"]) @ params["out"]
        return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

f32 = jnp.float32  # shapes only: compiling needs no data
params = {"hidden": jax.ShapeDtypeStruct((512, 1024), f32),
          "out": jax.ShapeDtypeStruct((1024, 10), f32)}
x, y = jax.ShapeDtypeStruct((128, 512), f32), jax.ShapeDtypeStruct((128,), jnp.int32)
train_step.lower(params, x, y).compile()
print(json.dumps({"hits": events.count("/jax/compilation_cache/cache_hits"),
                  "misses": events.count("/jax/compilation_cache/cache_misses"),
                  "compile_s": sum(seconds)}))
"""

with tempfile.TemporaryDirectory() as cache:
    runs = []
    for number in (1, 2):
        done = subprocess.run(
            [sys.executable, "-c", PROCESS, cache],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        runs.append(json.loads(done.stdout))
        files = sorted(
            p.name.split("-")[0] + "-<key>-" + p.name.split("-")[-1] for p in Path(cache).iterdir()
        )
        hits, misses = runs[-1]["hits"], runs[-1]["misses"]
        print(f"process {number}: cache hits {hits}, misses {misses}; cache folder: {files}")
for number, run in enumerate(runs, 1):
    print(f"process {number}: compiled in {run['compile_s']:.3f} s", file=sys.stderr)
print("the second process compiled faster:", runs[1]["compile_s"] < runs[0]["compile_s"])
# --8<-- [end:persistent]
