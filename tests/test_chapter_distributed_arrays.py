"""The distributed-arrays chapter's claims: collectives per layout and bytes per device."""

from __future__ import annotations

import re

from sitetools import REPO
from sitetools.snippets import read_sections


def recorded(name: str) -> dict[str, str]:
    return read_sections(
        (REPO / "snippets" / "distributed_arrays" / f"{name}.out").read_text(encoding="utf-8")
    )


MATMUL = recorded("sharded_matmul")


def layout_lines(section: str) -> dict[str, tuple[str, str, list[int]]]:
    """Layout name -> (result type, collectives, bytes of A, B, C on device 0)."""
    found = {}
    lines = [
        line for line in MATMUL[section].splitlines() if not line.startswith(("│", "├", "┌", "└"))
    ]
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
    results = layout_lines("out_sharding")
    assert all(collectives == "all-reduce" for _, collectives, _ in results.values())
    assert results["out_sharding=P('y', None)"][2][2] * 4 == results["out_sharding=P()"][2][2]


def test_reshard_gathers_and_constraint_reduces():
    assert "collectives: all-gather" in MATMUL["reshard"]
    assert "collectives: all-reduce" in MATMUL["constraint"]


def test_vmap_over_sharded_rows_keeps_the_sharding_without_communication():
    vmap = recorded("vmap_sharded")
    assert "dots: float32[8@batch]" in vmap["vmap"]
    assert "collectives in the compiled program: none" in vmap["hlo"]


def test_old_names_are_gone():
    gone = recorded("old_names")["gone"].splitlines()
    assert gone and all(line.endswith("exists: False") for line in gone)
