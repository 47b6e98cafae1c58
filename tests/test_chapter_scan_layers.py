"""The page "Scan over layers": its claims, read from scan_layers.out (XLA:CPU, 8 simulated
devices) and from the `layers` section of the recorded grid (XLA:GPU and XLA:TPU)."""

from __future__ import annotations

import json
import re

from sitetools import REPO
from sitetools.snippets import read_sections

from jaxpar import LLAMA_3_2_1B

CHAPTER = REPO / "snippets/training_step"
OUTPUT = read_sections((CHAPTER / "scan_layers.out").read_text(encoding="utf-8"))
LAYERS = json.loads((CHAPTER / "memory_grid.json").read_text(encoding="utf-8"))["layers"]
PAGE = " ".join((REPO / "docs/en/training-step/scan-layers.md").read_text("utf-8").split())
GIB = 2**30


def program_sizes() -> dict[int, tuple[int, int, int, int]]:
    """layers -> (scanned operations, matmuls, looped operations, matmuls)."""
    rows = [line.replace(",", "").split() for line in OUTPUT["program_size"].splitlines()[1:]]
    return {int(row[0]): tuple(map(int, row[1:])) for row in rows}


def test_the_stack_has_a_leading_unsplit_axis_of_layers():
    assert OUTPUT["stack"].strip().endswith("float32[4,64@fsdp,192]")
    assert "`float32[4,64@fsdp,192]`" in PAGE and "`(4, 64, 192)`" in PAGE


def test_scan_and_loop_agree_and_the_model_learns():
    assert OUTPUT["loop"].strip().endswith("at most 1e-5: True")
    losses = [float(x) for x in OUTPUT["train"].split(":")[1].split()]
    assert len(losses) == 8 and losses[-1] < losses[0] - 1


def test_the_scanned_program_keeps_its_size_and_the_looped_one_grows_by_a_layer_at_a_time():
    sizes = program_sizes()
    assert sorted(sizes) == [2, 4, 8]
    assert len({(s[0], s[1]) for s in sizes.values()}) == 1  # scanned: the same at every depth
    per_layer = {(b[2] - a[2], b[3] - a[3]) for a, b in [(sizes[2], sizes[4])]}
    ops, matmuls = per_layer.pop()
    assert (ops % 2, matmuls % 2) == (0, 0)
    ops, matmuls = ops // 2, matmuls // 2
    assert sizes[8][2] == sizes[4][2] + 4 * ops and sizes[8][3] == sizes[4][3] + 4 * matmuls
    assert f"each layer adds {ops} operations, {matmuls} of them matrix products" in PAGE


def test_the_real_size_table_is_the_recorded_grid():
    rows = re.findall(
        r"\| (8 H100s|v5e-8) \| (scanned|unrolled) \| ([^|]+)\|([^|]+)\|([^|]+)\|([^|]+)\|", PAGE
    )
    assert len(rows) == 4
    targets = {"8 H100s": "h100-8", "v5e-8": "v5e-8"}
    for (target, layers, total, temps, gathers, seconds), cell in zip(
        rows, LAYERS[:4], strict=True
    ):
        assert (targets[target], layers == "scanned") == (
            cell["target"],
            cell["training"]["scan_layers"],
        )
        xla = cell["xla"]
        assert total.strip() == f"{xla['total_bytes'] / GIB:.2f}"
        assert temps.strip() == f"{xla['temp_bytes'] / GIB:.2f}"
        assert gathers.strip() == str(xla["all_gather_runs"])
        assert seconds.strip() == f"{cell['compile_seconds']} s"


def test_the_prose_states_the_differences_of_the_table():
    gpu_scan, gpu_loop, tpu_scan, tpu_loop = (c["xla"] for c in LAYERS[:4])
    shown = [round(x["total_bytes"] / GIB, 2) for x in (gpu_scan, gpu_loop, tpu_scan, tpu_loop)]
    more = [shown[1] - shown[0], shown[3] - shown[2]]  # as a reader subtracts the table's
    assert (
        f"{more[0]:.2f} GiB more on each H100 and {more[1]:.2f} GiB more on each TPU chip" in PAGE
    )
    fewer = gpu_scan["all_gather_runs"] - gpu_loop["all_gather_runs"]
    assert f"(the counts differ by {fewer} on XLA:GPU" in PAGE
    assert tpu_scan["all_gather_runs"] == tpu_loop["all_gather_runs"]
    ratios = [LAYERS[i + 1]["compile_seconds"] / LAYERS[i]["compile_seconds"] for i in (0, 2)]
    assert all(1.8 < r < 2.2 for r in ratios) and "twice as long to compile" in PAGE


