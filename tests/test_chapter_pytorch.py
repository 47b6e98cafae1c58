"""Side by side with PyTorch: each PyTorch twin and its JAX twin print the same losses, and
the pages' numbers are those of the recordings (tests/test_snippets.py runs the twins and
checks the recordings against them)."""

from __future__ import annotations

import re

import pytest
from sitetools import REPO
from sitetools.snippets import read_sections

SNIPPETS = REPO / "snippets" / "pytorch"
DOCS = REPO / "docs" / "en" / "pytorch"
# What the pages promise: every step's loss agrees within this (float32 sums in another
# order, carried along by AdamW).
LOSS_TOLERANCE_TEXT = "5e-5"
LOSS_TOLERANCE = float(LOSS_TOLERANCE_TEXT)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def recorded(name: str) -> dict[str, str]:
    return read_sections((SNIPPETS / name).read_text(encoding="utf-8"))


def losses(text: str) -> list[float]:
    """The losses a cell prints: "step 3: loss 1.759795" lines, one "losses:" line, or a
    "loss on the next batch:" line."""
    found = [float(x) for x in re.findall(r"(?:step \d+: loss|next batch:) (\d+\.\d+)", text)]
    for line in re.findall(r"losses: (.*)", text):
        found += [float(x) for x in line.split()]
    return found


# bfloat16 rounds at different places in the two frameworks (mixed-precision.md).
BF16_TOLERANCE_TEXT = "2e-3"
# (PyTorch's recording, JAX's, their cell or "PyTorch's cell/JAX's", how many losses it
# prints, the tolerance)
TWINS = [
    ("ddp.out", "data_parallel.out", "train", 8, LOSS_TOLERANCE),
    ("fsdp2_and_tp.out", "sharded_mlp.out", "fsdp", 8, LOSS_TOLERANCE),
    ("fsdp2_and_tp.out", "sharded_mlp.out", "tp", 8, LOSS_TOLERANCE),
    ("fsdp2_and_tp.out", "sharded_mlp.out", "fsdp_tp", 8, LOSS_TOLERANCE),
    ("save_for_jax.out", "from_pytorch.out", "next_loss", 1, LOSS_TOLERANCE),
    ("mixed_precision.out", "bf16_step.out", "train", 8, float(BF16_TOLERANCE_TEXT)),
    ("dcp_resume.out", "orbax_resume.out", "resume", 8, LOSS_TOLERANCE),
    ("autocast.out", "bf16_data_parallel.out", "train/jit", 8, float(BF16_TOLERANCE_TEXT)),
    ("autocast.out", "bf16_data_parallel.out", "train/shard_map", 8, float(BF16_TOLERANCE_TEXT)),
]


@pytest.mark.parametrize(
    "pytorch, jax, cell, count, tolerance", TWINS, ids=[f"{t[0]}:{t[2]}" for t in TWINS]
)
def test_twins_print_the_same_losses(pytorch, jax, cell, count, tolerance):
    theirs_cell, _, ours_cell = cell.partition("/")
    theirs = losses(recorded(pytorch)[theirs_cell])
    ours = losses(recorded(jax)[ours_cell or theirs_cell])
    assert len(theirs) == len(ours) == count, (theirs, ours)
    apart = max(abs(a - b) for a, b in zip(theirs, ours, strict=True))
    assert apart <= tolerance, f"{pytorch} and {jax} differ by {apart} in cell {cell}"


@pytest.mark.parametrize(
    "page, tolerance",
    [
        ("data-parallel.md", LOSS_TOLERANCE_TEXT),
        ("from-pytorch.md", LOSS_TOLERANCE_TEXT),
        ("resuming.md", LOSS_TOLERANCE_TEXT),
        ("mixed-precision.md", BF16_TOLERANCE_TEXT),
    ],
)
def test_the_pages_state_the_tolerance_the_tests_use(page, tolerance):
    assert f"within {tolerance}" in (DOCS / page).read_text(encoding="utf-8")


