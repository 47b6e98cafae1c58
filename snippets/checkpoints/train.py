"""A training script that survives a crash: Orbax checkpoints of FSDP state, Grain data, 2 processes.

The MLP of the model-sharding chapter with its parameters and optimizer state fully sharded
(FSDP) over the 8 devices of 2 processes, trained on a synthetic 10-class task that Grain
reads, shuffles per epoch and splits between the processes. Every 4 steps each process
saves its own shards and its data iterator's position into one asynchronous Orbax
checkpoint; the last 2 are kept, each with the size and SHA-256 of every file, which
process 0 records once the checkpoint is complete. Started again with the same `--workdir`,
it resumes from the latest checkpoint whose files are as saved, after deleting any newer,
damaged one; if none is intact, every process stops with one error. `--crash-in-step N`
makes process 1 kill itself in the middle of step N, and `--crash-in-save N` while step N is
being saved. Run it with the site's launcher:

    python -m jaxpar.launch --nproc 2 --devices-per-process 4 train.py --workdir run
"""

# jaxpar.launch: --nproc 2 --devices-per-process 4 --timeout 120
# output checked through crash_and_resume.py: its runs of this script log every line of train.out

# --8<-- [start:start]
import jax

from jaxpar import initialize_distributed

initialize_distributed()  # before anything touches a device
# --8<-- [end:start]

# %% setup
# --8<-- [start:setup]
import argparse
import hashlib
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import grain
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("--workdir", type=Path, help="checkpoints and log; the same for every process")
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--crash-in-step", type=int, help="process 1 dies in the middle of this step")
parser.add_argument("--crash-in-save", type=int, help="process 1 dies while this step is saved")
args = parser.parse_args()
if args.crash_in_save is not None and args.crash_in_save % 4:  # FixedIntervalPolicy(4) below
    parser.error(
        f"--crash-in-save {args.crash_in_save}: no checkpoint is saved at that step; "
        f"checkpoints are saved every 4 steps, so choose a multiple of 4"
    )
process, processes = jax.process_index(), jax.process_count()
if args.workdir is None:  # a new folder, which every process must agree on: process 0's choice
    run = multihost_utils.broadcast_one_to_all(np.int32(os.getpid()))
    args.workdir = Path(tempfile.gettempdir()) / f"jaxpar-train-{run}"


def log(*words):
    """Print on process 0, and append to workdir/log.txt, which outlives a crash."""
    if process == 0:
        line = " ".join(map(str, words))
        print(line)
        args.workdir.mkdir(parents=True, exist_ok=True)
        with open(args.workdir / "log.txt", "a") as file:
            file.write(line + "\n")


def die_once_written(event: str, duration: float, **kwargs) -> None:
    """--crash-in-save N: process 1 dies once its part of step N is written, before it tells
    the other process so (Orbax reports that moment to jax.monitoring): step N stays in its
    temporary folder however fast the background write is."""
    unfinished = args.workdir / "checkpoints" / f"{args.crash_in_save}.orbax-checkpoint-tmp"
    if event == "/jax/checkpoint/write/async/commit_duration_sec" and unfinished.exists():
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would


if args.crash_in_save is not None and process == 1:
    jax.monitoring.register_event_duration_secs_listener(die_once_written)
# --8<-- [end:setup]

# %% data
# --8<-- [start:data]
# A synthetic 10-class task standing in for a dataset on disk: 1536 examples of 64 features.
rng = np.random.default_rng(0)
features = rng.normal(size=(1536, 64)).astype(np.float32)
labels = (features @ rng.normal(size=(64, 10))).argmax(axis=1).astype(np.int32)
BATCH = 256  # the global batch; each process loads BATCH // processes of it
STEPS_PER_EPOCH = len(labels) // BATCH


def load_example(index):
    """Read one example, as a data source would read a record from a file."""
    return {"index": index, "features": features[index], "label": labels[index]}


