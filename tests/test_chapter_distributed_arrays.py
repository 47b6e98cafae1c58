"""The distributed-arrays chapter's claims: collectives per layout and bytes per device,
where bad specs fail, which old names warn, and how the pages say to reproduce 8 devices."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from sitetools import REPO
from sitetools.snippets import needed_devices, read_sections


def recorded(name: str) -> dict[str, str]:
    return read_sections(
        (REPO / "snippets" / "distributed_arrays" / f"{name}.out").read_text(encoding="utf-8")
    )


MATMUL = recorded("sharded_matmul")


def layout_lines(section: str) -> dict[str, tuple[str, str, list[int]]]:
    """Layout name -> (result type, collectives, bytes of A, B, C on device 0)."""
    return layout_lines_of(
        [line for line in MATMUL[section].splitlines() if not line.startswith(("│", "├", "┌", "└"))]
    )


def layout_lines_of(lines: list[str]) -> dict[str, tuple[str, str, list[int]]]:
    found = {}
    for head, sizes in zip(lines[::2], lines[1::2], strict=True):
        name, rest = head.split(": C is ")
        kind, collectives = rest.split(", collectives: ")
        found[name] = (kind, collectives, [int(n) for n in re.findall(r"\d+", sizes.split(":")[1])])
    return found


def test_layouts_without_contraction_need_no_collective():
    layouts = layout_lines("layouts")
    assert set(layouts) == {
        "both replicated",
        "rows of A sharded",
        "columns of B sharded",
        "rows of A and columns of B",
    }
    assert all(collectives == "none" for _, collectives, _ in layouts.values())
    assert layouts["rows of A and columns of B"][0] == "float32[8@x,8@y]"
    memory = {name: sum(sizes) for name, (_, _, sizes) in layouts.items()}
    assert min(memory, key=memory.get) == "rows of A and columns of B"
    assert layouts["both replicated"][2] == [512, 512, 256]


def test_sharded_contraction_is_refused_then_all_reduced():
    assert MATMUL["contracting"].startswith("ShardingTypeError: Contracting dimensions are sharded")
    lines = [line for line in MATMUL["out_sharding"].splitlines() if "all-reduced" not in line]
    results = layout_lines_of(lines)
    assert all(collectives == "all-reduce" for _, collectives, _ in results.values())
    assert results["out_sharding=P('y', None)"][2][2] * 4 == results["out_sharding=P()"][2][2]


def test_on_cpu_the_sharded_output_all_reduces_everything_then_keeps_a_quarter():
    """sharded-matmul.md: on XLA:CPU both outputs all-reduce the whole 8x8 sum on every
    device; with P("y", None) each device then keeps 2 of the 8 rows. That all-reduce plus
    slice is the pattern GPU and TPU compilers turn into a reduce-scatter."""
    kept = re.findall(
        r"all-reduced on each device: (\S+), then kept: (\(.*\))", MATMUL["out_sharding"]
    )
    assert kept == [("f32[8,8]", "(8, 8)"), ("f32[8,8]", "(2, 8)")]


def test_reshard_gathers_and_constraint_reduces():
    assert "collectives: all-gather" in MATMUL["reshard"]
    assert "collectives: all-reduce" in MATMUL["constraint"]


def test_vmap_over_sharded_rows_keeps_the_sharding_without_communication():
    vmap = recorded("vmap_sharded")
    assert "dots: float32[8@batch]" in vmap["vmap"]
    assert "collectives in the compiled program: none" in vmap["hlo"]
    assert "each device holds (1,) of (8,)" in vmap["hlo"]


def test_vmap_over_differently_sharded_inputs_raises_until_resharded():
    """vmap.md's pitfall: rows against columns raise; jax.reshard fixes it."""
    mismatch = recorded("vmap_sharded")["mismatch"]
    assert mismatch.startswith(
        "ValueError: Mapped away dimension of inputs passed to vmap should be sharded the same."
    )
    assert "inconsistent axis specs: batch vs None" in mismatch
    assert "after jax.reshard: float32[8@batch] [28.0, 92.0," in mismatch


def test_a_missing_axis_fails_in_named_sharding_an_uneven_split_in_device_put():
    """meshes.md: the two pitfalls fail in different places, with these messages."""
    lines = recorded("meshes")["pitfalls"].splitlines()
    assert lines[0] == (
        "NamedSharding: Resource axis: nope of P('nope',) is not found in mesh: "
        "('batch', 'features')."
    )
    assert lines[1].startswith("jax.device_put: ")
    assert "does not evenly divide the dimension size 6" in lines[1]


def test_pipelined_timing_is_recorded_without_numbers():
    timing = recorded("measuring")["timing"]
    assert "pipelined: 5 runs of 4 calls, one wait per run" in timing
    assert "sharded result equals unsharded: True" in timing
    assert " ms" not in timing and "µs" not in timing


