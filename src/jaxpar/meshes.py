"""Device meshes and partition specs, checked first, with errors that name the fix."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
from jax.sharding import AbstractMesh, AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxpar._checks import is_whole, shown


def make_mesh(
    shape: tuple[int, ...],
    names: tuple[str, ...],
    *,
    axis_types: AxisType | tuple[AxisType, ...] | None = None,
    devices: Sequence[jax.Device] | None = None,
) -> jax.sharding.Mesh:
    """Build a device mesh like ``jax.make_mesh``, after checking what it is given.

    ``jax.make_mesh`` reports a shape too large for the devices with a bare count;
    this one says which shape was asked for, how many devices there are, and which shapes
    would fit. Unlike ``jax.make_mesh``, which quietly takes the first devices for a shape
    too small, it also refuses a mesh that leaves devices out, unless ``devices`` says which
    ones to use.

    Args:
        shape: the size of each mesh axis, such as ``(8,)`` or ``(2, 4)``.
        names: one name per axis, such as ``("data",)`` or ``("x", "y")``.
        axis_types: one ``jax.sharding.AxisType`` per axis, or a single one for every
            axis: ``AxisType.Explicit`` (the default, as in ``jax.make_mesh``: shardings
            are part of the array's type), ``AxisType.Auto`` (the compiler chooses) or
            ``AxisType.Manual``.
        devices: the devices to lay out; by default all of ``jax.devices()``.

    Returns:
        A ``jax.sharding.Mesh`` of that shape.

    Raises:
        TypeError: ``devices`` is not a sequence of devices (``jax.devices`` instead of
            ``jax.devices()``, say).
        ValueError: ``shape`` and ``names`` differ in length, a size is not a positive
            integer, a name is not a string or is repeated, ``axis_types`` does not give one
            type per axis, ``devices`` is empty or repeats a device, or the sizes do not
            multiply to the number of devices.

    Examples:
        ```python
        from jaxpar import make_mesh

        mesh = make_mesh((2, 4), ("x", "y"))
        print(mesh.shape, mesh.axis_types)
        #> OrderedDict({'x': 2, 'y': 4}) (Explicit, Explicit)
        try:
            make_mesh((3, 4), ("x", "y"))
        except ValueError as error:
            print(error)
            '''
            a mesh of shape (3, 4) needs 3 x 4 = 12 devices, but 8 are available. Use a shape whose sizes multiply to 8, such as (8,), (2, 4) or (4, 2); or simulate 12 CPU devices with jaxpar.simulate_cpu_devices(12) right after `import jax`, before JAX creates its devices.
            '''
        ```
    """
    shape = _check_shape(shape)
    names = _check_names(names, shape)
    axis_types = _check_axis_types(axis_types, names)
    product = math.prod(shape)
    if devices is not None:
        devices = _check_devices(devices, shape, product)
    count = len(devices) if devices is not None else jax.device_count()
    if product != count:
        raise ValueError(_count_message(shape, product, count, given=devices is not None))
    return jax.make_mesh(shape, names, axis_types=axis_types, devices=devices)


def check_spec(mesh: jax.sharding.Mesh, spec: P, shape: Sequence[int]) -> None:
    """Check that ``spec`` can shard an array of ``shape`` over ``mesh``; raise otherwise.

    Each entry of the ``PartitionSpec`` says how one dimension of the array is split:
    ``None`` (not split), a mesh axis name, or a tuple of names (split over all of them).
    The spec is valid when it names only axes of ``mesh``, has at most one entry per
    dimension, uses each mesh axis at most once, and every split dimension is a multiple of
    the product of the sizes of the axes it is split over.

    Args:
        mesh: the device mesh.
        spec: the ``jax.sharding.PartitionSpec`` to check.
        shape: the shape of the array to shard.

    Raises:
        TypeError: ``mesh`` is not a ``Mesh`` (or an ``AbstractMesh``), or ``spec`` is not
            a ``PartitionSpec``.
        ValueError: one of the conditions above fails; the message names the entry and
            what would fix it.

    Examples:
        ```python
        import jax
        from jax.sharding import PartitionSpec as P

        from jaxpar import check_spec

        mesh = jax.make_mesh((2, 4), ("x", "y"))
        check_spec(mesh, P("x", "y"), (8, 4))  # fine: 8 rows over 2, 4 columns over 4
        try:
            check_spec(mesh, P(None, "y"), (8, 6))
        except ValueError as error:
            print(error)
            '''
            dimension 1 of shape (8, 6) has size 6, which does not split evenly over mesh axis 'y' of size 4. Pad dimension 1 to 8 (a multiple of 4), shard it over mesh axis 'x' (size 2) instead, or leave it unsharded with None in position 1 of the PartitionSpec.
            '''
        ```
    """
    _check_mesh(mesh, "check_spec", devices=False)
    entries = _check_entries(mesh, spec)
    shape = _check_array_shape(shape)
    if len(entries) > len(shape):
        raise ValueError(
            f"{spec!r} has {_count(len(entries), 'entry', 'entries')} but the array has "
            f"{_count(len(shape), 'dimension')} (shape {shape}); a PartitionSpec gives at "
            f"most one entry per dimension. Remove the extra entries, or check the shape."
        )
    _check_no_repeats(spec, entries)
    used = {name for axes in entries for name in axes}
    for dim, axes in enumerate(entries):
        parts = math.prod(mesh.shape[name] for name in axes)
        if axes and shape[dim] % parts:
            raise ValueError(_divisible_message(mesh, dim, shape, axes, parts, used))


def named_sharding(
    mesh: jax.sharding.Mesh, spec: P, shape: Sequence[int] | None = None
) -> NamedSharding:
    """A ``NamedSharding(mesh, spec)``, checked first by :func:`check_spec`.

    Without ``shape``, only what does not depend on the array is checked: that the spec
    names axes of the mesh, each at most once.

    Args:
        mesh: the device mesh.
        spec: how to split each dimension, a ``jax.sharding.PartitionSpec``.
        shape: the shape of the array this sharding is for, if known.

    Returns:
        The ``jax.sharding.NamedSharding``.

    Raises:
        TypeError: ``mesh`` is not a ``Mesh`` (or an ``AbstractMesh``), or ``spec`` is not
            a ``PartitionSpec``.
        ValueError: the spec does not fit the mesh (or the shape, when given).

    Examples:
        ```python
        import jax
        import numpy as np
        from jax.sharding import PartitionSpec as P

        from jaxpar import named_sharding

        mesh = jax.make_mesh((8,), ("data",))
        sharding = named_sharding(mesh, P("data", None), (16, 3))
        x = jax.device_put(np.zeros((16, 3)), sharding)
        print(x.sharding.spec, x.addressable_shards[0].data.shape)
        #> P('data', None) (2, 3)
        try:
            named_sharding(mesh, P("batch"))
        except ValueError as error:
            print(error)
            '''
            P('batch',) names mesh axis 'batch', but the mesh's axes are ('data',). Use one of those names, or build the mesh with an axis called 'batch'.
            '''
        ```
    """
    _check_mesh(mesh, "named_sharding", devices=False)
    if shape is None:
        _check_no_repeats(spec, _check_entries(mesh, spec))
    else:
        check_spec(mesh, spec, shape)
    return NamedSharding(mesh, spec)


def _count(n: int, singular: str, plural: str | None = None) -> str:
    """``"1 entry"``, ``"2 entries"``."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def _check_mesh(mesh: object, function: str, *, devices: bool = True) -> None:
    """Raise a TypeError unless ``mesh`` is a ``jax.sharding.Mesh``, or, where ``function``
    needs no devices (``devices=False``), an ``AbstractMesh``."""
    if isinstance(mesh, Mesh) or (not devices and isinstance(mesh, AbstractMesh)):
        return
    if isinstance(mesh, AbstractMesh):
        fix = (
            f"an AbstractMesh has axis names and sizes but no devices, and {function} puts "
            f"arrays on devices. Pass the Mesh itself: the one jax.make_mesh returned, or "
            f"inside `with jax.set_mesh(mesh):`, jax.sharding.get_mesh()"
        )
    elif isinstance(mesh, NamedSharding):
        fix = "pass the sharding's mesh instead, sharding.mesh"
    else:
        fix = (
            "build one with jax.make_mesh(shape, names), for example jax.make_mesh((8,), ('data',))"
        )
    raise TypeError(f"{function} needs a jax.sharding.Mesh as mesh, got {shown(mesh)}; {fix}.")


def _check_shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, tuple | list):
        raise ValueError(
            f"shape must be a tuple of mesh axis sizes such as (8,) or (2, 4), got {shape!r}."
        )
    for position, size in enumerate(shape):
        if not is_whole(size) or size < 1:
            raise ValueError(
                f"every mesh axis size must be a positive integer, but shape {tuple(shape)} "
                f"has {size!r} at position {position}."
            )
    return tuple(int(size) for size in shape)


