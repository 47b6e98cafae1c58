"""The script side of ``python -m jaxpar.launch``: joining the other processes."""

from __future__ import annotations

import os
from typing import Any

import jax

from jaxpar.launch import ENV_COORDINATOR, ENV_INIT_TIMEOUT, ENV_NUM_PROCESSES, ENV_PROCESS_ID


class NotLaunchedError(RuntimeError):
    """The script was not started by the launcher, and no cluster was detected."""


def launched() -> bool:
    """Whether this process was started by ``python -m jaxpar.launch``."""
    return ENV_COORDINATOR in os.environ


# What the launcher decides for each process; a script cannot also pass them.
LAUNCHER_SETTINGS = ("coordinator_address", "num_processes", "process_id")


def initialize_distributed(**options: Any) -> None:
    """Call ``jax.distributed.initialize`` with the settings the launcher passed.

    Under ``python -m jaxpar.launch`` it connects to the other local processes. On a cluster
    (TPU pod slices, SLURM, Open MPI), where the launcher is not used, it calls
    ``jax.distributed.initialize()`` with no arguments, which finds its settings itself.
    Call it before anything else touches a device. It changes nothing else: how a failing
    rank ends the run is the launcher's business, so the same script keeps JAX's own
    behaviour on a cluster.

    Args:
        **options: passed on to ``jax.distributed.initialize``, for example
            ``heartbeat_timeout_seconds=`` (how long the others wait for a rank that died,
            100 s by default) or ``shutdown_timeout_seconds=`` (how long a finished rank
            waits for the others at exit, 300 s by default).

    Raises:
        NotLaunchedError: neither the launcher nor a cluster environment provided settings.
        TypeError: under the launcher, an option the launcher sets itself.
        RuntimeError: the call came too late: JAX had already initialised its devices
            (``jax.devices()``, an array or a computation came first).
    """
    if launched():
        taken = sorted(set(options) & set(LAUNCHER_SETTINGS))
        if taken:
            raise TypeError(
                f"initialize_distributed() got {', '.join(taken)}, which python -m "
                f"jaxpar.launch sets for each process; leave {'it' if len(taken) == 1 else 'them'} "
                f"out (use --nproc and --port to change them)."
            )
        _check_not_too_late()
        options.setdefault("initialization_timeout", int(os.environ.get(ENV_INIT_TIMEOUT, "60")))
        jax.distributed.initialize(
            coordinator_address=os.environ[ENV_COORDINATOR],
            num_processes=int(os.environ[ENV_NUM_PROCESSES]),
            process_id=int(os.environ[ENV_PROCESS_ID]),
            **options,
        )
        return
    _check_not_too_late()
    try:
        jax.distributed.initialize(**options)
    except ValueError as error:
        if "defined" not in str(error):  # a bad option, not missing settings
            raise
        raise NotLaunchedError(
            f"this process has no settings for jax.distributed ({error}). Start it with "
            f"`python -m jaxpar.launch --nproc 2 --devices-per-process 4 SCRIPT` on one "
            f"machine, or on a cluster whose scheduler JAX detects (SLURM, TPU, Open MPI)."
        ) from error


def _check_not_too_late() -> None:
    """Refuse the call once JAX has initialised its devices: it must come before."""
    if _devices_initialised():
        raise RuntimeError(
            "initialize_distributed() came too late: JAX has already initialised its "
            "devices in this process (something called jax.devices(), created an array or "
            "ran a computation first), and jax.distributed.initialize() must come before "
            "that, so that the devices of every process join one system. Call "
            "initialize_distributed() first, right after `import jax`, before any other "
            "JAX call."
        )


def _devices_initialised() -> bool:
    """Whether JAX has created its devices (backends), after which
    ``jax.distributed.initialize`` refuses to run."""
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()
