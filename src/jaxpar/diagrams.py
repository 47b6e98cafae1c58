"""Sharding diagrams as inline SVG, for static pages and notebooks.

Unlike ``jax.debug.visualize_array_sharding``, these need no ``rich``, draw arrays with any
number of dimensions, and give the same markup for the same input, so that a page built
twice does not change.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

import jax
from jax.sharding import NamedSharding, Sharding

from jaxpar.meshes import check_spec

MAX_SIZE = 480
"""The most pixels a drawing is wide, or high, before its caption."""

PALETTE: tuple[tuple[str, str], ...] = (
    ("#CC6677", "#000000"),
    ("#332288", "#FFFFFF"),
    ("#DDCC77", "#000000"),
    ("#117733", "#FFFFFF"),
    ("#88CCEE", "#000000"),
    ("#882255", "#FFFFFF"),
    ("#44AA99", "#000000"),
    ("#999933", "#000000"),
    ("#AA4499", "#FFFFFF"),
)
"""``(fill, text)`` colours by device id (modulo 9): Paul Tol's colour-blind safe "muted"
palette, each with the text colour of higher contrast (at least 4.5:1)."""


@dataclass(frozen=True)
class Block:
    """One block of the 2-D layout and the devices that hold it."""

    rows: tuple[int, int]
    """The half-open range ``(start, stop)`` of rows the block covers."""
    cols: tuple[int, int]
    """The half-open range ``(start, stop)`` of columns the block covers."""
    devices: tuple[int, ...]
    """The sorted ids of the devices holding this block: several when it is replicated."""


@dataclass(frozen=True)
class Layout:
    """How an array's elements are laid out over devices, drawn in two dimensions."""

    shape2d: tuple[int, int]
    """``(rows, columns)`` of the drawing; a 1-D array is one row, a scalar one cell."""
    blocks: tuple[Block, ...]
    """The blocks, sorted by rows then columns; together they tile ``shape2d`` exactly."""
    folded: tuple[int, ...]
    """The array dimensions left out of the drawing (none of them is sharded)."""
    shape: tuple[int, ...]
    """The shape of the array."""
    row_dim: int | None
    """The array dimension drawn as rows; ``None`` for 0-D and 1-D arrays."""
    col_dim: int | None
    """The array dimension drawn as columns; ``None`` for a scalar."""


def layout(x_or_sharding: jax.Array | Sharding, shape: Sequence[int] | None = None) -> Layout:
    """The 2-D layout of an array's shards: which device holds which block.

    Computed from ``sharding.devices_indices_map(shape)``, the map from each device to
    the slice of the array it holds. A 1-D array is drawn as one row. An array with more
    than two dimensions keeps its sharded dimensions (at most two) as rows and columns,
    filled up with its last other dimensions, and folds away the rest: those are not
    sharded, so every block spans all of them.

    Args:
        x_or_sharding: a ``jax.Array``, or a ``jax.sharding.Sharding`` together with ``shape``.
        shape: the array's shape; needed with a sharding, optional with an array.

    Returns:
        The :class:`Layout`.

    Raises:
        TypeError: ``x_or_sharding`` is neither a ``jax.Array`` nor a ``Sharding``.
        ValueError: ``shape`` is missing for a sharding or disagrees with the array, the
            sharding does not fit the shape (see :func:`jaxpar.check_spec`), more than two
            dimensions are sharded, or the shards do not tile the array.

    Examples:
        ```python
        import jax
        import numpy as np
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from jaxpar import layout

        mesh = jax.make_mesh((2, 4), ("x", "y"))
        x = jax.device_put(np.zeros((8, 4)), NamedSharding(mesh, P("x")))
        for block in layout(x).blocks:
            print(block)
            #> Block(rows=(0, 4), cols=(0, 4), devices=(0, 1, 2, 3))
            #> Block(rows=(4, 8), cols=(0, 4), devices=(4, 5, 6, 7))
        found = layout(NamedSharding(mesh, P(None, "x", "y")), (2, 8, 4))
        print(found.shape2d, found.folded, len(found.blocks))
        #> (8, 4) (0,) 8
        ```
    """
    sharding, shape, _ = _resolve(x_or_sharding, shape, "layout")
    if isinstance(sharding, NamedSharding):
        check_spec(sharding.mesh, sharding.spec, shape)  # clearer errors than JAX's
    ranges = {
        device.id: tuple(index.indices(size)[:2] for index, size in zip(slices, shape, strict=True))
        for device, slices in sharding.devices_indices_map(shape).items()
    }
    ndim = len(shape)
    sharded = [d for d in range(ndim) if any(r[d] != (0, shape[d]) for r in ranges.values())]
    if len(sharded) > 2:
        raise ValueError(
            f"a 2-D drawing shows at most two sharded dimensions, but dimensions "
            f"{_and_list(sharded)} of shape {shape} are all sharded. Reshape the array so that "
            f"at most two dimensions are sharded (merge neighbouring ones), or print "
            f"sharding.devices_indices_map(shape) instead."
        )
    if ndim <= 2:
        kept = list(range(ndim))
    else:  # the sharded dimensions, filled up to two with the last unsharded ones
        others = [d for d in range(ndim) if d not in sharded]
        kept = sorted(sharded + others[len(others) - (2 - len(sharded)) :])
    row_dim, col_dim = ([None] * (2 - len(kept)) + kept)[-2:]
    folded = tuple(d for d in range(ndim) if d not in kept)

    def extent(r: tuple[tuple[int, int], ...], dim: int | None) -> tuple[int, int]:
        return (0, 1) if dim is None else r[dim]

    holders: dict[tuple[tuple[int, int], tuple[int, int]], list[int]] = {}
    for device_id, r in ranges.items():
        holders.setdefault((extent(r, row_dim), extent(r, col_dim)), []).append(device_id)
    blocks = tuple(
        Block(rows, cols, tuple(sorted(ids))) for (rows, cols), ids in sorted(holders.items())
    )
    shape2d = (
        1 if row_dim is None else shape[row_dim],
        1 if col_dim is None else shape[col_dim],
    )
    _check_tiling(shape2d, blocks)
    return Layout(shape2d, blocks, folded, shape, row_dim, col_dim)