def _check_names(names: object, shape: tuple[int, ...]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise ValueError(
            f"names must be a tuple of axis names such as ({names!r},), got the string "
            f"{names!r}. Mind the comma: ({names!r}) is just a string in parentheses."
        )
    if not isinstance(names, tuple | list):
        raise ValueError(f"names must be a tuple of axis names such as ('x', 'y'), got {names!r}.")
    names = tuple(names)
    ndim = len(shape)
    if len(names) != ndim:
        raise ValueError(
            f"shape {shape} has {_count(ndim, 'size')} but names {names} has "
            f"{_count(len(names), 'name')}; give one name per mesh axis, such as ('x', 'y') "
            f"for a shape (2, 4)."
        )
    for position, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"every mesh axis name must be a non-empty string, but names {names} has "
                f"{name!r} at position {position}."
            )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"mesh axis names must be unique, but names {names} repeats {repeated[0]!r}; "
            f"give each axis its own name, such as ('x', 'y')."
        )
    return names


def _check_axis_types(
    axis_types: AxisType | tuple[AxisType, ...] | None, names: tuple[str, ...]
) -> tuple[AxisType, ...]:
    if axis_types is None:
        return (AxisType.Explicit,) * len(names)
    if isinstance(axis_types, AxisType):
        return (axis_types,) * len(names)
    types = tuple(axis_types) if isinstance(axis_types, tuple | list) else ()
    if len(types) != len(names) or not all(isinstance(t, AxisType) for t in types):
        # axis_types="auto": suggest the AxisType of that name.
        meant = next((t for t in AxisType if t.name.lower() == str(axis_types).lower()), None)
        raise ValueError(
            f"axis_types must give one jax.sharding.AxisType per mesh axis {names}, got "
            f"{axis_types!r}. Pass for example "
            f"axis_types=AxisType.{(meant or AxisType.Explicit).name} for every axis, or "
            f"(AxisType.Explicit,) * {len(names)}, after `from jax.sharding import AxisType`."
        )
    return types


