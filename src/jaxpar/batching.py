"""Splitting a host batch across devices, with errors that name the fix."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

PyTree = Any


class UnevenBatchError(ValueError):
    """A batch whose size is not a multiple of the number of devices."""


def split_batch(batch: PyTree, num_devices: int | None = None) -> PyTree:
    """Reshape every leaf of ``batch`` from ``(B, ...)`` to ``(num_devices, B // num_devices, ...)``.

    This is the input ``jax.pmap`` expects: one slice of the batch per device along the
    leading axis. All leaves must share the batch size ``B``, and ``B`` must be a multiple
    of ``num_devices``.

    Args:
        batch: an array, or a pytree (dict, tuple, ...) of arrays with the same leading size.
        num_devices: how many slices to make; by default ``jax.local_device_count()``.

    Returns:
        The same pytree with NumPy arrays of shape ``(num_devices, B // num_devices, ...)``.

    Raises:
        UnevenBatchError: ``B`` is not a multiple of ``num_devices``, or leaves disagree on ``B``.
        ValueError: ``num_devices`` is not positive, or a leaf has no leading axis.

    Examples:
        ```python
        import numpy as np

        from jaxpar import split_batch

        batch = {"x": np.zeros((128, 3)), "y": np.zeros(128)}
        split = split_batch(batch, num_devices=8)
        print(split["x"].shape, split["y"].shape)
        #> (8, 16, 3) (8, 16)
        try:
            split_batch(np.zeros((130, 3)), num_devices=8)
        except ValueError as error:
            print(error)
            '''
            a batch of 130 examples does not split evenly across 8 devices (130 = 8 x 16 + 2). Use a batch size that is a multiple of 8 (128 or 136), drop the last 2 examples, or pad the batch to 136 and mask the padding out of the loss.
            '''
        ```
    """
    if num_devices is None:
        num_devices = jax.local_device_count()
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices must be a positive integer, got {num_devices!r}.")
    leaves, treedef = jax.tree.flatten(batch)
    arrays = [np.asarray(leaf) for leaf in leaves]
    sizes = {array.shape[0] if array.ndim else None for array in arrays}
    if None in sizes:
        raise ValueError(
            "every leaf of the batch needs a leading batch axis, but one is a scalar; "
            "give it shape (batch_size, ...)."
        )
    if not arrays:
        raise ValueError("the batch has no arrays in it; pass an array or a pytree of arrays.")
    if len(sizes) > 1:
        raise UnevenBatchError(
            f"the leaves of the batch have different leading sizes {sorted(sizes)}; "
            f"every leaf must hold the same number of examples."
        )
    (size,) = sizes
    per_device, remainder = divmod(size, num_devices)
    if per_device == 0:
        raise UnevenBatchError(
            f"a batch of {size} examples is too small for {num_devices} devices: each device "
            f"needs at least one. Use a batch size that is a multiple of {num_devices}, or pad "
            f"the batch to {num_devices} and mask the padding out of the loss."
        )
    if remainder:
        lower, upper = per_device * num_devices, (per_device + 1) * num_devices
        raise UnevenBatchError(
            f"a batch of {size} examples does not split evenly across {num_devices} devices "
            f"({size} = {num_devices} x {per_device} + {remainder}). Use a batch size that is a "
            f"multiple of {num_devices} ({lower} or {upper}), drop the last {remainder} examples, "
            f"or pad the batch to {upper} and mask the padding out of the loss."
        )
    split = [a.reshape(num_devices, per_device, *a.shape[1:]) for a in arrays]
    return jax.tree.unflatten(treedef, split)