def sharding_svg(
    x_or_sharding: jax.Array | Sharding, shape: Sequence[int] | None = None, *, cell: int = 56
) -> str:
    """An inline ``<svg>`` drawing of which device holds which block of an array.

    Each block is a rectangle, its size proportional to its extent, coloured by the first
    device that holds it and labelled with the ids of all the devices that hold it
    (``"0,1,2,3"`` when replicated). The markup has no scripts and no external resources,
    carries ``role="img"``, an ``aria-label`` and a ``<title>`` that describe the layout,
    and is the same, byte for byte, for the same input.

    Args:
        x_or_sharding: a ``jax.Array``, or a ``jax.sharding.Sharding`` together with ``shape``.
        shape: the array's shape; needed with a sharding, optional with an array.
        cell: pixels per array element; the drawing is scaled down to at most
            480 pixels wide and high, and up to at least ``cell`` (or 480) in each direction.

    Returns:
        The SVG markup, one line per element.

    Raises:
        TypeError: ``x_or_sharding`` is neither a ``jax.Array`` nor a ``Sharding``.
        ValueError: as for :func:`layout`, or ``cell`` is not a positive integer.

    Examples:
        ```python
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from jaxpar import sharding_svg

        mesh = jax.make_mesh((8,), ("data",))
        svg = sharding_svg(NamedSharding(mesh, P("data")), (16,))
        print(svg.splitlines()[1])
        #> <title>array[16] sharded over 8 devices: 1 row block x 8 column blocks</title>
        print(svg.count("<rect"))
        #> 8
        ```
    """
    _check_cell(cell)
    _, _, dtype = _resolve(x_or_sharding, shape, "sharding_svg")
    return _svg(layout(x_or_sharding, shape), dtype, cell)


@dataclass(frozen=True)
class ShardingDiagram:
    """A sharding diagram that shows itself in notebooks and prints as SVG markup."""

    layout: Layout
    """The layout drawn."""
    svg: str
    """The ``<svg>`` markup, from :func:`sharding_svg`."""
    description: str
    """The one-line description, also the drawing's title and ``aria-label``."""

    def _repr_svg_(self) -> str:
        return self.svg

    def _repr_html_(self) -> str:
        return self.svg

    def __str__(self) -> str:
        return self.svg

    def __repr__(self) -> str:
        return f"ShardingDiagram({self.description!r})"