def _check_devices(devices: object, shape: tuple[int, ...], product: int) -> list[jax.Device]:
    """``devices`` as a list of distinct devices, or an error that names the fix."""
    every = product >= jax.device_count()
    example = "devices=jax.devices()" if every else f"devices=jax.devices()[:{product}]"
    if callable(devices):
        name = getattr(devices, "__name__", repr(devices))
        raise TypeError(
            f"devices must be a sequence of devices, got the function {name} itself; call "
            f"it, as in {example}."
        )
    try:
        listed = list(devices)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(
            f"devices must be a sequence of devices such as {example}, got {shown(devices)}."
        ) from None
    for position, device in enumerate(listed):
        if not isinstance(device, jax.Device):
            raise TypeError(
                f"devices must be a sequence of jax.Device, but it holds {shown(device)} at "
                f"position {position}; pass devices such as {example}."
            )
    if not listed:
        raise ValueError(
            f"a mesh of shape {shape} needs {product} devices, but devices={devices!r} holds "
            f"none. Pass {product} devices, for example {example}, or leave devices out to "
            f"use all of jax.devices()."
        )
    for position, device in enumerate(listed):
        if device in listed[:position]:
            raise ValueError(
                f"devices holds {device!r} twice, at positions {listed.index(device)} and "
                f"{position}; a mesh holds each device once. Pass {product} distinct "
                f"devices, for example {example}."
            )
    return listed


