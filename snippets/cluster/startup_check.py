"""The first thing a script prints on a cluster: its rank, the process count, local and global devices.

Started by `schedulers.py` as each scheduler would start it, with that scheduler's
environment variables. With no arguments, `jax.distributed.initialize()` finds the
coordinator, the process count and this process's rank in them (SLURM, Open MPI, TPU VMs);
a Kubernetes indexed Job passes two of them, which JAX reads only through the Kubernetes
API (with the `kubernetes` package and a service account allowed to read pods and Jobs).
Then the script prints what JAX made of it: compare it with what the job asked for before
anything else runs.
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)
# output checked through schedulers.py: it starts this script in each simulated process and prints its lines

# --8<-- [start:initialize]
import os

if "JOB_COMPLETION_INDEX" in os.environ:  # a Kubernetes indexed Job
    jax.distributed.initialize(
        num_processes=int(os.environ["NUM_PROCESSES"]),  # set in the manifest
        process_id=int(os.environ["JOB_COMPLETION_INDEX"]),  # set by Kubernetes
        cluster_detection_method="deactivate",  # nothing more to detect: no warning
    )  # and the coordinator from JAX_COORDINATOR_ADDRESS, also set in the manifest
else:
    jax.distributed.initialize()  # SLURM, Open MPI, TPU VMs: JAX reads their variables
# --8<-- [end:initialize]

# --8<-- [start:check]
gpus = jax.config.read("jax_cuda_visible_devices")  # the GPUs JAX chose: "all" if none
print(
    f"process {jax.process_index()} of {jax.process_count()}, {jax.default_backend()}: "
    f"{jax.local_device_count()} local devices, {jax.device_count()} in all"
    + ("" if gpus == "all" else f", GPUs {gpus}")
)
# --8<-- [end:check]
