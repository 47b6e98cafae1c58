"""The training-step chapter's claims, read from its recorded outputs.

Every number the two pages state is checked here against the output it was recorded in
(XLA:CPU, 8 simulated devices), so that a change of JAX, XLA or the snippet that moves
one of them fails a test instead of leaving the prose wrong. Both pages show cells of one
script, `gpt.py`: the technique table reuses the step the layouts compiled.
"""

from __future__ import annotations

import re

import pytest
from sitetools import REPO
from sitetools.snippets import read_sections

CHAPTER = REPO / "snippets/training_step"
GPT = read_sections((CHAPTER / "gpt.out").read_text(encoding="utf-8"))
TECHNIQUES = GPT  # the second page's cells, from the same script
PAGES = {
    name: (REPO / "docs/en/training-step" / f"{name}.md").read_text(encoding="utf-8")
    for name in ("gpt", "techniques")
}
LAYOUTS = ("data parallel", "FSDP", "tensor parallel", "FSDP x tensor")
TOLERANCES = {"0.001"}  # stated by the prose, checked by the tests below


def number(text: str) -> int:
    return int(text.replace(",", ""))


def layouts() -> dict[str, dict]:
    """For each layout: its losses, bytes on device 0 and {collective: (count, bytes)}."""
    found = {}
    blocks = re.split(r"^(?=\S)", GPT["layouts"], flags=re.MULTILINE)
    for block in filter(None, blocks):
        head = re.match(r"(.+): loss ([\d.]+) -> ([\d.]+) in 4 steps", block)
        held = re.search(r"parameters ([\d,]+) B, optimizer state ([\d,]+) B", block)
        collectives = {
            kind: (int(count), number(size))
            for kind, count, size in re.findall(r"  ([a-z-]+) x(\d+): ([\d,]+) B", block)
        }
        found[head[1]] = {
            "losses": (head[2], head[3]),
            "parameters": number(held[1]),
            "optimizer state": number(held[2]),
            "collectives": collectives,
        }
    return found