def _fitting_shapes(count: int) -> list[tuple[int, ...]]:
    """A few 1-D and 2-D mesh shapes with ``count`` devices."""
    shapes: list[tuple[int, ...]] = [(count,)]
    shapes += [(a, count // a) for a in range(2, count) if count % a == 0][:3]
    return shapes


def _or_list(items: Sequence[object]) -> str:
    """``"a"``, ``"a or b"``, ``"a, b or c"``."""
    texts = [str(item) for item in items]
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} or {texts[-1]}"


def _count_message(shape: tuple[int, ...], product: int, count: int, *, given: bool) -> str:
    needs = " x ".join(map(str, shape)) + f" = {product}" if len(shape) > 1 else str(product)
    have = f"devices= holds {count}" if given else f"{count} are available"
    message = (
        f"a mesh of shape {shape} needs {needs} devices, but {have}. Use a shape whose sizes "
        f"multiply to {count}, such as {_or_list(_fitting_shapes(count))}"
    )
    if given:
        return message + f", or pass {product} devices."
    if product < count:
        return message + f"; or pass devices=jax.devices()[:{product}] to use only {product}."
    return message + (
        f"; or simulate {product} CPU devices with jaxpar.simulate_cpu_devices({product}) "
        f"right after `import jax`, before JAX creates its devices."
    )


def _check_entries(mesh: jax.sharding.Mesh, spec: P) -> list[tuple[str, ...]]:
    """The mesh axes each entry of ``spec`` splits its dimension over (``()``: none)."""
    if not isinstance(spec, P):
        raise TypeError(
            f"spec must be a jax.sharding.PartitionSpec, got {type(spec).__name__} {spec!r}; "
            f"wrap the entries in P(...), for example P('x', None)."
        )
    entries = []
    for position, entry in enumerate(spec):
        if entry is None or entry is P.UNCONSTRAINED:
            axes: tuple[object, ...] = ()
        elif isinstance(entry, str):
            axes = (entry,)
        elif isinstance(entry, tuple) and entry and all(isinstance(a, str) for a in entry):
            axes = entry
        else:
            raise ValueError(
                f"entry {position} of {spec!r} is {entry!r}; each entry must be None, a mesh "
                f"axis name such as 'x', or a tuple of names such as ('x', 'y')."
            )
        for name in axes:
            if name not in mesh.shape:
                raise ValueError(
                    f"{spec!r} names mesh axis {name!r}, but the mesh's axes are "
                    f"{tuple(mesh.axis_names)}. Use one of those names, or build the mesh "
                    f"with an axis called {name!r}."
                )
        entries.append(axes)
    return entries


def _check_no_repeats(spec: P, entries: list[tuple[str, ...]]) -> None:
    seen: dict[str, int] = {}
    for dim, axes in enumerate(entries):
        for name in axes:
            if name in seen:
                where = (
                    f"dimension {dim}"
                    if seen[name] == dim
                    else f"dimensions {seen[name]} and {dim}"
                )
                raise ValueError(
                    f"{spec!r} uses mesh axis {name!r} twice (in {where}); a mesh axis can "
                    f"split only one dimension, once. Use another mesh axis for one of them, "
                    f"or None to leave a dimension unsharded."
                )
            seen[name] = dim


def _check_array_shape(shape: object) -> tuple[int, ...]:
    if not isinstance(shape, tuple | list) or not all(
        is_whole(size) and size >= 0 for size in shape
    ):
        raise ValueError(
            f"shape must be the array's shape, a tuple of sizes such as (8, 4), got {shape!r}."
        )
    return tuple(int(size) for size in shape)


def _divisible_message(
    mesh: jax.sharding.Mesh,
    dim: int,
    shape: tuple[int, ...],
    axes: tuple[str, ...],
    parts: int,
    used: set[str],
) -> str:
    size = shape[dim]
    if len(axes) == 1:
        over = f"mesh axis {axes[0]!r} of size {parts}"
    else:
        sizes = " x ".join(str(mesh.shape[name]) for name in axes)
        over = f"mesh axes {axes} of total size {sizes} = {parts}"
    # Axes not used by the other dimensions, alone, whose size divides this one.
    free = [name for name in mesh.axis_names if name in axes or name not in used]
    fits = [
        name
        for name in free
        if mesh.shape[name] > 1 and size % mesh.shape[name] == 0 and (name,) != axes
    ]
    if fits:
        choices = _or_list([f"mesh axis {name!r} (size {mesh.shape[name]})" for name in fits])
        other = f"shard it over {choices} instead"
    else:
        other = f"shard it over another mesh axis whose size divides {size}"
    padded = -(-size // parts) * parts
    return (
        f"dimension {dim} of shape {shape} has size {size}, which does not split evenly over "
        f"{over}. Pad dimension {dim} to {padded} (a multiple of {parts}), {other}, or leave "
        f"it unsharded with None in position {dim} of the PartitionSpec."
    )
