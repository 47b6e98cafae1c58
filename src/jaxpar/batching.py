"""Putting a host batch on devices, with errors that name the fix."""

from __future__ import annotations

import hashlib
from fractions import Fraction
from typing import Any, Literal, NamedTuple

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar._checks import is_whole, shown
from jaxpar.meshes import _check_mesh

PyTree = Any


class UnevenBatchError(ValueError):
    """A batch whose size is not a multiple of the number of devices, or, with several
    processes, shares of the batch of different sizes."""


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
        ValueError: ``num_devices`` is not positive, or a leaf has no leading axis (a Python
            list of numbers is a pytree of scalars: pass ``np.asarray(batch)``).

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
    num_devices = _check_count("num_devices", num_devices)
    _, arrays, treedef, size = _flatten_batch(batch)
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
    Shares of different sizes would make each process assemble another global batch, so
    ``shard_batch`` compares their sizes (one all-gather of two numbers per process, when
    the mesh spans every process) and raises on every process if they differ.
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
        UnevenBatchError: the batch does not split evenly and ``remainder="raise"``, it
            has fewer examples than the axis has devices and ``remainder="drop"``, it has
            none and ``remainder="pad"``, or with several processes, the processes pass
            shares of different sizes.
        TypeError: ``mesh`` is not a ``jax.sharding.Mesh``, or a leaf holds no numbers
            (strings, objects).
        ValueError: ``axis`` is not an axis of ``mesh``, ``remainder`` is not a policy, a
            leaf has no leading axis, or none of the mesh's devices belongs to this process.

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
    _check_mesh(mesh, "shard_batch")
    if axis not in mesh.shape:
        raise ValueError(
            f"the mesh has no axis {axis!r}; its axes are {tuple(mesh.shape)}. Pass one of "
            f"them as axis=, or build the mesh with that name: jax.make_mesh(..., ({axis!r},))."
        )
    if remainder not in ("raise", "drop", "pad"):
        raise ValueError(f"remainder must be 'raise', 'drop' or 'pad', got {remainder!r}.")
    paths, arrays, treedef, size = _flatten_batch(batch)
    for path, array in zip(paths, arrays, strict=True):
        _check_numeric("shard_batch", path, array)
    # The slices of the batch along `axis` that this process's devices hold: all of them
    # in a single process, this process's part of them otherwise.
    parts = _local_parts(mesh, axis)
    if _spans_every_process(mesh):
        _check_equal_shares(size, parts, axis, remainder)
    several = jax.process_count() > 1
    devices = f"devices of mesh axis {axis!r}" + (" on this process" if several else "")
    keep, target = _kept_and_padded(size, parts, remainder)
    if remainder == "raise":
        _check_divisible(size, parts, devices, hint=_POLICY_HINT)
    elif remainder == "drop" and keep == 0:
        raise UnevenBatchError(
            f"remainder='drop' would drop all {size} examples: there are {parts} "
            f"{devices}. Use remainder='pad', or a batch of at least {parts} examples."
        )
    elif remainder == "pad" and size == 0:
        raise UnevenBatchError(
            f"the batch has no examples (its leaves have 0 rows), and remainder='pad' would "
            f"make a batch of {parts} rows of padding, whose masked mean is 0 / 0 = NaN. "
            f"Skip the empty batch, or pass at least one example."
        )
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
        TypeError: ``mesh`` is not a ``jax.sharding.Mesh``, or a leaf holds no numbers
            (strings, objects).
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
    _check_mesh(mesh, "replicate")
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    leaves = [leaf if hasattr(leaf, "shape") else np.asarray(leaf) for _, leaf in with_paths]
    paths = [jax.tree_util.keystr(path) or "the value" for path, _ in with_paths]
    for path, leaf in zip(paths, leaves, strict=True):
        _check_numeric("replicate", path, leaf)
    if _spans_every_process(mesh):
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


def _spans_every_process(mesh: jax.sharding.Mesh) -> bool:
    """Whether there are several processes and ``mesh`` has devices of each of them: a
    check across processes is made only then, as every process must take part in it."""
    processes = {device.process_index for device in mesh.devices.flat}
    return jax.process_count() > 1 and len(processes) == jax.process_count()


def _allgather(values: np.ndarray) -> np.ndarray:
    """``values`` from every process, stacked in process order (one collective)."""
    from jax.experimental.multihost_utils import process_allgather

    return np.asarray(process_allgather(values))


def _check_same_on_every_process(paths: list[str], leaves: list[Any], treedef: Any) -> None:
    """Raise a ValueError naming the first leaf whose value differs between processes."""
    digests = np.stack(
        [_leaf_digest(p, x) for p, x in zip(paths, leaves, strict=True)]
        + [_digest(repr(treedef).encode())]
    )
    # One all-gather of 8 words per process: the structure's digest and the values' digest.
    summary = np.concatenate([digests[-1], _digest(digests.tobytes())])
    everyone = _allgather(summary)
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
    per_leaf = _allgather(digests[:-1])
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


