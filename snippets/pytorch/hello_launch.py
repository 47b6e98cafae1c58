"""jaxpar.launch in JAX, the twin of `hello_torchrun.py`: what each process is told, and the devices it drives.

Run it with `python -m jaxpar.launch --nproc 4 --devices-per-process 2 hello_launch.py`.
The launcher starts 4 processes, as torchrun does, and tells each its place in
environment variables; `jaxpar.initialize_distributed` passes them to
`jax.distributed.initialize`. Unlike a PyTorch rank, a JAX process drives every device it
is given (2 simulated CPU devices here; its GPUs on a GPU machine), and every process
sees every device of the run. Process 0 prints what each process was told and drives,
gathered with `multihost_utils.process_allgather`.
"""

# jaxpar.launch: --nproc 4 --devices-per-process 2 --timeout 120

import jax

from jaxpar import initialize_distributed

initialize_distributed()  # jax.distributed.initialize, with what the launcher set

# %% hello
import os

import numpy as np
from jax.experimental import multihost_utils

# --8<-- [start:hello]
told = [int(os.environ[name]) for name in ("JAXPAR_PROCESS_ID", "JAXPAR_NUM_PROCESSES")]
mine = np.array([*told, jax.process_index(), jax.process_count(), jax.device_count()]
                + [device.id for device in jax.local_devices()])  # fmt: skip
everyone = multihost_utils.process_allgather(mine)  # one row per process
if jax.process_index() == 0:
    for process_id, processes, index, count, devices, *ids in everyone.tolist():
        told = {"JAXPAR_PROCESS_ID": process_id, "JAXPAR_NUM_PROCESSES": processes}
        print(f"process {index} of {count}: told {told}, drives devices {ids} of {devices}")
# --8<-- [end:hello]