def table() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The two tables of the table cell: label -> cells, for memory and for collectives."""
    memory, collectives, current = {}, {}, None
    for line in TECHNIQUES["table"].splitlines():
        if line.startswith("bytes per device"):
            current = memory
        elif line.startswith("per device and step"):
            current = collectives
        elif current is not None and re.match(r"\d ", line):
            label, cells = line[:27].strip(), line[27:].split()
            if current is collectives:  # fixed-width cells, such as "12 + 4x9"
                cells = [line[i : i + 12].strip() for i in (27, 39, 51)] + [line[63:].strip()]
            current[label] = cells
    return memory, collectives


class TestGPTPage:
    def test_the_data(self):
        assert GPT["data"].strip() == "14020 characters, 83 distinct, vocabulary padded to 88"

    def test_parameters_are_born_sharded(self):
        """gpt.md: device 0 holds 37,120 of 237,056 parameter bytes, and 74,244 bytes of
        optimizer state: twice its parameters, and 4 bytes of step count."""
        created = GPT["create"]
        assert "parameters: 237,056 bytes, of which device 0 holds 37,120" in created
        assert "optimizer state on device 0: 74,244 bytes" in created
        assert 74_244 == 2 * 37_120 + 4
        assert "qkv kernel       float32[64@data,192@model]" in created
        assert "token embedding  float32[88@model,64@data]" in created

    def test_bytes_each_layout_holds(self):
        found = layouts()
        assert list(found) == list(LAYOUTS)
        total = 237_056
        assert found["data parallel"]["parameters"] == total
        assert found["data parallel"]["optimizer state"] == 474_116
        assert found["FSDP"]["parameters"] == 30_976
        # An eighth of the named matrices, and the 3 layer norms' 2 x 64 floats whole.
        layer_norms = 3 * 2 * 64 * 4
        assert found["FSDP"]["parameters"] == (total - layer_norms) // 8 + layer_norms
        assert found["tensor parallel"]["parameters"] == 72_704
        assert total // 4 < found["tensor parallel"]["parameters"] < total // 3
        assert found["FSDP x tensor"]["parameters"] == 37_120
        for layout in found.values():  # Adam: two moments per parameter, and a step count
            assert layout["optimizer state"] == 2 * layout["parameters"] + 4

    def test_collectives_of_each_layout_on_xla_cpu(self):
        found = {name: layout["collectives"] for name, layout in layouts().items()}
        assert found["data parallel"] == {"all-reduce": (1, 259_588)}
        # The gradient, with the token table's twice (88 x 64 floats), and the loss.
        assert 259_588 == 237_056 + 88 * 64 * 4 + 4
        # The token table twice, the position table and the block's four matrices.
        assert found["FSDP"] == {"all-gather": (7, 258_048), "all-reduce": (1, 259_588)}
        assert found["tensor parallel"] == {
            "all-gather": (1, 22_528),
            "all-reduce": (6, 1_389_060),
        }
        assert 22_528 == 88 * 64 * 4  # the whole token table
        assert 1_389_060 > 5 * 259_588  # "more than five times"
        # The token table gathered along "embed" before the lookup: no collective-permute,
        # and no all-gather of activations (XLA's "Involuntary full rematerialization").
        assert found["FSDP x tensor"] == {
            "all-gather": (8, 99_328),
            "all-reduce": (6, 1_389_060),
        }
        # "the same 1,389,060 bytes": on XLA:CPU the gradient is summed whole over "data".
        assert found["FSDP x tensor"]["all-reduce"] == found["tensor parallel"]["all-reduce"]

    def test_every_layout_trains_as_one_device_does(self):
        losses = {layout["losses"] for layout in layouts().values()}
        assert losses == {("4.3691", "3.8106")}
        lines = GPT["reference"].splitlines()
        assert lines[0] == "one device: loss 4.3691 -> 3.8106 in 4 steps"
        assert [line.split(" vs ")[0].strip() for line in lines[1:]] == list(LAYOUTS)
        assert all(line.endswith("every loss within 1e-5: True") for line in lines[1:])

    def test_the_pitfalls_raise(self):
        pitfalls = GPT["pitfalls"]
        assert "adding a table split over the batch's axis:\n  ShardingTypeError: add" in pitfalls
        assert "illegally sharded result" in pitfalls
        assert "the integer-label loss on logits split over the vocabulary:" in pitfalls
        assert "Use `.at[...].get(out_sharding=)`" in pitfalls


class TestTechniquesPage:
    def test_memory_per_row(self):
        memory, _ = table()
        assert list(memory) == [
            "1 float32",
            "2 + donation",
            "3 + bfloat16 compute",
            "4 + remat, names policy",
            "5 + accumulate, shard_map",
        ]
        rows = {label.split()[0]: cells for label, cells in memory.items()}
        for cells in rows.values():  # parameters, optimizer state and batch: unchanged
            assert cells[:2] == ["119,556", "111,672"]
        assert 119_556 == 37_120 + 74_244 + 2 * 16 * 64 * 4
        temporary = {row: number(cells[3]) for row, cells in rows.items()}
        assert temporary == {
            "1": 5_585_136,
            "2": 5_635_824,
            "3": 4_721_712,
            "4": 3_317_808,
            "5": 1_026_128,
        }
        assert temporary["5"] < temporary["4"] / 3  # "less than a third"
        aliased = {row: number(cells[2]) for row, cells in rows.items()}
        assert aliased["1"] == 0
        assert aliased["2"] == aliased["3"] == aliased["4"] == aliased["5"] == 111_364
        assert 111_364 == 37_120 + 74_244  # the device's parameters and optimizer state
        mflop = {row: cells[4] for row, cells in rows.items()}
        assert mflop == {"1": "124", "2": "124", "3": "130", "4": "153", "5": "-"}

    def test_donation_halves_the_peak_xla_cpu_reports(self):
        assert (
            "peak_memory_in_bytes (XLA:CPU, without temporaries): 231,340 in row 1, "
            "119,976 in row 2" in TECHNIQUES["table"]
        )
        assert 231_340 - 119_976 == 111_364  # the aliased bytes

    def test_collectives_per_row(self):
        _, collectives = table()
        rows = {label.split()[0]: cells for label, cells in collectives.items()}
        assert rows["1"] == rows["2"] == rows["3"] == ["8", "6", "0", "1,488,388"]
        assert rows["4"] == ["12", "6", "0", "1,537,540"]  # remat gathers the 4 matrices again
        # shard_map: the gathers once, one gradient all-reduce, tensor parallelism's 5 per
        # micro-batch.
        assert rows["5"] == ["7", "1 + 4x5", "0", "1,477,124"]
        # "fewer than without accumulation"
        assert number(rows["5"][3]) < min(number(rows[row][3]) for row in "1234")

    def test_what_each_remat_policy_keeps(self):
        policies = TECHNIQUES["policies"].splitlines()
        assert policies == [
            "dots_with_no_batch_dims_saveable keeps:",
            "  bf16[32@data,64,192@model] output of dot_general",
            "  bf16[32@data,64,64] output of dot_general",
            "  bf16[32@data,64,256@model] output of dot_general",
            'save_only_these_names("attention") keeps:',
            "  bf16[32@data,64,64] named 'attention'",
        ]

    def test_accumulation_computes_what_the_plain_step_does(self):
        losses = {
            label.strip(): [float(v) for v in values.split()]
            for label, values in re.findall(
                r"^(.+?) losses ([\d. ]+)$", TECHNIQUES["same_losses"], re.M
            )
        }
        assert list(losses) == ["4 + remat, names policy", "5 + accumulate, shard_map"]
        reference = losses["4 + remat, names policy"]
        for values in losses.values():
            assert len(values) == 3
            assert max(abs(a - b) for a, b in zip(values, reference, strict=True)) < 0.001

    def test_unreduced_stops_at_the_layer_norm(self):
        assert TECHNIQUES["unreduced"].startswith(
            "ShardingTypeError: Inputs cannot be sharded/varying on the same axes that another"
        )

    def test_loss_curves(self):
        lines = TECHNIQUES["curves"].splitlines()
        assert lines[1].split() == ["0", "4.3691", "4.3691", "4.3645"]
        assert "mean loss over steps 4-7, bfloat16 minus float32: +0.000" in lines
        assert "mean loss over steps 4-7, float32, other order minus float32: +0.018" in lines

    def test_the_sample_follows_its_prompt(self):
        sample = TECHNIQUES["sample"]
        assert sample.startswith(
            'r"""JSON (JavaScript Object Notation) <https://json.org> is a su|'
        )
        assert len(sample.split("|", 1)[1].rstrip("\n")) == 120


@pytest.mark.parametrize("page", ["gpt", "techniques"])
def test_every_number_of_the_prose_is_recorded(page):
    """Each number with a thousands separator, and each loss, that a page states appears in
    the chapter's recorded outputs."""
    recorded = "\n".join(GPT.values())
    prose = re.sub(r"```.*?```", "", PAGES[page], flags=re.S)
    numbers = set(re.findall(r"\b\d{1,3}(?:,\d{3})+\b|\b\d\.\d{3,4}\b", prose))
    assert numbers, "the page states no numbers?"
    missing = sorted(n for n in numbers - TOLERANCES if n not in recorded)
    assert not missing, f"{page}.md states numbers that no recorded output has: {missing}"