def _kept_and_padded(size: int, parts: int, remainder: str) -> tuple[int, int]:
    """How many of ``size`` rows ``remainder`` keeps, and how many rows it makes of them."""
    if remainder == "drop":
        return size - size % parts, size - size % parts
    if remainder == "pad":
        return size, -(-size // parts) * parts
    return size, size


def _check_equal_shares(size: int, parts: int, axis: str, remainder: str) -> None:
    """Raise an UnevenBatchError, on every process, naming each process's rows unless all
    shares make the same number of rows per device of ``axis``."""
    shares = [(int(rows), int(held)) for rows, held in _allgather(np.array([size, parts]))]
    per_device = {Fraction(_kept_and_padded(*share, remainder)[1], share[1]) for share in shares}
    if len(per_device) == 1:
        return
    groups: dict[tuple[int, int], list[int]] = {}
    for process, share in enumerate(shares):
        groups.setdefault(share, []).append(process)
    same_devices = len({held for _, held in shares}) == 1
    passes = []
    for (rows, held), processes in groups.items():
        who = (
            f"process {processes[0]} passes"
            if len(processes) == 1
            else f"processes {processes} pass"
        )
        made = _kept_and_padded(rows, held, remainder)[1]
        after = f" ({made} after remainder={remainder!r})" if made != rows else ""
        passes.append(
            f"{who} {rows} rows{after}" + ("" if same_devices else f" for {held} devices")
        )
    on = f"mesh axis {axis!r}"
    devices = f", each for {shares[0][1]} devices of {on}" if same_devices else f" ({on})"
    raise UnevenBatchError(
        f"shard_batch got shares of different sizes: {', '.join(passes)}{devices}. Every "
        f"process must pass a share of the same size: JAX assembles the global batch from "
        f"equal shares, and with these each process would build another global batch and "
        f"compute other results, without an error. Give every process the same number of "
        f"rows (the global batch size divided by jax.process_count()), and drop or pad an "
        f"incomplete last batch on every process alike."
    )


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


def _check_count(name: str, value: object) -> int:
    if not is_whole(value) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)


def _check_numeric(function: str, path: str, leaf: Any) -> None:
    """Raise a TypeError naming ``path`` if ``leaf`` holds strings, objects or dates."""
    if isinstance(leaf, jax.Array):  # a JAX type already, random keys included
        return
    dtype = np.dtype(leaf.dtype)
    if dtype.kind in "OUSMm":
        raise TypeError(
            f"{function} got {path} of dtype {dtype}, but JAX arrays hold only numbers and "
            f"booleans. Turn it into numbers first (class names into integer ids, say), or "
            f"keep it out of the tree and use it on the host."
        )


def _flatten_batch(batch: PyTree) -> tuple[list[str], list[np.ndarray], Any, int]:
    """The paths and leaves (as NumPy arrays) of a batch, its structure and its batch size."""
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(batch)
    paths = [jax.tree_util.keystr(path) or "the batch" for path, _ in with_paths]
    arrays = [np.asarray(leaf) for _, leaf in with_paths]
    if not arrays:
        raise ValueError("the batch has no arrays in it; pass an array or a pytree of arrays.")
    if all(array.ndim == 0 for array in arrays) and isinstance(batch, list | tuple):
        raise ValueError(
            f"the batch is the Python {shown(batch)}, which JAX reads as a pytree of "
            f"{len(arrays)} separate scalars, not as the rows of an array. Pass an array whose first dimension is the batch: np.asarray(batch) "
            f"(pad the rows of a ragged list to one length first)."
        )
    for path, (keys, leaf), array in zip(paths, with_paths, arrays, strict=True):
        if array.ndim == 0:
            in_list = isinstance(keys[-1], jax.tree_util.SequenceKey)
            owner = jax.tree_util.keystr(keys[:-1]) or "the batch"
            hint = (
                f" If {owner} is a Python list of examples, pass np.asarray of it."
                if in_list
                else ""
            )
            raise ValueError(
                f"every leaf of the batch needs a leading batch axis, but {path} is a "
                f"scalar, {shown(leaf)}; give it shape (batch_size, ...), or keep it "
                f"out of the batch.{hint}"
            )
    sizes = sorted({array.shape[0] for array in arrays})
    if len(sizes) > 1:
        raise UnevenBatchError(
            f"the leaves of the batch have different leading sizes {sizes}; "
            f"every leaf must hold the same number of examples."
        )
    return paths, arrays, treedef, sizes[0]


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
