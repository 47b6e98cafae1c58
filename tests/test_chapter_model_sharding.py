"""The model-sharding page's claims, read from its recorded output."""

from __future__ import annotations

import re

from sitetools import REPO
from sitetools.snippets import read_sections

RECORDED = read_sections(
    (REPO / "snippets/model_sharding/fsdp_and_tp.out").read_text(encoding="utf-8")
)


def test_the_parameters_are_born_sharded():
    held = {
        name: (int(part), int(total))
        for name, part, total in re.findall(
            r"(\w[\w ]*): created with (\d+) of (\d+) bytes on device 0",
            RECORDED["create"],
        )
    }
    assert set(held) == {"replicated", "FSDP", "tensor parallel"}
    assert held["replicated"][0] == held["replicated"][1]
    assert held["FSDP"][0] * 7 < held["FSDP"][1]  # about an eighth
    assert held["tensor parallel"][0] * 3 < held["tensor parallel"][1]  # about a quarter


def test_an_annotated_parameter_needs_a_mesh():
    assert RECORDED["no_mesh"].startswith(
        "ValueError: An auto mesh context or metadata is required if creating a variable"
    )


def test_sharding_divides_the_parameter_and_optimizer_bytes_each_device_holds():
    blocks = re.findall(
        r"(\w[\w ]*): loss .*\n  parameter bytes on device 0: (\d+) of (\d+)\n"
        r"  optimizer state bytes on device 0: (\d+) of (\d+)",
        RECORDED["compare"],
    )
    held = {name: tuple(map(int, numbers)) for name, *numbers in blocks}
    assert set(held) == {"replicated", "FSDP", "tensor parallel"}
    for part, total, state_part, state_total in held.values():
        assert (state_part, state_total) == (part, total)  # the momentum follows its parameter
    assert held["replicated"][0] == held["replicated"][1]
    assert held["FSDP"][0] * 7 < held["FSDP"][1]
    assert held["tensor parallel"][0] * 3 < held["tensor parallel"][1]


def test_a_plain_jitted_init_replicates_the_momentum():
    part, total = re.search(
        r"jax\.jit\(tx\.init\): (\d+) of (\d+) bytes", RECORDED["unpinned_init"]
    ).groups()
    assert part == total


def test_fsdp_gathers_parameters_on_xla_cpu():
    lines = {
        line.split(":")[0]: line for line in RECORDED["compare"].splitlines() if ": loss" in line
    }
    assert all("collectives in the step (XLA:CPU): all-reduce" in line for line in lines.values())
    assert "all-gather" in lines["FSDP"]
    assert "all-gather" not in lines["tensor parallel"]


def test_every_layout_matches_one_device_loss_and_parameters():
    losses = re.findall(r"(\w[\w ]*): loss ([\d.]+)", RECORDED["compare"])
    one_device, *lines = RECORDED["same_result"].splitlines()
    assert {loss for _, loss in losses} == {one_device.removeprefix("one device: loss ")}
    assert len(lines) == 3 and all(
        line.endswith("vs one device: max relative difference < 1e-5: True") for line in lines
    )