def sharding_diagram(
    x_or_sharding: jax.Array | Sharding, shape: Sequence[int] | None = None, *, cell: int = 56
) -> ShardingDiagram:
    """A :class:`ShardingDiagram` of an array, or of a sharding for arrays of ``shape``.

    In a notebook, a diagram as the last expression of a cell shows as a picture;
    ``print(diagram)`` writes its SVG markup, ready to paste into a page.

    Args:
        x_or_sharding: a ``jax.Array``, or a ``jax.sharding.Sharding`` together with ``shape``.
        shape: the array's shape; needed with a sharding, optional with an array.
        cell: pixels per array element, as for :func:`sharding_svg`.

    Returns:
        The diagram: its ``layout``, ``svg`` and ``description``.

    Raises:
        TypeError: ``x_or_sharding`` is neither a ``jax.Array`` nor a ``Sharding``.
        ValueError: as for :func:`sharding_svg`.

    Examples:
        ```python
        import jax
        import jax.numpy as jnp
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from jaxpar import sharding_diagram

        mesh = jax.make_mesh((2, 4), ("x", "y"))
        x = jax.device_put(jnp.zeros((2, 8, 4)), NamedSharding(mesh, P(None, "x", "y")))
        diagram = sharding_diagram(x)
        print(diagram.description)
        '''
        float32[2,8,4] sharded over 8 devices: 2 row blocks x 4 column blocks; rows are dimension 1, columns dimension 2, dimension 0 (size 2) folded
        '''
        print(str(diagram).startswith("<svg"), diagram.svg.count("<rect"))
        #> True 8
        ```
    """
    _check_cell(cell)
    _, _, dtype = _resolve(x_or_sharding, shape, "sharding_diagram")
    found = layout(x_or_sharding, shape)
    return ShardingDiagram(found, _svg(found, dtype, cell), _describe(found, dtype))


def _check_cell(cell: object) -> None:
    if not isinstance(cell, int) or isinstance(cell, bool) or cell < 1:
        raise ValueError(
            f"cell must be a positive integer number of pixels per element, got {cell!r}; "
            f"the default is cell=56."
        )


def _resolve(
    x_or_sharding: object, shape: Sequence[int] | None, caller: str
) -> tuple[Sharding, tuple[int, ...], str]:
    """The sharding, the shape, and the dtype name (``"array"`` for a bare sharding)."""
    if isinstance(x_or_sharding, jax.Array):
        if shape is not None and tuple(shape) != x_or_sharding.shape:
            raise ValueError(
                f"{caller} got an array of shape {x_or_sharding.shape} and shape={tuple(shape)}; "
                f"leave shape out for an array, it has one."
            )
        return x_or_sharding.sharding, x_or_sharding.shape, str(x_or_sharding.dtype)
    if isinstance(x_or_sharding, Sharding):
        if shape is None:
            raise ValueError(
                f"{caller} needs the array's shape to lay out a sharding: pass it, as in "
                f"{caller}(sharding, (8, 4)), or pass the array itself."
            )
        if not isinstance(shape, tuple | list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape
        ):
            raise ValueError(f"shape must be a tuple of sizes such as (8, 4), got {shape!r}.")
        return x_or_sharding, tuple(shape), "array"
    raise TypeError(
        f"{caller} draws a jax.Array or a jax.sharding.Sharding (with a shape), got "
        f"{type(x_or_sharding).__name__}; put the data on devices first, for example "
        f"jax.device_put(x, NamedSharding(mesh, P('x')))."
    )


def _and_list(items: Sequence[object]) -> str:
    """``"0"``, ``"0 and 1"``, ``"0, 1 and 2"``."""
    texts = [str(item) for item in items]
    return texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} and {texts[-1]}"


