"""Resuming after a crash, and restoring a 2-process checkpoint in one process.

Runs `train.py` (beside this script) under `python -m jaxpar.launch`, as you would from a
shell, three times with the same `--workdir`: first with `--crash-in-save 12`, where process
1 kills itself while step 12 is being saved; then with `--crash-in-step 10`, which resumes
after step 8 and dies in the middle of step 10; then plainly, which resumes after step 8
again and repeats steps 9-12 with the same data, losses and final state, bit for bit. Then
this single process restores the checkpoint that 2 processes wrote onto a mesh of another
shape, tensor-parallel instead of FSDP, and shows Orbax's errors for a model of another
shape, a folder that does not exist, a step that was never saved and an `nnx.eval_shape`
target.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)
# needs 8 devices: it restores the 8 shards of the 2 x 4-device run onto a 2 x 4 mesh of another layout; elsewhere run it with JAX_PLATFORMS=cpu
# numbers within 1e-5 in cells crash, resume, compare: XLA:CPU vectorises float32 sums for the CPU's vector width (AVX2 or AVX512), so losses printed to float32's last digit differ between CPUs

# %% setup
# --8<-- [start:setup]
import hashlib
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import grain
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.sharding import AxisType

# train.py lies next to this file (in a notebook: in the current folder).
HERE = Path(globals().get("__file__", "train.py")).resolve().parent
workdir = Path(tempfile.mkdtemp()) / "run"
LAUNCH = ["-m", "jaxpar.launch", "--nproc", "2", "--devices-per-process", "4", "--timeout", "120"]


def launch(*options):
    """Run train.py under the launcher, as from a shell: its exit status and output lines."""
    arguments = ["train.py", "--workdir", "run", *options]
    print("$ python", *LAUNCH, *arguments)
    arguments[2] = str(workdir)
    result = subprocess.run(
        [sys.executable, *LAUNCH, *arguments], cwd=HERE, capture_output=True, text=True
    )
    output = (result.stdout + result.stderr).replace(str(workdir), "run")
    # Gloo, the CPU collectives library, logs its connections: leave them out.
    gloo = re.compile(r"\[Gloo\]|connected peer ranks")
    return result.returncode, [line for line in output.splitlines() if not gloo.search(line)]


def new_in_log(lines_before):
    """What a run added to run/log.txt, from its restore on (after the lines on the data)."""
    new = (workdir / "log.txt").read_text().splitlines()[lines_before:]
    return new[next(i for i, line in enumerate(new) if line.startswith("resuming")) :]


def show_checkpoints():
    """The checkpoint folder, and the step that a restart would resume after."""
    print("run/checkpoints:", sorted(path.name for path in (workdir / "checkpoints").iterdir()))
    checkpoints = ocp.CheckpointManager(
        workdir / "checkpoints", options=ocp.CheckpointManagerOptions(read_only=True)
    )
    print("latest complete checkpoint:", checkpoints.latest_step())


def logged(pattern):
    """The groups of each match of a regular expression in run/log.txt."""
    text = (workdir / "log.txt").read_text()
    return [match.groups() for match in re.finditer(pattern, text, re.MULTILINE)]


# --8<-- [end:setup]

# %% crash
# --8<-- [start:crash]
status, output = launch("--crash-in-save", "12")
print(*[line for line in output if line.startswith("[launch]")], sep="\n")
print("exit status", status)
print("run/log.txt:", *(workdir / "log.txt").read_text().splitlines(), sep="\n  ")
show_checkpoints()
# --8<-- [end:crash]

# %% crash_in_step
# --8<-- [start:crash_in_step]
lines_before = len((workdir / "log.txt").read_text().splitlines())
status, output = launch("--crash-in-step", "10")
print(*[line for line in output if line.startswith("[launch]")], sep="\n")
print("exit status", status)
print("new in run/log.txt, from the restore on:", *new_in_log(lines_before), sep="\n  ")
show_checkpoints()
# --8<-- [end:crash_in_step]

# %% resume
# --8<-- [start:resume]
lines_before = len((workdir / "log.txt").read_text().splitlines())
status, output = launch()
print("new in run/log.txt, from the restore on:", *new_in_log(lines_before), sep="\n  ")
for line in output:
    if line.startswith("[rank 0] WARNING"):
        print(textwrap.fill(line, 88, subsequent_indent="    ", break_on_hyphens=False))
print("exit status", status)
# --8<-- [end:resume]

# %% compare
# --8<-- [start:compare]
# The crash in step 10 logged no step: losses are logged at the saves.
steps = logged(r"^step +(\d+)  loss (\S+)  first example (\d+)$")  # steps 1-12, 9-12 again
before, after = steps[8:12], steps[12:]
print("steps 9-12 before the crash:", [loss for step, loss, first in before])
print("steps 9-12 after the restart:", [loss for step, loss, first in after])
print("the same first examples:", [first for *_, first in before] == [first for *_, first in after])
print("the same losses, bit for bit:", before == after)
final = logged(r"^final state (\w+)$")
print("the same final state, bit for bit:", final[0] == final[1])
# --8<-- [end:compare]


# %% elsewhere
# --8<-- [start:elsewhere_model]
class MLP(nnx.Module):
    """The model of train.py, with a partition spec for each parameter."""

    def __init__(self, specs: dict[str, tuple], rngs: nnx.Rngs, features: int = 64):
        kernel, zeros = nnx.initializers.lecun_normal(), nnx.initializers.zeros_init()
        self.hidden = nnx.Linear(
            features, 128, rngs=rngs,
            kernel_init=nnx.with_partitioning(kernel, specs["hidden kernel"]),
            bias_init=nnx.with_partitioning(zeros, specs["hidden bias"]),
        )  # fmt: skip
        self.out = nnx.Linear(
            128, 10, rngs=rngs,
            kernel_init=nnx.with_partitioning(kernel, specs["out kernel"]),
            bias_init=nnx.with_partitioning(zeros, specs["out bias"]),
        )  # fmt: skip

    def __call__(self, x):
        return self.out(jax.nn.relu(self.hidden(x)))


# Tensor parallel on a 2 x 4 mesh: columns, then rows, over "model"; copies over "data".
TENSOR_PARALLEL = {
    "hidden kernel": (None, "model"),
    "hidden bias": ("model",),
    "out kernel": ("model", None),
    "out bias": (None,),
}
mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
tx = optax.sgd(learning_rate=0.1, momentum=0.9)


def abstract_state(specs, mesh, features=64):
    """The training state's shapes, dtypes and shardings, with nothing allocated."""
    model = lambda: MLP(specs, nnx.Rngs(0), features)  # noqa: E731
    graphdef, params = nnx.get_abstract_model(model, mesh)
    state = {"params": params, "opt_state": jax.eval_shape(tx.init, params)}
    shardings = nnx.get_named_sharding(state, mesh)
    return jax.tree.map(lambda a, s: a.update(sharding=s), state, shardings)


