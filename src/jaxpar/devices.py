"""Simulating several CPU devices, so that parallel code runs on any laptop."""

from __future__ import annotations

import jax

from jaxpar._checks import is_whole


class DevicesAlreadyInitializedError(RuntimeError):
    """JAX created its devices before the simulated device count was set."""


def simulate_cpu_devices(count: int = 8) -> None:
    """Make JAX create ``count`` CPU devices.

    The same as ``jax.config.update("jax_num_cpu_devices", count)``, with an error that
    says what to do when it comes too late. Call it right after ``import jax``, before
    anything creates an array or asks for devices. On a machine with GPUs or TPUs, JAX
    keeps using those; only the number of CPU devices changes.

    Args:
        count: how many CPU devices to simulate, at least 1.

    Raises:
        ValueError: ``count`` is not a positive integer.
        DevicesAlreadyInitializedError: JAX already created its devices with another count.

    Examples:
        The tests of this library run on 8 simulated devices, so asking for 8 again is
        harmless, while asking for another count now is too late:

        ```python
        import jax

        from jaxpar import simulate_cpu_devices

        simulate_cpu_devices(8)
        print(jax.device_count())
        #> 8
        try:
            simulate_cpu_devices(4)
        except RuntimeError as error:
            print(error)
            '''
            JAX has already initialised its devices with 8 CPU devices, so it cannot switch to 4. Call simulate_cpu_devices(4) right after `import jax`, before any array is created or jax.devices() is called, or set JAX_NUM_CPU_DEVICES=4 in the environment before starting Python.
            '''
        ```
    """
    if not is_whole(count) or count < 1:
        raise ValueError(
            f"simulate_cpu_devices needs a positive integer count of devices, got {count!r}; "
            f"pass for example simulate_cpu_devices(8)."
        )
    count = int(count)  # np.int64(8) too
    current = jax.config.jax_num_cpu_devices
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError as error:
        if current == count:
            return
        in_use = len(jax.devices("cpu")) if current is None or current < 0 else current
        raise DevicesAlreadyInitializedError(
            f"JAX has already initialised its devices with {in_use} CPU devices, so it "
            f"cannot switch to {count}. Call simulate_cpu_devices({count}) right after "
            f"`import jax`, before any array is created or jax.devices() is called, or set "
            f"JAX_NUM_CPU_DEVICES={count} in the environment before starting Python."
        ) from error
