"""Tests of jaxpar.diagrams: layouts checked against devices_indices_map, and the SVG."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from jaxpar import Block, Layout, ShardingDiagram, layout, sharding_diagram, sharding_svg
from jaxpar.diagrams import _check_tiling

SVG = "{http://www.w3.org/2000/svg}"

MESHES = {
    "2x4": ((2, 4), ("x", "y")),
    "4x2": ((4, 2), ("x", "y")),
    "8": ((8,), ("x",)),
}

# (spec, shape, row_dim, col_dim, folded)
CASES = [
    (P(), (8, 4), 0, 1, ()),
    (P("x"), (8, 4), 0, 1, ()),
    (P(None, "y"), (8, 4), 0, 1, ()),
    (P(None, "x"), (8, 16), 0, 1, ()),
    (P("x", "y"), (8, 4), 0, 1, ()),
    (P("y", "x"), (8, 4), 0, 1, ()),
    (P(("x", "y")), (8, 4), 0, 1, ()),
    (P(("x", "y"), None), (8, 4), 0, 1, ()),
    (P("x"), (16,), None, 0, ()),
    (P(), (16,), None, 0, ()),
    (P(), (2, 8, 4), 1, 2, (0,)),
    (P(None, "x", "y"), (2, 8, 4), 1, 2, (0,)),
    (P(None, "x"), (2, 8, 4), 1, 2, (0,)),
    (P("x"), (2, 8, 4), 0, 2, (1,)),
    (P("x"), (8, 8, 4), 0, 2, (1,)),
    (P(None, None, None, "y"), (8, 2, 3, 4), 2, 3, (0, 1)),
    (P(None, "y"), (8, 4, 3, 5), 1, 3, (0, 2)),
]


def mesh_cases():
    for mesh_id, (shape, names) in MESHES.items():
        for spec, array_shape, row_dim, col_dim, folded in CASES:
            axes = {
                a
                for entry in spec
                if entry
                for a in ((entry,) if isinstance(entry, str) else entry)
            }
            if not axes <= set(names):
                continue
            sizes = dict(zip(names, shape, strict=True))
            parts = [
                int(np.prod([sizes[a] for a in ((e,) if isinstance(e, str) else e)])) if e else 1
                for e in spec
            ]
            if any(size % part for size, part in zip(array_shape, parts, strict=False)):
                continue  # P("x") on (2, 8, 4) splits 2 rows 4 or 8 ways: an error, tested below
            yield pytest.param(
                mesh_id,
                spec,
                array_shape,
                row_dim,
                col_dim,
                folded,
                id=f"{mesh_id}-{spec}-{array_shape}",
            )


MESH_CASES = list(mesh_cases())


def expected_ranges(sharding, shape, row_dim, col_dim):
    """Device id -> (rows, cols), straight from devices_indices_map."""
    found = {}
    for device, index in sharding.devices_indices_map(shape).items():
        ranges = [s.indices(n)[:2] for s, n in zip(index, shape, strict=True)]
        rows = (0, 1) if row_dim is None else ranges[row_dim]
        cols = (0, 1) if col_dim is None else ranges[col_dim]
        found[device.id] = (rows, cols)
    return found


def assert_tiles(found: Layout) -> None:
    grid = np.zeros(found.shape2d, dtype=int)
    for block in found.blocks:
        grid[slice(*block.rows), slice(*block.cols)] += 1
    assert (grid == 1).all(), grid


def make(mesh_id):
    shape, names = MESHES[mesh_id]
    return jax.make_mesh(shape, names)


def test_the_cases_cover_every_mesh():
    counts = {m: sum(1 for case in MESH_CASES if case.values[0] == m) for m in MESHES}
    assert counts == {"2x4": 17, "4x2": 16, "8": 8}


class TestLayout:
    @pytest.mark.parametrize(
        ("mesh_id", "spec", "shape", "row_dim", "col_dim", "folded"), MESH_CASES
    )
    def test_matches_devices_indices_map(self, mesh_id, spec, shape, row_dim, col_dim, folded):
        sharding = NamedSharding(make(mesh_id), spec)
        found = layout(sharding, shape)
        assert found.shape == shape
        assert (found.row_dim, found.col_dim, found.folded) == (row_dim, col_dim, folded)
        rows = 1 if row_dim is None else shape[row_dim]
        assert found.shape2d == (rows, shape[col_dim])
        expected = expected_ranges(sharding, shape, row_dim, col_dim)
        held = [i for block in found.blocks for i in block.devices]
        assert sorted(held) == sorted(expected) == list(range(8))
        for block in found.blocks:
            assert list(block.devices) == sorted(block.devices)
            for device_id in block.devices:
                assert expected[device_id] == (block.rows, block.cols)
        assert len(found.blocks) == len(set(expected.values()))
        assert list(found.blocks) == sorted(found.blocks, key=lambda b: (b.rows, b.cols))
        assert_tiles(found)

    @pytest.mark.parametrize(
        ("mesh_id", "spec", "shape"),
        [("2x4", P("x", "y"), (8, 4)), ("4x2", P(None, "x", "y"), (2, 8, 4)), ("8", P("x"), (16,))],
    )
    def test_an_array_gives_the_layout_of_its_sharding(self, mesh_id, spec, shape):
        sharding = NamedSharding(make(mesh_id), spec)
        x = jax.device_put(np.zeros(shape, np.float32), sharding)
        assert layout(x) == layout(sharding, shape) == layout(x, shape)

    def test_two_by_four_blocks(self):
        found = layout(NamedSharding(make("2x4"), P("x", "y")), (8, 4))
        assert found.blocks[:2] == (Block((0, 4), (0, 1), (0,)), Block((0, 4), (1, 2), (1,)))
        assert found.blocks[-1] == Block((4, 8), (3, 4), (7,))

    def test_replicated_blocks_list_every_device(self):
        found = layout(NamedSharding(make("4x2"), P(None, "y")), (8, 4))
        assert found.blocks == (
            Block((0, 8), (0, 2), (0, 2, 4, 6)),
            Block((0, 8), (2, 4), (1, 3, 5, 7)),
        )

    def test_a_scalar_is_one_cell(self):
        x = jax.device_put(np.float32(1), NamedSharding(make("8"), P()))
        found = layout(x)
        assert found == Layout(
            (1, 1), (Block((0, 1), (0, 1), tuple(range(8))),), (), (), None, None
        )

    def test_a_single_device(self):
        found = layout(SingleDeviceSharding(jax.devices()[3]), (4, 5))
        assert found.blocks == (Block((0, 4), (0, 5), (3,)),)

    def test_sharding_without_shape(self):
        with pytest.raises(ValueError) as caught:
            layout(NamedSharding(make("8"), P("x")))
        assert "needs the array's shape" in str(caught.value)
        assert "layout(sharding, (8, 4))" in str(caught.value)

    def test_array_with_another_shape(self):
        x = jax.device_put(np.zeros((8, 4)), NamedSharding(make("8"), P("x")))
        with pytest.raises(ValueError, match=r"array of shape \(8, 4\) and shape=\(4, 8\)"):
            layout(x, (4, 8))

    def test_not_an_array(self):
        with pytest.raises(TypeError) as caught:
            layout(np.zeros((8, 4)))
        assert "got ndarray" in str(caught.value)
        assert "jax.device_put" in str(caught.value)

    def test_bad_shape(self):
        with pytest.raises(ValueError, match="tuple of sizes such as"):
            layout(NamedSharding(make("8"), P("x")), 8)

    @pytest.mark.parametrize(("mesh_id", "parts"), [("4x2", 4), ("8", 8)])
    def test_indivisible_sharding_explains(self, mesh_id, parts):
        with pytest.raises(ValueError) as caught:
            layout(NamedSharding(make(mesh_id), P("x")), (2, 8, 4))
        assert "dimension 0 of shape (2, 8, 4) has size 2" in str(caught.value)
        assert f"mesh axis 'x' of size {parts}" in str(caught.value)

    def test_three_sharded_dimensions(self):
        mesh = jax.make_mesh((2, 2, 2), ("a", "b", "c"))
        with pytest.raises(ValueError) as caught:
            layout(NamedSharding(mesh, P("a", "b", "c")), (2, 4, 6))
        message = str(caught.value)
        assert "at most two sharded dimensions" in message
        assert "dimensions 0, 1 and 2 of shape (2, 4, 6) are all sharded" in message
        assert "Reshape the array" in message

    @pytest.mark.parametrize(
        "blocks",
        [
            (Block((0, 2), (0, 2), (0,)), Block((1, 2), (1, 2), (1,))),  # overlap, gap
            (Block((0, 1), (0, 2), (0,)),),  # a gap
            (Block((0, 2), (0, 3), (0,)),),  # outside
        ],
    )
    def test_blocks_that_do_not_tile(self, blocks):
        with pytest.raises(ValueError, match="do not tile the 2 x 2 layout exactly"):
            _check_tiling((2, 2), blocks)


def svg_of(mesh_id, spec, shape):
    return sharding_svg(NamedSharding(make(mesh_id), spec), shape)


class TestSvg:
    @pytest.mark.parametrize(("mesh_id", "spec", "shape", "_r", "_c", "_f"), MESH_CASES)
    def test_well_formed_one_rect_per_block_labelled(self, mesh_id, spec, shape, _r, _c, _f):
        sharding = NamedSharding(make(mesh_id), spec)
        svg = sharding_svg(sharding, shape)
        assert svg == sharding_svg(sharding, shape)
        root = ET.fromstring(svg)
        found = layout(sharding, shape)
        rects = root.findall(f"{SVG}rect")
        assert len(rects) == len(found.blocks)
        labels = [t.text for t in root.findall(f"{SVG}text")]
        for block in found.blocks:
            assert ",".join(map(str, block.devices)) in labels
        assert root.get("role") == "img"
        assert root.get("aria-label") == root.find(f"{SVG}title").text
        assert "<script" not in svg and "href" not in svg and "url(" not in svg
        # Sizes proportional to the extents, within 480 px.
        width = sum(float(r.get("width")) for r in rects if r.get("y") == "0")
        height = sum(float(r.get("height")) for r in rects if r.get("x") == "0")
        assert width <= 480 and height <= 480
        for rect, block in zip(rects, found.blocks, strict=True):
            assert float(rect.get("width")) == pytest.approx(
                width * (block.cols[1] - block.cols[0]) / found.shape2d[1], abs=0.02
            )
            assert float(rect.get("height")) == pytest.approx(
                height * (block.rows[1] - block.rows[0]) / found.shape2d[0], abs=0.02
            )

    def test_two_by_four_of_float32(self):
        x = jax.device_put(jnp.zeros((8, 4)), NamedSharding(make("4x2"), P("x", "y")))
        svg = sharding_svg(x)
        root = ET.fromstring(svg)
        label = "float32[8,4] sharded over 8 devices: 4 row blocks x 2 column blocks"
        assert root.get("aria-label") == label
        assert root.find(f"{SVG}title").text == label
        assert [t.text for t in root.findall(f"{SVG}text")] == [str(i) for i in range(8)]
        assert (root.get("width"), root.get("height")) == ("224", "448")
        fills = [r.get("fill") for r in root.findall(f"{SVG}rect")]
        assert len(set(fills)) == 8

    def test_replicated_block_uses_its_first_device_colour(self):
        svg = svg_of("2x4", P("x"), (8, 4))
        root = ET.fromstring(svg)
        rects = root.findall(f"{SVG}rect")
        single = ET.fromstring(svg_of("8", P("x"), (8, 4))).findall(f"{SVG}rect")
        assert rects[0].get("fill") == single[0].get("fill")  # device 0
        assert rects[1].get("fill") == single[4].get("fill")  # device 4
        assert [t.text for t in root.findall(f"{SVG}text")] == ["0,1,2,3", "4,5,6,7"]
        assert "each on 4 devices" in root.get("aria-label")

    def test_fully_replicated(self):
        root = ET.fromstring(svg_of("2x4", P(), (8, 4)))
        assert (
            root.get("aria-label")
            == "array[8,4] replicated on 8 devices: 1 block, a full copy on each"
        )
        assert [t.text for t in root.findall(f"{SVG}text")] == ["0,1,2,3,4,5,6,7"]

    def test_folded_dimensions_have_a_caption(self):
        root = ET.fromstring(svg_of("2x4", P(None, "x", "y"), (2, 8, 4)))
        texts = [t.text for t in root.findall(f"{SVG}text")]
        assert texts[-1] == "dimension 0 (size 2) folded; rows: dim 1, columns: dim 2"
        assert "dimension 0 (size 2) folded" in root.get("aria-label")
        root = ET.fromstring(svg_of("2x4", P(None, None, None, "y"), (8, 2, 3, 4)))
        assert root.findall(f"{SVG}text")[-1].text.startswith(
            "dimensions 0 (size 8) and 1 (size 2) folded"
        )

    def test_no_caption_without_folding(self):
        texts = ET.fromstring(svg_of("2x4", P("x", "y"), (8, 4))).findall(f"{SVG}text")
        assert len(texts) == 8

    def test_large_arrays_are_scaled_down(self):
        root = ET.fromstring(svg_of("2x4", P("x", "y"), (1024, 2048)))
        assert (root.get("width"), root.get("height")) == ("480", "240")
        root = ET.fromstring(svg_of("8", P("x"), (4096,)))
        assert (root.get("width"), root.get("height")) == ("480", "56")

    def test_cell_sets_the_scale(self):
        root = ET.fromstring(sharding_svg(NamedSharding(make("8"), P("x")), (8, 2), cell=10))
        assert (root.get("width"), root.get("height")) == ("20", "80")

    @pytest.mark.parametrize("cell", [0, -1, 2.5, True])
    def test_bad_cell(self, cell):
        with pytest.raises(ValueError, match=f"cell must be a positive integer.*got {cell!r}"):
            svg_of_cell(cell)


def svg_of_cell(cell):
    return sharding_svg(NamedSharding(make("8"), P("x")), (8,), cell=cell)


class TestShardingDiagram:
    def test_shows_in_notebooks_and_prints_svg(self):
        x = jax.device_put(jnp.zeros((8, 4)), NamedSharding(make("2x4"), P("x", "y")))
        diagram = sharding_diagram(x)
        assert isinstance(diagram, ShardingDiagram)
        assert diagram.svg == sharding_svg(x)
        assert str(diagram) == diagram._repr_svg_() == diagram._repr_html_() == diagram.svg
        assert diagram.layout == layout(x)
        assert diagram.description == (
            "float32[8,4] sharded over 8 devices: 2 row blocks x 4 column blocks"
        )
        assert repr(diagram) == f"ShardingDiagram({diagram.description!r})"

    def test_of_a_sharding(self):
        diagram = sharding_diagram(NamedSharding(make("8"), P("x")), (16,))
        assert diagram.description.startswith("array[16] sharded over 8 devices")
        with pytest.raises(ValueError, match="needs the array's shape"):
            sharding_diagram(NamedSharding(make("8"), P("x")))
