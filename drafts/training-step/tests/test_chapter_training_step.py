"""The training-step chapter's claims, read from its recorded outputs.

Every number the two pages state is checked here against the output it was recorded in
(XLA:CPU, 8 simulated devices), so that a change of JAX, XLA or the snippets that moves
one of them fails a test instead of leaving the prose wrong.
"""

from __future__ import annotations

import re

import pytest
from sitetools import REPO
from sitetools.snippets import parse_cells, read_sections

CHAPTER = REPO / "snippets/training_step"
GPT = read_sections((CHAPTER / "gpt.out").read_text(encoding="utf-8"))
TECHNIQUES = read_sections((CHAPTER / "techniques.out").read_text(encoding="utf-8"))
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
        head = re.match(r"(.+): loss ([\d.]+) -> ([\d.]+) in 10 steps", block)
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
    """The two tables of techniques.out: label -> cells, for memory and for collectives."""
    memory, collectives, current = {}, {}, None
    for line in TECHNIQUES["table"].splitlines():
        if line.startswith("bytes per device"):
            current = memory
        elif line.startswith("per device and step"):
            current = collectives
        elif current is not None and re.match(r"\d'? ", line):
            label, cells = line[:27].strip(), line[27:].split()
            if current is collectives:  # fixed-width cells, such as "12 + 4x9"
                cells = [line[i : i + 12].strip() for i in (27, 39, 51)] + [line[63:].strip()]
            current[label] = cells
    return memory, collectives