def test_the_bf16_twins_differ_by_what_the_page_says():
    theirs, ours = (losses(recorded(n)["train"]) for n in ("mixed_precision.out", "bf16_step.out"))
    apart = max(abs(a - b) for a, b in zip(theirs, ours, strict=True))
    page = (DOCS / "mixed-precision.md").read_text(encoding="utf-8")
    assert f"by {apart:.0e} at most".replace("e-04", "e-4") in page, apart


def numbers(text: str) -> set[str]:
    return set(NUMBER.findall(text))


# The byte counts each page quotes, and the recordings they come from.
QUOTED = {
    "data-parallel.md": (["ddp.out", "data_parallel.out"], ["38,440", "38,444", "76,888"]),
    "from-pytorch.md": (["save_for_jax.out", "from_pytorch.out"], ["4,840"]),
    "mixed-precision.md": (
        ["mixed_precision.out", "bf16_step.out", "fsdp2_and_tp.out"],
        ["39,472", "78,944", "9,868", "19,200", "38,400", "2,400", "18,944", "2,368"],
    ),
    "checkpointing.md": (
        ["checkpointing.out", "remat.out"],
        ["104,452", "38,916", "191,620", "39,044"],
    ),
    "sharding.md": (
        ["fsdp2_and_tp.out", "sharded_mlp.out"],
        ["9,868", "4,840", "78,944", "38,400", "4,800", "44", "38,444", "5,120"],
    ),
}


@pytest.mark.parametrize("page", QUOTED)
def test_the_byte_counts_on_the_pages_are_recorded_ones(page):
    sources, quoted = QUOTED[page]
    text = (DOCS / page).read_text(encoding="utf-8")
    outputs = "".join((SNIPPETS / s).read_text(encoding="utf-8") for s in sources)
    for number in quoted:
        assert number in numbers(text), f"{page} no longer quotes {number}: update QUOTED"
        assert re.search(rf"(?<![\d,]){number}(?![\d,]) bytes", outputs) or number in numbers(
            outputs
        ), f"{page} quotes {number}, which no recording of {sources} prints"


def test_checkpointing_keeps_less_and_changes_no_number():
    for name in ("checkpointing.out", "remat.out"):
        without, with_remat = recorded(name)["saved"].splitlines()
        kept = [
            int(re.search(r"([\d,]+) bytes kept", line)[1].replace(",", ""))
            for line in (without, with_remat)
        ]
        assert kept[1] < kept[0], name
        assert without.split("kept,")[1] == with_remat.split("kept,")[1], name  # loss, norm
    pytorch, jax = (
        [float(x) for x in NUMBER.findall(recorded(n)["saved"].splitlines()[0].split("kept,")[1])]
        for n in ("checkpointing.out", "remat.out")
    )
    assert pytorch == pytest.approx(jax, abs=LOSS_TOLERANCE), "the twins' loss or norm differ"


@pytest.mark.parametrize(
    "resumed, uninterrupted",
    [("dcp_resume.out", "fsdp2_and_tp.out"), ("orbax_resume.out", "sharded_mlp.out")],
)
def test_a_resumed_run_has_the_losses_of_the_uninterrupted_one(resumed, uninterrupted):
    # resuming.md: "to the last digit", the AdamW state restored with the weights
    assert losses(recorded(resumed)["resume"]) == losses(recorded(uninterrupted)["fsdp"])


def test_both_launchers_tell_each_process_its_place():
    torch_lines = recorded("hello_torchrun.out")["hello"].splitlines()
    jax_lines = recorded("hello_launch.out")["hello"].splitlines()
    assert len(torch_lines) == len(jax_lines) == 4
    for rank, (theirs, ours) in enumerate(zip(torch_lines, jax_lines, strict=True)):
        assert f"'RANK': {rank}, 'LOCAL_RANK': {rank}, 'WORLD_SIZE': 4" in theirs
        assert f"'JAXPAR_PROCESS_ID': {rank}, 'JAXPAR_NUM_PROCESSES': 4" in ours
        # torchrun.md: each JAX process drives 2 of the 8 devices; process 1's ids start at 2048
        assert ours.endswith(" of 8") and ours.count(",") == 2 + 1, ours
    assert "drives devices [2048, 2049]" in jax_lines[1]


