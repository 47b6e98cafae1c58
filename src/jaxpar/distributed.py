"""The script side of ``python -m jaxpar.launch``: joining the other processes."""

from __future__ import annotations

import os

import jax

from jaxpar.launch import ENV_COORDINATOR, ENV_INIT_TIMEOUT, ENV_NUM_PROCESSES, ENV_PROCESS_ID


class NotLaunchedError(RuntimeError):
    """The script was not started by the launcher, and no cluster was detected."""


def launched() -> bool:
    """Whether this process was started by ``python -m jaxpar.launch``."""
    return ENV_COORDINATOR in os.environ


def initialize_distributed() -> None:
    """Call ``jax.distributed.initialize`` with the settings the launcher passed.

    Under ``python -m jaxpar.launch`` it connects to the other local processes. On a cluster
    (TPU pod slices, SLURM, Open MPI), where the launcher is not used, it calls
    ``jax.distributed.initialize()`` with no arguments, which finds its settings itself.
    Call it before anything else touches a device.

    Raises:
        NotLaunchedError: neither the launcher nor a cluster environment provided settings.
    """
    if launched():
        jax.distributed.initialize(
            coordinator_address=os.environ[ENV_COORDINATOR],
            num_processes=int(os.environ[ENV_NUM_PROCESSES]),
            process_id=int(os.environ[ENV_PROCESS_ID]),
            initialization_timeout=int(os.environ.get(ENV_INIT_TIMEOUT, "60")),
        )
        return
    try:
        jax.distributed.initialize()
    except (ValueError, RuntimeError) as error:
        raise NotLaunchedError(
            f"this process has no settings for jax.distributed ({error}). Start it with "
            f"`python -m jaxpar.launch --nproc 2 --devices-per-process 4 SCRIPT` on one "
            f"machine, or on a cluster whose scheduler JAX detects (SLURM, TPU, Open MPI)."
        ) from error
