"""Putting a host batch on devices, with errors that name the fix."""

from __future__ import annotations

import hashlib
from typing import Any, Literal, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

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
    _check_count("num_devices", num_devices)
    arrays, treedef, size = _flatten_batch(batch)
    _check_divisible(size, num_devices, "devices")
    split = [a.reshape(num_devices, size // num_devices, *a.shape[1:]) for a in arrays]
    return jax.tree.unflatten(treedef, split)


class ShardedBatch(NamedTuple):
    """A batch placed on a mesh, and which of its rows are real examples."""

    data: PyTree
    """The batch, every leaf a ``jax.Array`` split along its first dimension."""
    mask: jax.Array
    """``float32[B]``: 1 for a real example, 0 for padding; sharded like the batch."""


def shard_batch(
    batch: PyTree,
    mesh: jax.sharding.Mesh,
    axis: str = "data",
    *,
    remainder: Literal["raise", "drop", "pad"] = "raise",
) -> ShardedBatch:
    """Put a host batch on ``mesh``, its first dimension split along the mesh axis ``axis``.

    A batch of ``B`` examples splits evenly when ``B`` is a multiple of the axis size.
    ``remainder`` says what to do otherwise: ``"raise"`` (the default) explains the
    choices, ``"drop"`` leaves out the last examples, ``"pad"`` adds rows of zeros and marks
    them with 0 in the returned ``mask``, so that the loss can ignore them.

    With several processes (``jax.process_count() > 1``), ``batch`` is this process's share
    of the global batch, as each process loads only its own rows: every process calls
    ``shard_batch`` with a share of the same size, and
    ``jax.make_array_from_process_local_data`` assembles the global batch from the shares.
    The share is split over the devices of ``axis`` that this process holds, and
    ``remainder`` applies to that split. Processes that hold the same slices of ``axis``
    (another mesh axis spans the processes) hold the same rows, and must pass equal
    shares. In a single process the share is the whole batch.

    Args:
        batch: an array, or a pytree of arrays that share their first dimension; with
            several processes, this process's share.
        mesh: the device mesh, for example ``jax.make_mesh((8,), ("data",))``.
        axis: the mesh axis to split the batch along.
        remainder: ``"raise"``, ``"drop"`` or ``"pad"``.

    Returns:
        A :class:`ShardedBatch` ``(data, mask)`` of global arrays.

    Raises:
        UnevenBatchError: the batch does not split evenly and ``remainder="raise"``, or it
            has fewer examples than the axis has devices and ``remainder="drop"``.
        ValueError: ``axis`` is not an axis of ``mesh``, ``remainder`` is not a policy, or
            none of the mesh's devices belongs to this process.

    Examples:
        ```python
        import jax
        import jax.numpy as jnp
        import numpy as np

        from jaxpar import shard_batch

        mesh = jax.make_mesh((8,), ("data",))
        batch = {"x": np.ones((19, 3)), "y": np.arange(19)}
        data, mask = shard_batch(batch, mesh, remainder="pad")
        print(data["x"].shape, data["x"].sharding.spec, int(mask.sum()))
        #> (24, 3) P('data',) 19
        # A mean over the real examples only:
        print(float(jnp.sum(data["y"] * mask) / jnp.sum(mask)))
        #> 9.0
        data, mask = shard_batch(batch, mesh, remainder="drop")
        print(data["y"].shape)
        #> (16,)
        ```
    """
    if axis not in mesh.shape:
        raise ValueError(
            f"the mesh has no axis {axis!r}; its axes are {tuple(mesh.shape)}. Pass one of "
            f"them as axis=, or build the mesh with that name: jax.make_mesh(..., ({axis!r},))."
        )
    if remainder not in ("raise", "drop", "pad"):
        raise ValueError(f"remainder must be 'raise', 'drop' or 'pad', got {remainder!r}.")
    arrays, treedef, size = _flatten_batch(batch)
    # The slices of the batch along `axis` that this process's devices hold: all of them
    # in a single process, this process's part of them otherwise.
    parts = _local_parts(mesh, axis)
    several = jax.process_count() > 1
    devices = f"devices of mesh axis {axis!r}" + (" on this process" if several else "")
    keep = size
    if remainder == "raise":
        _check_divisible(size, parts, devices, hint=_POLICY_HINT)
    elif remainder == "drop":
        keep = size - size % parts
        if keep == 0:
            raise UnevenBatchError(
                f"remainder='drop' would drop all {size} examples: there are {parts} "
                f"{devices}. Use remainder='pad', or a batch of at least {parts} examples."
            )
    target = -(-size // parts) * parts if remainder == "pad" else keep
    mask = (np.arange(target) < min(size, keep)).astype(np.float32)
    arrays = [_resize(a, keep, target) for a in arrays]
    sharding = NamedSharding(mesh, P(axis))
    # In one process this is jax.device_put; with several, each process passes its share.
    data, mask = jax.make_array_from_process_local_data(
        sharding, (jax.tree.unflatten(treedef, arrays), mask)
    )
    return ShardedBatch(data, mask)


def replicate(tree: PyTree, mesh: jax.sharding.Mesh) -> PyTree:
    """Put a full copy of every leaf of ``tree`` (parameters, optimizer state) on every device.

    With several processes (``jax.process_count() > 1``), every process calls
    ``replicate`` with the same values, for example parameters that each process creates
    from the same seed, and each puts them on its own devices of the mesh
    (``jax.make_array_from_process_local_data``). JAX does not broadcast process 0's
    values, as PyTorch's DDP does when it wraps a model, so ``replicate`` checks that
    they agree, as ``jax.device_put`` does: it compares a hash of every leaf across
    the processes (one small all-gather; ``jax.device_put`` gathers the values
    themselves), and raises a ``ValueError`` naming the first leaf that differs, instead of
    letting each process compute with its own copy of a "replicated" array. The check
    needs a mesh that spans every process, as each process must take part in it; with a
    mesh of only some of the processes, nothing is checked. State that is sharded rather
    than replicated is created sharded instead, each process computing only its shards
    (``jax.jit`` with ``out_shardings``).

    Args:
        tree: an array, or a pytree of arrays and scalars.
        mesh: the device mesh to replicate over.

    Returns:
        The same pytree, every leaf a ``jax.Array`` replicated over ``mesh``.

    Raises:
        ValueError: with several processes, the processes passed trees of different
            structures or different values, or a leaf is already a global array that
            spans several processes.

    Examples:
        ```python
        import jax
        import numpy as np

        from jaxpar import replicate

        mesh = jax.make_mesh((8,), ("data",))
        params = replicate({"w": np.zeros((3, 2)), "b": np.zeros(2)}, mesh)
        print(params["w"].shape, params["w"].sharding.is_fully_replicated)
        #> (3, 2) True
        ```
    """
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    leaves = [leaf if hasattr(leaf, "shape") else np.asarray(leaf) for _, leaf in with_paths]
    processes = {device.process_index for device in mesh.devices.flat}
    if jax.process_count() > 1 and len(processes) == jax.process_count():
        paths = [jax.tree_util.keystr(path) or "the value" for path, _ in with_paths]
        _check_same_on_every_process(paths, leaves, treedef)
    # A replicated leaf's share is all of it. In one process this is jax.device_put.
    replicated = jax.make_array_from_process_local_data(NamedSharding(mesh, P()), leaves)
    return jax.tree.unflatten(treedef, replicated)


_SAME_VALUES_FIX = (
    "Create replicated values identically on every process (the same seed, the same "
    "data), or pass process 0's values to all first: "
    "jax.experimental.multihost_utils.broadcast_one_to_all(tree)."
)


def _digest(*parts: bytes) -> np.ndarray:
    """Four uint32 words that identify ``parts``."""
    hashed = hashlib.blake2b(digest_size=16)
    for part in parts:
        hashed.update(part)
    return np.frombuffer(hashed.digest(), dtype=np.uint32)


def _leaf_digest(path: str, leaf: Any) -> np.ndarray:
    """A digest of a leaf's dtype, shape and values, as this process holds it."""
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        raise ValueError(
            f"replicate got a global array at {path} ({jax.typeof(leaf)}, sharding "
            f"{leaf.sharding.spec}) that spans several processes, but takes values that each "
            f"process holds whole. To replicate a global array, reshard it instead: "
            f"jax.jit(lambda x: x, out_shardings=NamedSharding(mesh, P()))(x)."
        )
    array = np.ascontiguousarray(np.asarray(leaf))
    return _digest(f"{array.dtype.str}{array.shape}".encode(), array.tobytes())


def _check_same_on_every_process(paths: list[str], leaves: list[Any], treedef: Any) -> None:
    """Raise a ValueError naming the first leaf whose value differs between processes."""
    from jax.experimental.multihost_utils import process_allgather

    digests = np.stack(
        [_leaf_digest(p, x) for p, x in zip(paths, leaves, strict=True)]
        + [_digest(repr(treedef).encode())]
    )
    # One all-gather of 8 words per process: the structure's digest and the values' digest.
    summary = np.concatenate([digests[-1], _digest(digests.tobytes())])
    everyone = process_allgather(summary)
    if (everyone == summary).all():
        return
    others = [p for p, seen in enumerate(everyone) if not (seen[:4] == everyone[0, :4]).all()]
    if others:
        raise ValueError(
            f"replicate got trees of different structures: processes {others} pass another "
            f"structure than process 0 (other keys, or another number of leaves); process "
            f"{jax.process_index()} passes {treedef}. Every process must pass the same tree. "
            + _SAME_VALUES_FIX
        )
    # Same structure, so the same number of leaves: gather every leaf's digest.
    per_leaf = process_allgather(digests[:-1])
    for index, path in enumerate(paths):
        differ = [
            p for p in range(len(per_leaf)) if (per_leaf[p, index] != per_leaf[0, index]).any()
        ]
        if differ:
            leaf = np.asarray(leaves[index])
            raise ValueError(
                f"replicate got different values for {path} ({leaf.dtype}{list(leaf.shape)} on "
                f"process {jax.process_index()}) on different processes: processes {differ} "
                f"pass other values than process 0. A replicated array must hold the same "
                f"value on every process; otherwise each process computes with its own copy, "
                f"and nothing fails. " + _SAME_VALUES_FIX
            )


_POLICY_HINT = "or call shard_batch(..., remainder='drop') or remainder='pad'"


def _local_parts(mesh: jax.sharding.Mesh, axis: str) -> int:
    """How many slices along the mesh axis ``axis`` this process's devices hold."""
    position = mesh.axis_names.index(axis)
    me = jax.process_index()
    held = {
        index[position]
        for index, device in np.ndenumerate(mesh.devices)
        if device.process_index == me
    }
    if not held:
        raise ValueError(
            f"none of the mesh's {mesh.devices.size} devices belongs to process {me}; "
            f"build the mesh from jax.devices(), which lists every process's devices."
        )
    return len(held)


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")


def _flatten_batch(batch: PyTree) -> tuple[list[np.ndarray], Any, int]:
    """The leaves of a batch as NumPy arrays, its structure, and its batch size."""
    leaves, treedef = jax.tree.flatten(batch)
    arrays = [np.asarray(leaf) for leaf in leaves]
    if not arrays:
        raise ValueError("the batch has no arrays in it; pass an array or a pytree of arrays.")
    if any(array.ndim == 0 for array in arrays):
        raise ValueError(
            "every leaf of the batch needs a leading batch axis, but one is a scalar; "
            "give it shape (batch_size, ...)."
        )
    sizes = sorted({array.shape[0] for array in arrays})
    if len(sizes) > 1:
        raise UnevenBatchError(
            f"the leaves of the batch have different leading sizes {sizes}; "
            f"every leaf must hold the same number of examples."
        )
    return arrays, treedef, sizes[0]


def _check_divisible(size: int, parts: int, what: str, hint: str = "") -> None:
    """Raise an UnevenBatchError naming the sizes and the remedies unless parts divides size."""
    per_part, remainder = divmod(size, parts)
    hint = f", {hint}" if hint else ""
    if per_part == 0:
        raise UnevenBatchError(
            f"a batch of {size} examples is too small for {parts} {what}: each device "
            f"needs at least one. Use a batch size that is a multiple of {parts}, or pad "
            f"the batch to {parts} and mask the padding out of the loss{hint}."
        )
    if remainder:
        lower, upper = per_part * parts, (per_part + 1) * parts
        raise UnevenBatchError(
            f"a batch of {size} examples does not split evenly across {parts} {what} "
            f"({size} = {parts} x {per_part} + {remainder}). Use a batch size that is a "
            f"multiple of {parts} ({lower} or {upper}), drop the last {remainder} examples, "
            f"or pad the batch to {upper} and mask the padding out of the loss{hint}."
        )


def _resize(array: np.ndarray, keep: int, target: int) -> np.ndarray:
    """The first ``keep`` rows, padded with zero rows up to ``target`` rows."""
    array = array[:keep]
    if target > keep:
        padding = np.zeros((target - keep, *array.shape[1:]), dtype=array.dtype)
        array = np.concatenate([array, padding])
    return array
