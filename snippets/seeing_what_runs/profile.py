"""Reading a profile with jaxpar: the operations of a sharded training step, per device.

A data-parallel training step (an MLP, named scopes around its layers) runs 4 times under
`jax.profiler.trace(..., create_perfetto_trace=True)`. `jaxpar.read_trace` reads the trace
file back (gzip and JSON, no viewer needed): which devices ran which XLA operations, how
many per step, which of them are collectives, and which `jax.named_scope` each came from.
Times change from run to run, so the table of the slowest operations goes to standard
error; standard output keeps what is the same on every run. Run it as
`TRACE_FOLDER=my-trace python profile.py` to keep the trace and a timeline drawing in
`my-trace/`, and open the trace in Perfetto or XProf.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% setup
# --8<-- [start:setup]
import os
import shutil
import socket
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import optax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar import operation_scopes, read_trace, timeline_svg, top_operations

n = jax.device_count()
mesh = jax.make_mesh((n,), ("data",), axis_types=(AxisType.Explicit,))
D, H, B = 512, 1024, 1024  # input features, hidden units, batch (divisible by 1, 2, 4, 8)
tx = optax.sgd(0.1, momentum=0.9)


# Parameters born replicated on every device, inside jit: no copy on the host.
@jax.jit(out_shardings=NamedSharding(mesh, P()))
def init(key):
    k1, k2 = jax.random.split(key)
    params = {
        "hidden": jax.random.normal(k1, (D, H)) * D**-0.5,
        "out": jax.random.normal(k2, (H, 10)) * H**-0.5,
    }
    return params, tx.init(params)


def loss_fn(params, x, y):
    with jax.named_scope("hidden"):  # scope names travel into the compiled program
        h = jax.nn.relu(x @ params["hidden"])
    with jax.named_scope("out"):
        logits = h @ params["out"]
    with jax.named_scope("loss"):
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


@jax.jit(donate_argnames=("params", "opt_state"))
def train_step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    with jax.named_scope("optimizer"):
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss


rng = np.random.default_rng(0)
split = NamedSharding(mesh, P("data"))  # the batch, split over the devices
x = jax.device_put(rng.normal(size=(B, D)).astype(np.float32), split)
y = jax.device_put(rng.integers(0, 10, size=B).astype(np.int32), split)
params, opt_state = init(jax.random.key(0))
# --8<-- [end:setup]

# %% trace
# --8<-- [start:trace]
# TRACE_FOLDER=my-trace keeps the trace there; by default a temporary folder, removed at the end.
kept = "TRACE_FOLDER" in os.environ
folder = Path(os.environ["TRACE_FOLDER"] if kept else tempfile.mkdtemp(prefix="jax-trace-"))

with jax.set_mesh(mesh):
    params, opt_state, loss = train_step(params, opt_state, x, y)  # compile before tracing
    jax.block_until_ready(loss)
    with jax.profiler.trace(folder, create_perfetto_trace=True):
        for step in range(4):
            with jax.profiler.StepTraceAnnotation("train", step_num=step):
                params, opt_state, loss = train_step(params, opt_state, x, y)
        jax.block_until_ready(loss)  # wait inside the block, so the device work is recorded

written = sorted(p.name for p in folder.rglob("*") if p.is_file())
print("written:", ", ".join(name.replace(socket.gethostname(), "HOST") for name in written))
# --8<-- [end:trace]

# %% read
# --8<-- [start:read]
trace = read_trace(folder)  # the newest trace in the folder: perfetto_trace.json.gz
print("read:", trace.path.name)
print(f"devices: {len(trace.devices)}, program runs: {len(trace.runs)}")
print("steps annotated:", [s.number for s in trace.steps])
ran = defaultdict(list)  # the operations of each device in each run, in order
for op in trace.operations:
    ran[(op.device, op.run)].append(op.name)
counts = sorted({len(names) for names in ran.values()})
same = len({tuple(sorted(names)) for names in ran.values()}) == 1
print(f"operations per device per step: {counts}; the same on every device: {same}")
# --8<-- [end:read]

# %% collectives
# --8<-- [start:collectives]
with jax.set_mesh(mesh):
    scopes = operation_scopes(train_step.lower(params, opt_state, x, y).compile())
collectives = sorted({op.name for op in trace.operations if op.collective})
print("collectives per device per step (XLA:CPU):", ", ".join(collectives) or "none")
for name in collectives:
    sources = scopes[name].removeprefix("jit(train_step)/").strip("()").split(":")
    print(f"  {name} sums:", ", ".join(sources))
# --8<-- [end:collectives]

# %% scopes
# --8<-- [start:scopes]
names = sorted({op.name for op in trace.operations if not op.collective})
counts = []
for scope in ("hidden", "out", "loss", "optimizer"):
    forward = [o for o in names if f"/jvp({scope})/" in scopes.get(o, "")]
    backward = [o for o in names if f"/transpose(jvp({scope}))/" in scopes.get(o, "")]
    update = [o for o in names if f"/{scope}/" in scopes.get(o, "")]  # not differentiated
    counts.append(
        f"{scope} {len(forward)} + {len(backward)}" if forward else f"{scope} {len(update)}"
    )
print("operations per named scope (forward + backward):", ", ".join(counts))
print("matrix products, and the code they came from:")
for name in names:
    if scopes.get(name, "").endswith("dot_general"):
        print(f"  {name:13} {scopes[name].removeprefix('jit(train_step)/')}")
# --8<-- [end:scopes]

# %% top
# --8<-- [start:top]
# Times vary from run to run: the table goes to standard error.
for device in trace.devices:
    top = top_operations(trace, 3, device=device)
    line = ", ".join(
        f"{t.name} {t.total_us / 1000:.1f} ms ({t.share:.0%}){' collective' * t.collective}"
        for t in top
    )
    print(f"device {device}: {line}", file=sys.stderr)
overlap = trace.busy_us / trace.span_us
print(
    f"operation time summed over devices / time from first to last: {overlap:.1f}", file=sys.stderr
)
print(
    f"operation time summed over {len(trace.devices)} devices exceeds the time from the "
    f"first operation to the last: {overlap > 1}"
)
# --8<-- [end:top]

# %% timeline
# --8<-- [start:timeline]
last_step = [op for op in trace.operations if op.run == trace.runs[-1]]
svg = timeline_svg(last_step, title="One training step, as the trace recorded it")
(folder / "timeline.svg").write_text(svg, encoding="utf-8")
print(f"timeline.svg: {svg.count('<rect class=')} bars in {len(trace.devices)} rows")
if kept:
    print(f"trace and drawing kept in {folder}", file=sys.stderr)
else:
    shutil.rmtree(folder)
# --8<-- [end:timeline]
