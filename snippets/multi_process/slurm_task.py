"""One task of a SLURM job step: what `jax.distributed.initialize()` takes from SLURM's environment.

Started by `slurm.py` as `srun` would start it, with the variables SLURM sets for each task
(`SLURM_JOB_ID`, `SLURM_STEP_NODELIST`, `SLURM_NTASKS`, `SLURM_PROCID`, `SLURM_LOCALID`).
With no arguments, `jax.distributed.initialize()` finds the coordinator, the process count
and this task's rank there, and restricts the task to the GPUs it chose: the line printed
says which, as `jax_cuda_visible_devices` (`all` where it chose none).
"""

import jax

jax.config.update("jax_num_cpu_devices", 8)
# output checked through slurm.py: it starts this script in each simulated task and prints its lines

jax.distributed.initialize()  # no arguments: JAX reads SLURM's variables itself
gpus = jax.config.read("jax_cuda_visible_devices")
print(f"task {jax.process_index()} of {jax.process_count()}: GPUs {gpus}")