dataset = (
    grain.MapDataset.range(len(labels))  # example indices 0 ... 1535
    .shuffle(seed=0)  # a new order every epoch, from the seed and the epoch number
    .repeat()  # epoch after epoch, without end
)
dataset = dataset[process::processes]  # this process's share of the shuffled stream
dataset = dataset.map(load_example).batch(BATCH // processes, drop_remainder=True)
# The data is in memory: read it in this thread (Grain's default is 16 threads).
batches = iter(dataset.to_iter_dataset(grain.ReadOptions(num_threads=0)))
# --8<-- [end:data]

# --8<-- [start:peek]
# A MapDataset can be indexed: look at batches without moving the iterator.
first, next_epoch = dataset[0]["index"], dataset[STEPS_PER_EPOCH]["index"]
both = multihost_utils.process_allgather(first)  # (processes, 128): every process's share
log(f"step 1, process 0 reads examples {both[0, :5].tolist()} ... ({both.shape[1]} of them)")
log(f"step 1, process 1 reads examples {both[1, :5].tolist()} ...")
log("  the two halves overlap:", bool(np.intersect1d(both[0], both[1]).size))
epoch_0 = np.concatenate([dataset[i]["index"] for i in range(STEPS_PER_EPOCH)])
every = np.sort(multihost_utils.process_allgather(epoch_0).ravel())
log("  epoch 0 reads each example once:", np.array_equal(every, np.arange(len(labels))))
log(f"step {STEPS_PER_EPOCH + 1} (epoch 1), process 0 reads {next_epoch[:5].tolist()} ...")
# --8<-- [end:peek]


# %% model
# --8<-- [start:model]
class MLP(nnx.Module):
    """The two-layer MLP, each parameter annotated with its partition spec."""

    def __init__(self, specs: dict[str, tuple], rngs: nnx.Rngs):
        kernel, zeros = nnx.initializers.lecun_normal(), nnx.initializers.zeros_init()
        self.hidden = nnx.Linear(
            64, 128, rngs=rngs,
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


# FSDP: parameters split along their first dimension over all 8 devices of both processes.
FSDP = {
    "hidden kernel": ("fsdp", None),
    "hidden bias": ("fsdp",),
    "out kernel": ("fsdp", None),
    "out bias": (None,),  # 10 values do not split 8 ways
}
mesh = jax.make_mesh((jax.device_count(),), ("fsdp",), axis_types=(AxisType.Auto,))
tx = optax.sgd(learning_rate=0.1, momentum=0.9)
# --8<-- [end:model]

# --8<-- [start:abstract]
# The state's shapes, dtypes and shardings, without computing or allocating anything.
graphdef, abstract_params = nnx.get_abstract_model(lambda: MLP(FSDP, nnx.Rngs(0)), mesh)
abstract_state = {"params": abstract_params, "opt_state": jax.eval_shape(tx.init, abstract_params)}
shardings = nnx.get_named_sharding(abstract_state, mesh)
abstract_state = jax.tree.map(lambda a, s: a.update(sharding=s), abstract_state, shardings)


@jax.jit(out_shardings=shardings)
def create_state():
    """A fresh state, each device computing only its own shards."""
    params = nnx.state(MLP(FSDP, nnx.Rngs(0)))
    return {"params": params, "opt_state": tx.init(params)}


# --8<-- [end:abstract]


# --8<-- [start:step]
def loss_fn(params, x, y):
    logits = nnx.merge(graphdef, params)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


@jax.jit(out_shardings=(shardings, NamedSharding(mesh, P())), donate_argnames="state")
def train_step(state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)
    updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
    return {"params": optax.apply_updates(state["params"], updates), "opt_state": opt_state}, loss


# --8<-- [end:step]


# %% checkpoints
# --8<-- [start:manager]
policies = ocp.checkpoint_managers
options = ocp.CheckpointManagerOptions(
    save_decision_policy=policies.AnySavePolicy(
        [
            policies.FixedIntervalPolicy(4),  # every 4 steps
            policies.PreemptionCheckpointingPolicy(),  # and when the scheduler sends SIGTERM
        ]
    ),
    preservation_policy=policies.LatestN(2),  # keep the last 2
)
# Every process opens the same folder (on a cluster: shared storage, such as a bucket).
checkpoints = args.workdir.absolute() / "checkpoints"
manager = ocp.CheckpointManager(checkpoints, options=options)
# --8<-- [end:manager]


# --8<-- [start:failed_saves]
class SaveErrors(logging.Filter):
    """A save that fails (a full disk, a quota, a lost mount) fails in Orbax's background
    threads, and each one logs it with a traceback: keep their lines to one each, and the
    first error for the training loop, which Orbax would tell only in a wait for the save
    (a wait that never returns when the processes failed at different points)."""

    def __init__(self):
        super().__init__()
        self.first: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        # Orbax's own lines, and asyncio's about the tasks of Orbax's writes
        if record.exc_info and "orbax" in record.pathname + record.getMessage():
            self.first = self.first or record.exc_info[1]
            record.exc_info = record.exc_text = None
        return True


save_errors = SaveErrors()
for logger in ("absl", "asyncio"):
    logging.getLogger(logger).addFilter(save_errors)


def ignore_closed_loop(unraisable, default=sys.unraisablehook) -> None:
    """Leave out what TensorStore's callbacks raise on finding a failed write's event loop
    closed; show the rest as Python would."""
    if str(unraisable.exc_value) != "Event loop is closed":
        default(unraisable)


sys.unraisablehook = ignore_closed_loop


def stop_if_a_save_failed(step: int) -> None:
    """Stop with one error once Orbax has logged that a save failed."""
    error = save_errors.first
    if error is not None:
        full = any(s in str(error) for s in ("No space left", "File too large", "quota"))
        raise SystemExit(
            f"step {step}: a checkpoint could not be written to {checkpoints}: "
            f"{type(error).__name__}: {error}\n"
            + ("Free space there (or choose another --workdir) and run again: " if full else "")
            + "a new start resumes from the newest checkpoint that was written in full."
        )


def wait_for_saves(step: int) -> None:
    """manager.wait_until_finished(), but stopping as soon as a save has failed."""
    while manager.is_saving_in_progress():
        stop_if_a_save_failed(step)
        time.sleep(0.1)
    stop_if_a_save_failed(step)
    manager.wait_until_finished()


# --8<-- [end:failed_saves]


# --8<-- [start:digests]
def sha256(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def record_digests(event: str, duration: float, **kwargs) -> None:
    """When process 0 has finished a step (renamed N.orbax-checkpoint-tmp to N), which Orbax
    reports to jax.monitoring: write the size and SHA-256 of each of its files into it."""
    if event != "/jax/orbax/write/background_finalize_secs":
        return
    folder = checkpoints / str(max(int(p.name) for p in checkpoints.iterdir() if p.name.isdigit()))
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    record = {
        path.relative_to(folder).as_posix(): {"bytes": path.stat().st_size, "sha256": sha256(path)}
        for path in files
    }
    (folder / "sha256.json").write_text(json.dumps(record, indent=1))


if process == 0:  # called in Orbax's background thread: saves stay asynchronous
    jax.monitoring.register_event_duration_secs_listener(record_digests)
# --8<-- [end:digests]


# --8<-- [start:check]
def damage(step: int) -> str | None:
    """What differs in a checkpoint's files from its sha256.json, or None if nothing does."""
    folder = checkpoints / str(step)
    try:  # without a record (a crash right after the rename), nothing can be checked
        record = json.loads((folder / "sha256.json").read_text())
    except (OSError, ValueError) as error:
        return f"its sha256.json cannot be read ({type(error).__name__})"
    for name, saved in record.items():
        try:
            size, digest = (folder / name).stat().st_size, sha256(folder / name)
        except OSError as error:
            return f"{name} cannot be read ({type(error).__name__})"
        if size != saved["bytes"]:
            return f"{name} has {size} bytes, {saved['bytes']} when saved"
        if digest != saved["sha256"]:
            return f"{name} has changed since it was saved (its SHA-256 differs)"
    return None


def choose_step() -> tuple[int, list[str]]:
    """Process 0: the newest checkpoint whose files are as saved (0 if none was saved, -1 if
    every one is damaged), and what is wrong with each newer one."""
    damaged = []
    for step in sorted(manager.all_steps(), reverse=True):
        problem = damage(step)
        if problem is None:
            return step, damaged
        damaged.append(f"checkpoint {step} is damaged: {problem}")
    return (-1 if damaged else 0), damaged


# --8<-- [end:check]

# --8<-- [start:restore_or_start]
# Process 0 checks the files and chooses; every process then restores that step. (A restore
# that fails in one process would leave the others waiting for it in a barrier.)
chosen, damaged = choose_step() if process == 0 else (0, [])
start = int(multihost_utils.broadcast_one_to_all(np.int32(chosen)))
for line in damaged:
    log(line)
if start < 0:  # every process stops here, and none restores
    steps = ", ".join(map(str, reversed(manager.all_steps())))
    error = f"error: checkpoints {steps} in {checkpoints} are all damaged (above); none deleted"
    sys.exit(error if process == 0 else 1)
for step in manager.all_steps():
    if step > start:  # damaged: delete it, as Orbax saves no step up to its latest one
        log(f"deleting checkpoint {step}; restoring checkpoint {start} instead")
        manager.delete(step)
with jax.set_mesh(mesh):
    if start == 0:
        state = create_state()
        log("no checkpoint: starting from step 0")
    else:
        restored = manager.restore(
            start,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state),  # into these shardings
                data=grain.checkpoint.CheckpointRestore(batches),  # moves the iterator
            ),
        )
        state = restored.state
        log(f"resuming after step {start}")
on_device_0 = sum(leaf.addressable_shards[0].data.nbytes for leaf in jax.tree.leaves(state))
total = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
log(f"state bytes on device 0: {on_device_0} of {total}")
# --8<-- [end:restore_or_start]


# %% train
# --8<-- [start:train]
def fingerprint(tree):
    """The first 16 hex digits of a SHA-256 of every value: equal means equal bit for bit."""
    values = jax.tree.leaves(multihost_utils.process_allgather(tree, tiled=True))
    return hashlib.sha256(b"".join(v.tobytes() for v in values)).hexdigest()[:16]


batch_sharding = NamedSharding(mesh, P("fsdp"))
losses, firsts = [], []  # losses stay on the devices until the next log
with jax.set_mesh(mesh):
    for step in range(start + 1, args.steps + 1):
        batch = next(batches)
        x = jax.make_array_from_process_local_data(batch_sharding, batch["features"])
        y = jax.make_array_from_process_local_data(batch_sharding, batch["label"])
        state, loss = train_step(state, x, y)
        if step == args.crash_in_step and process == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # dies while XLA runs the step it was handed
        losses.append(loss)
        firsts.append(batch["index"][0])  # the first example of process 0's share
        if manager.should_save(step) or step == args.steps:
            logged = zip(jax.device_get(losses), firsts, strict=True)
            for done, (value, first) in enumerate(logged, start=step - len(losses) + 1):
                # str(value): every digit of the float32, so equal text means equal bits
                log(f"step {done:2d}  loss {value!s}  first example {first}")
            losses, firsts = [], []
        if step == args.steps:
            log("final state", fingerprint(state))
        stop_if_a_save_failed(step)  # a failed save stops the run here (resuming page)
        manager.save(  # all processes; returns once the arrays are copied off the devices
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=grain.checkpoint.CheckpointSave(batches),  # each process its position
            ),
            force=step == args.steps,  # the last step, whether the policy picks it or not
        )
        # After a SIGTERM to any process, JAX agrees on a step at which every process
        # saves (above); then leave before the scheduler's grace period runs out.
        if manager.reached_preemption(step):
            wait_for_saves(step)
            log(f"preemption notice: checkpoint {step} saved; exiting")
            # Not 0, which would tell the scheduler the run is finished: 143 is the status
            # of a process that SIGTERM ended.
            raise SystemExit(128 + signal.SIGTERM)
wait_for_saves(args.steps)  # the last save, written in the background, is complete
# --8<-- [end:train]

# %% written
# --8<-- [start:written]
log("checkpoints kept:", manager.all_steps())
step_folder = args.workdir / "checkpoints" / str(manager.latest_step())
log(f"files Orbax wrote for checkpoint {manager.latest_step()}, besides the data in d/ folders:")
for path in sorted(step_folder.rglob("*")):
    # d/: data files, random names; sha256.json: train.py's own (the last page)
    if path.is_file() and path.parent.name != "d" and path.name != "sha256.json":
        log(" ", path.relative_to(step_folder).as_posix())
for rank in range(processes):
    position = json.loads((step_folder / f"data/process_{rank}-of-{processes}.json").read_text())
    log(f"data iterator of process {rank}:", position)
manager.close()
# --8<-- [end:written]