def _check_tiling(shape2d: tuple[int, int], blocks: tuple[Block, ...]) -> None:
    """Raise unless ``blocks`` cover every cell of ``shape2d`` exactly once."""
    row_cuts = sorted({0, shape2d[0], *(r for b in blocks for r in b.rows)})
    col_cuts = sorted({0, shape2d[1], *(c for b in blocks for c in b.cols)})
    covered: set[tuple[int, int]] = set()
    for block in blocks:
        (top, bottom), (left, right) = block.rows, block.cols
        if not (0 <= top <= bottom <= shape2d[0] and 0 <= left <= right <= shape2d[1]):
            covered = set()
            break
        row_span = range(bisect.bisect_left(row_cuts, top), bisect.bisect_left(row_cuts, bottom))
        col_span = range(bisect.bisect_left(col_cuts, left), bisect.bisect_left(col_cuts, right))
        cells = {(r, c) for r in row_span for c in col_span}
        if cells & covered:
            covered = set()
            break
        covered |= cells
    if len(covered) != (len(row_cuts) - 1) * (len(col_cuts) - 1):
        raise ValueError(
            f"the shards do not tile the {shape2d[0]} x {shape2d[1]} layout exactly (blocks "
            f"{[(b.rows, b.cols) for b in blocks]}); this sharding cannot be drawn as blocks."
        )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _describe(found: Layout, dtype: str) -> str:
    """``"float32[8,4] sharded over 8 devices: 2 row blocks x 4 column blocks"``."""
    name = f"{dtype}[{','.join(map(str, found.shape))}]"
    devices = sorted({i for block in found.blocks for i in block.devices})
    rows = len({block.rows for block in found.blocks})
    cols = len({block.cols for block in found.blocks})
    copies = {len(block.devices) for block in found.blocks}
    if len(devices) == 1:
        text = f"{name} on 1 device (device {devices[0]})"
    elif len(found.blocks) == 1:
        text = f"{name} replicated on {len(devices)} devices: 1 block, a full copy on each"
    else:
        text = (
            f"{name} sharded over {len(devices)} devices: {_plural(rows, 'row block')} x "
            f"{_plural(cols, 'column block')}"
        )
        if copies != {1}:
            text += f", each on {copies.pop()} devices" if len(copies) == 1 else ", some copied"
    if found.folded:
        text += "; " + _fold_note(found)
    return text


def _fold_note(found: Layout) -> str:
    """``"rows are dimension 1, columns dimension 2, dimension 0 (size 2) folded"``."""
    folded = _and_list([f"{d} (size {found.shape[d]})" for d in found.folded])
    word = "dimension" if len(found.folded) == 1 else "dimensions"
    return (
        f"rows are dimension {found.row_dim}, columns dimension {found.col_dim}, "
        f"{word} {folded} folded"
    )


def _caption(found: Layout) -> str:
    """``"dimension 0 (size 2) folded; rows: dim 1, columns: dim 2"``."""
    folded = _and_list([f"{d} (size {found.shape[d]})" for d in found.folded])
    word = "dimension" if len(found.folded) == 1 else "dimensions"
    return f"{word} {folded} folded; rows: dim {found.row_dim}, columns: dim {found.col_dim}"


def _px(value: float) -> str:
    """A coordinate with at most two decimals and no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _svg(found: Layout, dtype: str, cell: int) -> str:
    rows, cols = found.shape2d
    scale = min(cell, MAX_SIZE / max(cols, 1), MAX_SIZE / max(rows, 1))
    least = min(cell, MAX_SIZE)
    width = max(cols * scale, least)
    height = max(rows * scale, least)
    sx, sy = width / max(cols, 1), height / max(rows, 1)
    description = _describe(found, dtype)
    caption = _caption(found) if found.folded else ""
    caption_size = 12
    total_width = math.ceil(max(width, 0.6 * caption_size * len(caption)))
    total_height = math.ceil(height + (caption_size + 10 if caption else 0))
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" '
        f'height="{total_height}" viewBox="0 0 {total_width} {total_height}" role="img" '
        f'aria-label={quoteattr(description)} font-family="sans-serif" '
        f'style="max-width:100%;height:auto">',
        f"<title>{escape(description)}</title>",
    ]
    for block in found.blocks:
        fill, ink = PALETTE[block.devices[0] % len(PALETTE)]
        x0, x1 = _px(block.cols[0] * sx), _px(block.cols[1] * sx)
        y0, y1 = _px(block.rows[0] * sy), _px(block.rows[1] * sy)
        w, h = float(x1) - float(x0), float(y1) - float(y0)
        label = ",".join(map(str, block.devices))
        size = max(5.0, min(16.0, 0.5 * h, (w - 4) / (0.62 * len(label) + 0.1)))
        lines.append(
            f'<rect x="{x0}" y="{y0}" width="{_px(w)}" height="{_px(h)}" fill="{fill}" '
            f'stroke="#FFFFFF" stroke-width="2"/>'
        )
        lines.append(
            f'<text x="{_px(float(x0) + w / 2)}" y="{_px(float(y0) + h / 2)}" '
            f'font-size="{_px(size)}" fill="{ink}" text-anchor="middle" '
            f'dominant-baseline="central">{label}</text>'
        )
    if caption:
        lines.append(
            f'<text x="0" y="{_px(height + caption_size + 4)}" font-size="{caption_size}" '
            f'fill="#444444">{escape(caption)}</text>'
        )
    lines.append("</svg>")
    return "\n".join(lines)