def test_the_flops_the_page_states_are_the_recorded_ones():
    model, per_device = re.findall(r"\d[\d,]{8,}\d", OUTPUT["flops"])
    assert int(model.replace(",", "")) == 8 * int(per_device.replace(",", ""))
    assert f"{model} FLOPs, {per_device} per device" in PAGE
    scanned, looped = re.findall(r"scanned ([\d.]+), looped ([\d.]+)", OUTPUT["flops"])[0]
    assert float(scanned) < 1 < float(looped)  # the loop body counted once, or every time
    assert f"reports {scanned} of the model's FLOPs per device, for the looped one {looped}" in PAGE


def test_the_depth_table_is_the_recorded_grid_and_scanning_keeps_compile_time_flat():
    rows = re.findall(r"\| (\d+) \| ([\d.]+) s \| ([\d.]+) \| ([\d.]+) s \| ([\d.]+) \|", PAGE)
    by_depth = {16: LAYERS[:2]} | {
        int(c["model"].split(", ")[1].split()[0]): LAYERS[4 + 2 * i : 6 + 2 * i]
        for i, c in enumerate(LAYERS[4::2])
    }
    assert [int(r[0]) for r in rows] == sorted(by_depth) == [2, 4, 8, 16]
    for depth, scan_seconds, scan_gib, loop_seconds, loop_gib in rows:
        scanned, unrolled = by_depth[int(depth)]
        assert (scanned["training"]["scan_layers"], unrolled["training"]["scan_layers"]) == (
            True,
            False,
        )
        assert scan_seconds == str(scanned["compile_seconds"])
        assert loop_seconds == str(unrolled["compile_seconds"])
        assert scan_gib == f"{scanned['xla']['total_bytes'] / GIB:.2f}"
        assert loop_gib == f"{unrolled['xla']['total_bytes'] / GIB:.2f}"
    scanned = [float(r[1]) for r in rows]
    unrolled = [float(r[3]) for r in rows]
    assert max(scanned) / min(scanned) < 1.3 < unrolled[-1] / unrolled[0]  # recorded, not timed


def test_the_gathers_end_where_they_start_and_the_gathered_weights_are_not_the_difference():
    """XLA:GPU's schedule as gather_schedule reads it from the recorded cells; "Will it
    fit?" cites the first claim too."""
    gpu_scan, gpu_loop = (c["xla"] for c in LAYERS[:2])
    # every gather of the scanned step found as a start/done pair, none split across
    assert gpu_scan["all_gathers_paired"] > 0 and gpu_scan["all_gathers_split"] == 0
    assert "each all-gather that starts in an iteration ends in it" in PAGE
    fits_page = " ".join((REPO / "docs/en/training-step/will-it-fit.md").read_text("utf-8").split())
    assert "each of XLA:GPU's all-gathers ends in the loop iteration that starts it" in fits_page
    alive = [x["gathered_bytes_alive"] / 2**20 for x in (gpu_scan, gpu_loop)]
    embedding = LLAMA_3_2_1B.vocab * LLAMA_3_2_1B.d_model * 2 / 2**20  # bfloat16, whole
    assert embedding < min(alive)
    assert (
        f"at most {alive[0]:.0f} MiB of them are alive in the scanned step and {alive[1]:.0f} "
        f"MiB in the unrolled one (the embedding table, gathered whole, is {embedding:.0f} MiB "
        f"of each), while the temporaries grow from {gpu_scan['temp_bytes'] / GIB:.2f} to "
        f"{gpu_loop['temp_bytes'] / GIB:.2f} GiB"
    ) in PAGE
    # A small fraction of the difference in memory: not the gathered weights.
    assert alive[1] - alive[0] < 0.05 * (gpu_loop["total_bytes"] - gpu_scan["total_bytes"]) / 2**20