def test_an_all_reduce_sends_twice_what_the_reduce_scatter_does():
    # sharding.md: XLA:CPU's all-reduce of the whole gradient against XLA:GPU's reduce-scatter
    # of its 8 shares, by the ring algorithm's count (jaxpar.Collective.sent_bytes).
    fsdp = recorded("sharded_mlp.out")["fsdp"]
    cpu = int(re.search(r"XLA:CPU: .*all-reduce 1 \(([\d,]+) bytes", fsdp)[1].replace(",", ""))
    gpu = int(re.search(r"reduce-scatter 1 \(([\d,]+) bytes", fsdp)[1].replace(",", ""))
    devices = 8
    ratio = (2 * (devices - 1) / devices * cpu) / ((devices - 1) * gpu)
    assert ratio == pytest.approx(2, rel=0.01)


def test_vmap_over_dtensors_keeps_the_rows_sharding_as_jax_does():
    """The vmap page's note and pitfall (review N11): PyTorch's twin of vmap_sharded.py."""
    torch_side = recorded("vmap_dtensor.out")
    jax_side = read_sections(
        (REPO / "snippets/distributed_arrays/vmap_sharded.out").read_text(encoding="utf-8")
    )
    jax_values = re.search(r"dots: \S+ (\[.*\])", jax_side["vmap"])[1]
    assert torch_side["vmap"].splitlines() == [
        "u: (Shard(dim=0),)  v: (Shard(dim=0),)",
        f"dots: (Shard(dim=0),) {jax_values}",
        "collectives: none",
        "each rank holds (2,) of (8,)",
    ]
    assert torch_side["mismatch"].splitlines() == [
        f"v split by columns: (Shard(dim=0),) {jax_values}",
        "collectives: all_gather_into_tensor 1",
    ]
    page = " ".join((REPO / "docs/en/distributed-arrays/vmap.md").read_text("utf-8").split())
    assert "returns the same 8 dot products as a `Shard(0)` DTensor, 2 on each rank" in page
    assert "`CommDebugMode` counts no collective" in page
    assert (
        "(an all-gather and a local slice, which DTensor runs on a CPU mesh in place of an all-to-all)"
        in page
    )


def test_autocast_sums_in_float32_and_jax_where_the_page_says():
    """DDP all-reduces float32 gradients; jax.jit sums them in bfloat16 on XLA:GPU, and the
    shard_map step with the weights made per-device before the cast, in float32."""
    (ddp_bytes,) = re.findall(r"all-reduced per step: ([\d,]+) bytes of float32", recorded(
        "autocast.out")["train"])  # fmt: skip
    sent = dict(
        line.split(": ", 1)
        for line in recorded("bf16_data_parallel.out")["collectives"].splitlines()
    )
    assert sent["jit, XLA:GPU"].startswith("all-reduce bf16 ")
    jit_bytes = sent["jit, XLA:GPU"].split()[2]
    assert (
        sent["shard_map, XLA:GPU"]
        == f"all-reduce f32 {int(ddp_bytes.replace(',', '')) + 4:,} bytes"
    )
    assert sent["jit, XLA:CPU"] == sent["shard_map, XLA:CPU"] == sent["shard_map, XLA:GPU"]
    page = " ".join((DOCS / "mixed-precision.md").read_text(encoding="utf-8").split())
    assert f"DDP all-reduces {ddp_bytes} bytes of float32 per step" in page
    assert f"the step all-reduces {jit_bytes} bytes of bfloat16" in page
    shard_map_bytes = sent["shard_map, XLA:GPU"].split()[2]
    assert f"the `shard_map` step all-reduces {shard_map_bytes} bytes of float32" in page