# --8<-- [end:elsewhere_model]

# --8<-- [start:elsewhere]
target = abstract_state(TENSOR_PARALLEL, mesh)
# A manager reads the folder's steps when it is created: open it again after the restart.
checkpoints = ocp.CheckpointManager(
    workdir / "checkpoints", options=ocp.CheckpointManagerOptions(read_only=True)
)
step = checkpoints.latest_step()
# Only the "state" item: the data iterators' positions are of no use here.
state = checkpoints.restore(
    step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))
).state

kernel = state["params"]["hidden"]["kernel"][...]
shard = kernel.addressable_shards[0].data
print(f"restored step {step} in 1 process, onto a {dict(mesh.shape)} mesh")
print("hidden kernel:", kernel.shape, kernel.sharding.spec, "on device 0:", shard.shape)
on_device_0 = sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(state))
total = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
print(f"state bytes on device 0: {on_device_0} of {total}")
# Gathered here, in one process, only to compare with what train.py logged.
values = jax.tree.leaves(jax.device_get(state))
digest = hashlib.sha256(b"".join(np.asarray(v).tobytes() for v in values)).hexdigest()[:16]
print("the same values as the final state of train.py:", digest == final[-1][0])
# --8<-- [end:elsewhere]


# %% errors
# --8<-- [start:errors]
def error_of(restore):
    """What `restore()` raises, folded to 88 columns."""
    try:
        restore()
    except Exception as error:  # noqa: BLE001 - shown, not handled
        message = str(error).replace(str(workdir), "run")
        line = f"{type(error).__name__}: {message}"
        return textwrap.fill(line, 88, subsequent_indent="    ", break_on_hyphens=False)


def restore(manager, step, target):
    return manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target)))


print("A model with 32 input features instead of 64:")
print(error_of(lambda: restore(checkpoints, step, abstract_state(TENSOR_PARALLEL, mesh, 32))))
# Which parameter? The checkpoint's metadata holds every array's shape, and reads no array.
inspector = ocp.CheckpointManager(
    workdir / "checkpoints",
    item_handlers={"state": ocp.StandardCheckpointHandler()},
    options=ocp.CheckpointManagerOptions(read_only=True),
)
saved = inspector.item_metadata(step)["state"]["params"]
for path, array in jax.tree_util.tree_flatten_with_path(saved)[0]:
    print(f"  in the checkpoint: params{jax.tree_util.keystr(path)} {array.shape}")

print("A step that was never saved:")
print(error_of(lambda: restore(checkpoints, 7, target)))
print("  saved steps:", checkpoints.all_steps())

print("A folder that does not exist (a typo):")
typo = ocp.CheckpointManager(workdir / "chekpoints")  # creates it, empty
print("  latest_step():", typo.latest_step(), "- train.py would start from step 0")
print(error_of(lambda: restore(typo, None, target)))

print("An abstract model from nnx.eval_shape:")
with jax.set_mesh(mesh):
    abstract_model = nnx.eval_shape(lambda: MLP(TENSOR_PARALLEL, nnx.Rngs(0)))
params = nnx.state(abstract_model)
print("  the mesh of its shardings:", type(jax.tree.leaves(params)[0].sharding.mesh).__name__)
eval_shape_target = {"params": params, "opt_state": jax.eval_shape(tx.init, params)}
print(error_of(lambda: restore(checkpoints, step, eval_shape_target)))

print("The data iterators' positions, restored by 1 process instead of 2:")
iterator = iter(grain.MapDataset.range(1536).to_iter_dataset(grain.ReadOptions(num_threads=0)))
data = ocp.args.Composite(data=grain.checkpoint.CheckpointRestore(iterator))
print(error_of(lambda: checkpoints.restore(step, args=data)))
# --8<-- [end:errors]
