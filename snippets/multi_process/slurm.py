"""What JAX does under SLURM: one task per node uses one GPU of 8 unless told otherwise.

This machine has no SLURM and no GPU, so this script does what `srun` does for a job step:
it starts `slurm_task.py` (beside it) once per task, with the environment variables SLURM
gives each task, and a local coordinator port (`JAX_COORDINATOR_PORT`, which JAX reads
instead of the port it derives from `SLURM_JOB_ID`). Three job steps of 2 tasks: one task
per node, as `#SBATCH --ntasks-per-node=1` gives; the same with the fix,
`JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7`; and one task per GPU, as
`--ntasks-per-node=8` gives with every GPU of the node visible to every task (2 of its 8
tasks shown). Each task prints
what `jax.distributed.initialize()` found: its rank, the task count, and the GPUs it
restricted the task to.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)

# %% srun
# --8<-- [start:srun]
import os
import socket
import subprocess
import sys
from pathlib import Path

# slurm_task.py lies next to this file (in a notebook: in the current folder).
TASK = Path(globals().get("__file__", "slurm_task.py")).resolve().parent / "slurm_task.py"


def srun(local_ids: list[int], extra: dict[str, str] | None = None) -> None:
    """Start one task per entry of `local_ids` (SLURM_LOCALID: the task's index on its node),
    with the variables SLURM sets, and print each task's line in rank order."""
    with socket.socket() as probe:  # a free port for this step's coordinator
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    tasks = []
    for rank, local_id in enumerate(local_ids):
        env = {
            **os.environ,
            "SLURM_JOB_ID": "4242",
            "SLURM_STEP_NODELIST": "localhost",  # the first node runs the coordinator
            "SLURM_NTASKS": str(len(local_ids)),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(local_id),
            "JAX_COORDINATOR_PORT": port,
            "JAX_PLATFORMS": "cpu",
            **(extra or {}),
        }
        tasks.append(subprocess.Popen([sys.executable, str(TASK)], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    for task in tasks:
        out, err = task.communicate(timeout=120)
        assert task.returncode == 0, err
        print(" ", out.strip())


# --8<-- [end:srun]

# %% one_per_node
# --8<-- [start:one_per_node]
print("--ntasks-per-node=1, 2 nodes: SLURM_LOCALID is 0 in both tasks")
srun(local_ids=[0, 0])
# --8<-- [end:one_per_node]

# %% fixed
# --8<-- [start:fixed]
print("the same, with JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7 in the batch script")
srun(local_ids=[0, 0], extra={"JAX_LOCAL_DEVICE_IDS": "0,1,2,3,4,5,6,7"})
# --8<-- [end:fixed]

# %% one_per_gpu
# --8<-- [start:one_per_gpu]
print("--ntasks-per-node=8, every GPU visible to every task: SLURM_LOCALID is the task's index")
srun(local_ids=[0, 1])
# --8<-- [end:one_per_gpu]
