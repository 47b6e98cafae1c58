"""A named barrier with a timeout: a rank that never arrives becomes an error that names it.

A collective's timeout, where there is one, is the whole process's and the backend's
(XLA:CPU's ``--xla_cpu_collective_timeout_seconds`` in ``XLA_FLAGS``, 30 minutes by
default; NCCL's collectives can wait for ever), and JAX's own barrier,
``multihost_utils.sync_global_devices``, is a collective too. This one waits in JAX's
coordination service instead, the server that ``jax.distributed.initialize`` started: it
gives up after ``timeout_s`` in every rank that waits, and says which ranks never came.
"""

from __future__ import annotations

import collections

import jax

KEY_PREFIX = "jaxpar_barrier"
_passes: collections.Counter[str] = collections.Counter()


class BarrierTimeoutError(RuntimeError):
    """Not every rank reached a ``barrier`` in time."""


def barrier(name: str, timeout_s: float) -> None:
    """Wait until every rank has called ``barrier(name, ...)``, at most ``timeout_s`` seconds.

    Every rank must call it, with the same name, the same number of times. A rank stuck
    before it (in data loading, a deadlock, a slow file system) then turns into an error
    in the ranks that wait for it, instead of a silent wait in the next collective; the
    stuck rank itself raises only if it reaches the barrier later. Each call is a round
    trip to the coordinator, in rank 0's process: put it where a step starts, or every
    few steps, never inside jitted code.

    Examples:
        In every rank, at the start of a step; in one process, as here, there is no one
        to wait for:

        ```python
        from jaxpar import barrier

        for _ in range(3):  # the steps of a loop: one name for all of them
            barrier("step", timeout_s=60)
        ```

    Args:
        name: names the barrier in the error; ranks that pass different names wait for
            each other until the timeout. A name can be used again once every rank has
            passed it: in a loop, prefer a fixed name to one per step, which leaves a
            key per rank in the coordination service at every step.
        timeout_s: how long to wait for the slowest rank, in seconds.

    Raises:
        BarrierTimeoutError: some rank did not arrive in time; the message names those
            that did not, or says that this rank came after the others had given up.
        RuntimeError: ``jax.distributed.initialize`` has not run (with several processes).
    """
    if timeout_s <= 0:
        raise ValueError(f"barrier(): timeout_s must be positive, got {timeout_s!r}.")
    if jax.process_count() == 1:
        return
    from jax._src import distributed  # JAX has no public name for its coordination client

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("barrier() needs jax.distributed.initialize() to have run first.")
    me = jax.process_index()
    arrival = _passes[name]
    _passes[name] += 1
    # Which ranks arrived, for the error: one key per rank and name, overwritten each time.
    client.key_value_set(f"{KEY_PREFIX}/{name}/{me}", str(arrival), allow_overwrite=True)
    try:
        client.wait_at_barrier(f"{KEY_PREFIX}/{name}", int(timeout_s * 1000))
    except jax.errors.JaxRuntimeError as error:
        if "DEADLINE_EXCEEDED" not in str(error):
            raise
        arrived = {
            int(key.rsplit("/", 1)[1])
            for key, value in client.key_value_dir_get(f"{KEY_PREFIX}/{name}/")
            if int(value) >= arrival
        }
        missing = sorted(set(range(jax.process_count())) - arrived)
        if missing:
            raise BarrierTimeoutError(
                f"rank {me} waited {timeout_s:g} s at barrier {name!r} for ranks {missing}, "
                f"which never arrived: look at what they were doing (their stacks)."
            ) from None
        raise BarrierTimeoutError(
            f"rank {me} reached barrier {name!r} after the other ranks had waited "
            f"{timeout_s:g} s for it and given up: this rank is the slow one."
        ) from None
