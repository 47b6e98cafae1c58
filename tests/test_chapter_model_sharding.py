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


def test_an_annotated_parameter_needs_a_mesh_unless_eager_sharding_is_off():
    assert RECORDED["no_mesh"].startswith(
        "ValueError: An auto mesh context or metadata is required if creating a variable"
    )
    # With nnx.use_eager_sharding(False) it is created whole, on one device, annotated.
    assert "eager sharding off: float32[64,128] on 1 device," in RECORDED["no_mesh"]
    assert "annotation kept: P(('data', 'model'), None)" in RECORDED["no_mesh"]


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


def test_fsdp_gathers_each_sharded_parameter_once_on_xla_cpu():
    lines = {
        line.split(":")[0]: line for line in RECORDED["compare"].splitlines() if ": loss" in line
    }
    assert all(re.search(r"\(XLA:CPU\): \d all-reduce", line) for line in lines.values())
    # Three sharded parameters (hidden kernel and bias, out kernel), gathered once each:
    # nothing gathers them again for the backward pass.
    assert lines["FSDP"].endswith("1 all-reduce, 3 all-gather")
    assert "all-gather" not in lines["tensor parallel"]


def step_memory() -> dict[str, tuple[int, int, int]]:
    """Layout -> (arguments, temporaries, donated) bytes per device of the compiled step."""
    found = re.findall(
        r"(\w[\w ]*): loss (?:.*\n  ){3}compiled step per device \(XLA:CPU\): "
        r"arguments (\d+), temporaries (\d+), donated (\d+) bytes",
        RECORDED["compare"],
    )
    return {name: tuple(map(int, numbers)) for name, *numbers in found}


def test_fsdp_saves_stored_state_not_the_step_temporaries():
    """model-sharding.md: 18000 against 85200 bytes of arguments, 77096 against 77032 of
    temporaries, on XLA:CPU."""
    memory = step_memory()
    assert set(memory) == {"replicated", "FSDP", "tensor parallel"}
    assert memory["replicated"][:2] == (85200, 77032)
    assert memory["FSDP"][:2] == (18000, 77096)
    assert memory["FSDP"][0] * 4 < memory["replicated"][0]
    assert abs(memory["FSDP"][1] - memory["replicated"][1]) < memory["replicated"][1] / 100


def test_donation_reuses_the_parameter_and_optimizer_state_memory():
    held = dict(
        re.findall(
            r"(\w[\w ]*): loss .*\n  parameter bytes on device 0: (\d+)", RECORDED["compare"]
        )
    )
    for name, (_, _, donated) in step_memory().items():
        assert donated == 2 * int(held[name])  # parameters and momentum, the same size
    assert (
        "parameters donated to a step deleted by it, in every layout: True" in RECORDED["compare"]
    )


def test_tensor_parallelism_on_explicit_axes_asks_for_an_out_sharding():
    assert RECORDED["explicit_tp"].startswith(
        "ShardingTypeError: Contracting dimensions are sharded and it is ambiguous"
    )


def test_every_layout_matches_one_device_loss_and_parameters():
    losses = re.findall(r"(\w[\w ]*): loss ([\d.]+)", RECORDED["compare"])
    one_device, *lines = RECORDED["same_result"].splitlines()
    assert {loss for _, loss in losses} == {one_device.removeprefix("one device: loss ")}
    assert len(lines) == 3 and all(
        line.endswith("vs one device: max relative difference < 1e-5: True") for line in lines
    )
