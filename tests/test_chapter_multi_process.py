"""The multi-process chapter's claim: 2 processes x 4 devices train exactly as 8 devices in one."""

from __future__ import annotations

import re

from sitetools import REPO


def printed(path: str, label: str) -> str:
    text = (REPO / "snippets" / path).read_text(encoding="utf-8")
    return re.search(rf"{label} ([\d.]+)", text)[1]


def test_two_processes_reach_the_parameters_of_one_process_with_eight_devices():
    one = "data_parallel/mlp_data_parallel.out"
    two = "multi_process/mlp_two_processes.out"
    assert printed(two, "parameter fingerprint") == printed(one, "parameter fingerprint")
    assert printed(two, "test accuracy") == printed(
        one, "jit \\+ NamedSharding: loss [\\d.]+, test accuracy"
    )
