"""The claims of "Meshes across hosts", read from across_hosts.out (XLA:GPU, 2 hosts of 8
H100s) and across_slices.out (XLA:TPU, 2 v5e-8 slices), which the snippet test compiles
again and compares."""

from __future__ import annotations

import re

from sitetools import REPO
from sitetools.snippets import read_sections

GPU = read_sections((REPO / "snippets/cluster/across_hosts.out").read_text("utf-8"))
TPU = read_sections((REPO / "snippets/cluster/across_slices.out").read_text("utf-8"))
PAGE = (REPO / "docs/en/cluster/meshes-across-hosts.md").read_text("utf-8")


def gpu_lines(text: str) -> list[tuple[str, str, str, int, float]]:
    """(kind, element type, axes, hosts, MB sent) of each collective line."""
    return [
        (kind, dtype, axes, int(hosts), float(sent))
        for kind, dtype, axes, hosts, sent in re.findall(
            r"^  (\S+) +(\S+) +along (\S+) +(\d) hosts? +sends +([\d.]+) MB$", text, re.M
        )
    ]


def totals(text: str) -> list[tuple[float, float]]:
    """(MB sent in all, MB across hosts or over DCN) of each layout, in order."""
    return [
        (float(a), float(b))
        for a, b in re.findall(r"sends ([\d.]+) MB, ([\d.]+) MB (?:across hosts|over DCN)", text)
    ]


def test_devices_say_their_host_and_slice():
    assert "process_index: [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]" in GPU["devices"]
    # XLA:GPU's "2x1x8": a partition (NVLink domain) per host, the first of each coords;
    # compile-only GPUs report no partition, so slice_index is 0 for all
    assert "coords[0]:     [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]" in GPU["devices"]
    assert "slice_index:   [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]" in GPU["devices"]
    assert "slice_index:   [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]" in TPU["devices"]
    assert "XLA:GPU" in GPU["devices"] and "XLA:TPU" in TPU["devices"]


def test_the_hybrid_mesh_puts_hosts_first_and_make_mesh_fails_on_two_slices():
    assert (
        "by slice_index: Number of slices 1 must equal the product of dcn_mesh_shape (2, 1)"
        in GPU["meshes"]
    )
    hosts = "by process, hosts of ('replica', 'fsdp'):\n[[0 0 0 0 0 0 0 0]\n [1 1 1 1 1 1 1 1]]"
    assert hosts in GPU["meshes"]
    assert "make_mesh" not in GPU["meshes"]
    assert "hosts along fsdp:    [0 0 0 0 1 1 1 1]" in GPU["meshes"]
    assert "hosts along replica: [0 0]" in GPU["meshes"]
    assert "jax.make_mesh fails: AssertionError" in TPU["meshes"]
    assert "[[0 0 0 0 0 0 0 0]\n [1 1 1 1 1 1 1 1]]" in TPU["meshes"]


def test_hsdp_on_gpus_crosses_hosts_only_with_the_gradient_shards():
    lines = gpu_lines(GPU["hsdp"])
    crossing = [line for line in lines if line[3] == 2]
    assert crossing == [
        ("all-reduce", "bf16", "replica", 2, 2.1),  # the gradient shards
        ("all-reduce", "f32", "replica,fsdp", 2, 0.0),  # the loss
    ]
    assert all(line[2] == "fsdp" for line in lines if line[3] == 1)
    assert totals(GPU["hsdp"]) == [(31.8, 2.1)]


def test_the_wrong_orders_send_almost_everything_across_hosts():
    swapped, everywhere = GPU["wrong"].split("FSDP over all 16 GPUs")
    assert [line for line in gpu_lines(swapped) if line[3] == 1] == [
        ("all-reduce", "bf16", "replica", 1, 2.1)
    ]
    assert all(line[3] == 2 for line in gpu_lines(everywhere))
    assert totals(GPU["wrong"]) == [(32.2, 30.1), (32.1, 32.1)]


def test_xla_tpu_splits_collectives_over_slices_into_ici_and_dcn():
    hsdp = TPU["hsdp"]
    assert "along fsdp    2 slice" not in hsdp  # every ICI collective stays in a slice
    assert re.findall(r"send +bf16 +DCN part of an all-reduce +sends +([\d.]+) MB", hsdp) == [
        "1.0",
        "1.0",
    ]
    assert totals(hsdp) == [(31.8, 2.1)]
    assert "over DCN in 3 transfers" in hsdp
    wrong = TPU["wrong"]
    assert re.findall(r"send +bf16 +DCN part of an all-gather +sends +0\.5 MB", wrong)
    assert len(re.findall(r"all-gather +bf16 +along fsdp +1 slice +sends +7\.3 MB", wrong)) == 4
    assert len(re.findall(r"all-gather +bf16 +along fsdp +1 slice +sends +7\.3 MB", hsdp)) == 2
    assert totals(wrong) == [(47.8, 3.3)]
    assert "over DCN in 7 transfers" in wrong


def test_the_page_states_the_recorded_numbers():
    for claim in [
        "2.1 MB are sent in a collective that\nspans the hosts",
        "30.1 MB of 32.2 MB",
        "every collective spans the hosts: 32.1 MB of 32.1 MB",
        '`"2x1x8"`, is 2\npartitions of 1 host of 8 GPUs',
        "DCN carries 3.3 MB per\nchip in 7 transfers, against 2.1 MB in 3 for HSDP",
        "47.8 MB per step in all, 3.3 MB of it\n  over DCN, against 31.8 MB under HSDP",
    ]:
        assert claim in PAGE, claim


def test_every_megabyte_the_page_states_is_recorded():
    recorded = "\n".join([*GPU.values(), *TPU.values()])
    prose = re.sub(r"```.*?```", "", PAGE, flags=re.S)
    stated = set(re.findall(r"\b(\d+\.\d) ?MB\b", prose))
    assert stated and not sorted(n for n in stated if f"{n} MB" not in recorded)


def test_the_page_includes_every_recorded_section_and_links_both_scripts():
    for name, sections in (("across_hosts", GPU), ("across_slices", TPU)):
        for section in sections:
            if section != "setup":
                assert f'snippets/cluster/{name}.out:{section}"' in PAGE, (name, section)
        assert f"../notebooks/cluster/{name}.ipynb" in PAGE