def test_old_names_are_gone():
    gone = recorded("old_names")["gone"].splitlines()
    assert gone and all(line.endswith("exists: False") for line in gone)


def test_old_array_attributes_fail_and_the_older_mesh_has_auto_axes():
    """corrections.md#attributes: device_buffers/device_buffer raise naming the fix,
    x.device is a property, and Mesh(create_device_mesh(...)) gives Auto axes where
    jax.make_mesh gives Explicit ones."""
    lines = recorded("old_names")["attributes"].splitlines()
    assert lines[0].endswith("Use [x.data for x in arr.addressable_shards]")
    assert lines[1].endswith("Use arr.addressable_data(0)")
    assert lines[2].startswith("x.device(): ") and "not callable" in lines[2]
    assert lines[3:] == [
        "Mesh(create_device_mesh((2, 4)), ...): (Auto, Auto)",
        "jax.make_mesh((2, 4), ...): (Explicit, Explicit)",
    ]


def test_deprecated_spellings_still_run_but_warn():
    """corrections.md: pjit, `with mesh:` and jax.experimental.shard_map run in JAX 0.12
    and emit a DeprecationWarning each."""
    old = recorded("old_names")
    pjit = old["pjit_and_mesh"]
    assert "pjit under `with mesh:` still runs: float32[8@x,4@y] and warns:" in pjit
    assert (
        "DeprecationWarning: jax.experimental.pjit.pjit has been deprecated. "
        "Please use `jax.jit` instead."
    ) in pjit
    assert "DeprecationWarning: `with mesh:` context manager has been deprecated." in pjit
    shard_map = old["shard_map"]
    assert "jax.experimental.shard_map still runs: [4.0, 4.0" in shard_map
    assert "DeprecationWarning: jax.experimental.shard_map is deprecated in v0.8.0." in shard_map


def test_the_xla_flag_still_makes_cpu_devices():
    """corrections.md: XLA_FLAGS=--xla_force_host_platform_device_count=8 still works in
    JAX 0.12; jax_num_cpu_devices is the preferred spelling, not a correction."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env |= {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    count = subprocess.run(
        [sys.executable, "-c", "import jax; print(jax.device_count())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert count.strip() == "8"


CHAPTER = sorted((REPO / "snippets" / "distributed_arrays").glob("*.py"))
PAGES = sorted(
    page
    for language in ("en", "zh", "ko")
    for page in (REPO / "docs" / language / "distributed-arrays").glob("*.md")
)


def test_only_the_mesh_lessons_need_8_devices():
    """vmap and measuring size their mesh from jax.device_count(); the others teach 2x4
    and 4x2 meshes (or the 8-way table) and say so."""
    needing = {p.stem for p in CHAPTER if needed_devices(p) == 8}
    assert needing == {"meshes", "sharded_matmul", "diagrams", "old_names"}


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(REPO)) for p in PAGES])
def test_a_page_showing_an_8_device_snippet_says_how_to_reproduce_it(page):
    text = page.read_text(encoding="utf-8")
    shown = set(re.findall(r"snippets/distributed_arrays/(\w+)\.py", text))
    if any(needed_devices(REPO / "snippets" / "distributed_arrays" / f"{s}.py") for s in shown):
        assert text.count("JAX_PLATFORMS=cpu") == 1, f"{page.name}: say once how to run it"


def test_the_diagrams_page_states_the_palette_size():
    """diagrams.md: the palette has 9 colours, indexed by device id modulo 9, so device 9
    gets device 0's colour."""
    from jaxpar.diagrams import PALETTE

    assert len(PALETTE) == 9
    for language in ("en", "zh", "ko"):
        text = (REPO / "docs" / language / "distributed-arrays/diagrams.md").read_text("utf-8")
        first_paragraph = text.split("\n\n")[1]
        assert "9" in first_paragraph and "0" in first_paragraph, language


def test_a_mesh_too_large_fails_and_one_too_small_quietly_uses_the_first_devices():
    """meshes.md#pitfalls: (4, 4) needs 16 devices and says so; (4,) on 8 devices takes
    devices 0-3 without an error; jaxpar.make_mesh refuses both."""
    import jax

    from jaxpar import make_mesh

    assert recorded("meshes")["mesh_size"].splitlines() == [
        "jax.make_mesh((4, 4)): Number of devices 8 must be >= the product of mesh_shape (4, 4)",
        "jax.make_mesh((4,)) uses devices [0, 1, 2, 3] of 8",
    ]
    assert jax.device_count() == 8
    for shape, names in (((4, 4), ("a", "b")), ((4,), ("a",))):
        with pytest.raises(ValueError, match="but 8 are available"):
            make_mesh(shape, names)
