"""The model-sharding page's claims, read from its recorded output."""

from __future__ import annotations

import re

from sitetools import REPO
from sitetools.snippets import read_sections

RECORDED = read_sections(
    (REPO / "snippets/model_sharding/fsdp_and_tp.out").read_text(encoding="utf-8")
)


def test_sharding_the_parameters_divides_the_bytes_each_device_holds():
    held = {
        name: (int(part), int(total))
        for name, part, total in re.findall(
            r"(\w[\w ]*): loss .*\n  parameter bytes on device 0: (\d+) of (\d+)",
            RECORDED["compare"],
        )
    }
    assert held["replicated"][0] == held["replicated"][1]
    assert held["FSDP"][0] * 7 < held["FSDP"][1]  # about an eighth
    assert held["tensor parallel"][0] * 3 < held["tensor parallel"][1]  # about a quarter


def test_fsdp_gathers_parameters_and_every_layout_matches_one_device():
    assert (
        "FSDP: loss" in RECORDED["compare"]
        and "all-gather" in RECORDED["compare"].split("FSDP: loss")[1].splitlines()[0]
    )
    lines = RECORDED["same_result"].splitlines()
    assert len(lines) == 3 and all(
        line.endswith("vs one device: max relative difference < 1e-5: True") for line in lines
    )