class TestGPTPage:
    def test_the_data(self):
        assert GPT["data"].strip() == "14020 characters, 83 distinct, vocabulary padded to 88"

    def test_parameters_are_born_sharded(self):
        """gpt.md: device 0 holds 62,720 of 434,688 parameter bytes, and 125,444 bytes of
        optimizer state: twice its parameters, and 4 bytes of step count."""
        created = GPT["create"]
        assert "parameters: 434,688 bytes, of which device 0 holds 62,720" in created
        assert "optimizer state on device 0: 125,444 bytes" in created
        assert 125_444 == 2 * 62_720 + 4
        assert "qkv kernel       float32[64@data,192@model]" in created
        assert "token embedding  float32[88@model,64@data]" in created

    def test_bytes_each_layout_holds(self):
        found = layouts()
        assert list(found) == list(LAYOUTS)
        total = 434_688
        assert found["data parallel"]["parameters"] == total
        assert found["data parallel"]["optimizer state"] == 869_380
        assert found["FSDP"]["parameters"] == 56_576
        # An eighth of the named matrices, and the 5 layer norms' 2 x 64 floats whole.
        layer_norms = 5 * 2 * 64 * 4
        assert found["FSDP"]["parameters"] == (total - layer_norms) // 8 + layer_norms
        assert found["tensor parallel"]["parameters"] == 122_880
        assert total // 4 < found["tensor parallel"]["parameters"] < total // 3
        assert found["FSDP x tensor"]["parameters"] == 62_720
        for layout in found.values():  # Adam: two moments per parameter, and a step count
            assert layout["optimizer state"] == 2 * layout["parameters"] + 4

    def test_collectives_of_each_layout_on_xla_cpu(self):
        found = {name: layout["collectives"] for name, layout in layouts().items()}
        assert found["data parallel"] == {"all-reduce": (1, 457_220)}
        # The gradient, with the token table's twice (88 x 64 floats), and the loss.
        assert 457_220 == 434_688 + 88 * 64 * 4 + 4
        assert found["FSDP"] == {"all-gather": (11, 454_656), "all-reduce": (1, 457_220)}
        assert found["tensor parallel"] == {
            "all-gather": (1, 22_528),
            "all-reduce": (10, 2_487_812),
        }
        assert 22_528 == 88 * 64 * 4  # the whole token table
        assert 2_487_812 > 5 * 457_220  # "more than five times"
        assert set(found["FSDP x tensor"]) == {"all-gather", "all-reduce", "collective-permute"}
        assert found["FSDP x tensor"]["collective-permute"][0] == 2

    def test_every_layout_trains_as_one_device_does(self):
        losses = {layout["losses"] for layout in layouts().values()}
        assert losses == {("4.3691", "3.2914")}
        lines = GPT["reference"].splitlines()
        assert lines[0] == "one device: loss 4.3691 -> 3.2914 in 10 steps"
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
            "2 + bfloat16 compute",
            "3 + remat, dots policy",
            "3' + remat, names policy",
            "4 + donation",
            "5 + accumulate, scan",
            "5' + accumulate, shard_map",
        ]
        rows = {label.split()[0]: cells for label, cells in memory.items()}
        for cells in rows.values():  # parameters, optimizer state and batch: unchanged
            assert cells[:2] == ["196,356", "188,664"]
        assert 196_356 == 62_720 + 125_444 + 2 * 16 * 64 * 4
        temporary = {row: number(cells[3]) for row, cells in rows.items()}
        assert temporary == {
            "1": 9_308_528,
            "2": 7_839_088,
            "3": 3_670_384,
            "3'": 3_563_888,
            "4": 3_612_528,
            "5": 1_116_024,
            "5'": 1_216_848,
        }
        assert temporary["3"] < temporary["2"] / 2  # "under half"
        assert temporary["5"] < temporary["4"] / 3  # "less than a third"
        aliased = {row: number(cells[2]) for row, cells in rows.items()}
        assert aliased["1"] == aliased["2"] == aliased["3"] == aliased["3'"] == 0
        assert aliased["4"] == aliased["5"] == aliased["5'"] == 188_164 == 62_720 + 125_444
        mflop = {row: cells[4] for row, cells in rows.items()}
        assert mflop == {
            "1": "219",
            "2": "230",
            "3": "248",
            "3'": "276",
            "4": "276",
            "5": "-",
            "5'": "-",
        }

    def test_donation_halves_the_peak_xla_cpu_reports(self):
        assert (
            "peak_memory_in_bytes (XLA:CPU, without temporaries): 385,212 in row 3', "
            "197,048 in row 4" in TECHNIQUES["table"]
        )
        assert 385_212 - 197_048 == 188_164  # the aliased bytes

    def test_collectives_per_row(self):
        _, collectives = table()
        rows = {label.split()[0]: cells for label, cells in collectives.items()}
        assert rows["1"] == rows["2"] == ["13", "10", "2", "2,904,068"]
        assert rows["3"] == rows["3'"] == rows["4"] == ["21", "10", "2", "3,002,372"]
        # The scan reduces every micro-batch's gradient inside the loop.
        assert rows["5"] == ["12 + 4x9", "4x10", "1 + 4x1", "3,691,280"]
        # shard_map: the gathers once, one gradient all-reduce, tensor parallelism's 9 per
        # micro-batch, and no collective-permute.
        assert rows["5'"] == ["11", "1 + 4x9", "0", "2,625,028"]

    def test_accumulation_computes_what_the_plain_step_does(self):
        losses = {
            label.strip(): [float(v) for v in values.split()]
            for label, values in re.findall(
                r"^(.+?) losses ([\d. ]+)$", TECHNIQUES["same_losses"], re.M
            )
        }
        assert list(losses) == [
            "4 + donation",
            "5 + accumulate, scan",
            "5' + accumulate, shard_map",
        ]
        reference = losses["4 + donation"]
        for values in losses.values():
            assert max(abs(a - b) for a, b in zip(values, reference, strict=True)) < 0.001

    def test_unreduced_stops_at_the_layer_norm(self):
        assert TECHNIQUES["unreduced"].startswith(
            "ShardingTypeError: Inputs cannot be sharded/varying on the same axes that another"
        )

    def test_loss_curves(self):
        lines = TECHNIQUES["curves"].splitlines()
        assert lines[1].split() == ["0", "4.3691", "4.3691", "4.3645"]
        assert "mean loss over steps 10-19, bfloat16 minus float32: +0.073" in lines
        assert "mean loss over steps 10-19, float32, other order minus float32: +0.047" in lines

    def test_the_sample_follows_its_prompt(self):
        sample = TECHNIQUES["sample"]
        assert sample.startswith(
            'r"""JSON (JavaScript Object Notation) <https://json.org> is a su|'
        )
        assert len(sample.split("|", 1)[1].rstrip("\n")) == 120


class TestTheTwoScripts:
    @pytest.mark.parametrize("cell", ["data", "model", "rules", "collectives"])
    def test_share_their_model_and_helpers(self, cell):
        """The second page says its model, data, rules and helper are the first page's."""

        def source(name):
            return next(c.source for c in parse_cells(CHAPTER / name) if c.name == cell)

        assert source("gpt.py") == source("techniques.py")


@pytest.mark.parametrize("page", ["gpt", "techniques"])
def test_every_number_of_the_prose_is_recorded(page):
    """Each number with a thousands separator, and each loss, that a page states appears in
    the chapter's recorded outputs."""
    recorded = "\n".join([*GPT.values(), *TECHNIQUES.values()])
    prose = re.sub(r"```.*?```", "", PAGES[page], flags=re.S)
    numbers = set(re.findall(r"\b\d{1,3}(?:,\d{3})+\b|\b\d\.\d{3,4}\b", prose))
    assert numbers, "the page states no numbers?"
    missing = sorted(n for n in numbers - TOLERANCES if n not in recorded)
    assert not missing, f"{page}.md states numbers that no recorded output has: {missing}"
