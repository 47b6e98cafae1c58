"""Recorded outputs that hold on any CPU: a snippet's declared tolerances, and nothing more."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from sitetools.snippets import section, tolerances
from sitetools.tolerances import ToleranceError, differences

RECORDED = section("curves", "bf16 losses 4.3691 4.1069 3.8984\nfp32 1,389,060 B\n") + section(
    "layouts", "float32 loss 3.8106\n"
)


def test_identical_output_needs_no_tolerance():
    assert differences(RECORDED, RECORDED, {}) == []
    assert differences(RECORDED, RECORDED.replace("3.8106", "3.8107"), {}) != []


@pytest.mark.parametrize(
    "change, expected",
    [
        (("3.8984", "3.8983"), []),  # another CPU's last bf16 digit
        (("3.8984", "3.8986"), []),  # as far as the tolerance goes
        (
            ("3.8984", "3.8987"),
            ["cell 'curves': 3.8987 is not within 0.0002 of the recorded 3.8984"],
        ),
        (
            ("bf16 losses", "bf16 loss"),
            [
                "cell 'curves': the line 'bf16 loss 4.3691 4.1069 3.8984' differs from the "
                "recorded 'bf16 losses 4.3691 4.1069 3.8984' in more than its numbers"
            ],
        ),
        (
            ("3.8984", "3.8984 3.7"),
            [
                "cell 'curves': the line 'bf16 losses 4.3691 4.1069 3.8984 3.7' differs from "
                "the recorded 'bf16 losses 4.3691 4.1069 3.8984' in more than its numbers"
            ],
        ),
        (("3.8106", "3.8107"), ["cell 'layouts' differs, and has no tolerance"]),
    ],
)
def test_only_the_declared_cells_may_move_and_only_their_numbers(change, expected):
    old, new = change
    assert differences(RECORDED, RECORDED.replace(old, new), {"curves": 2e-4}) == expected


def test_an_integer_in_a_tolerant_cell_must_still_match():
    changed = RECORDED.replace("1,389,060", "1,389,061")
    assert differences(RECORDED, changed, {"curves": 2e-4}) == [
        "cell 'curves': 061 is not within 0.0002 of the recorded 060"
    ]


def test_a_lost_or_added_line_is_a_difference():
    changed = RECORDED.replace("3.8984\n", "3.8984\nmore\n")
    assert differences(RECORDED, changed, {"curves": 2e-4}) == [
        "cell 'curves' prints 3 lines, not the recorded 2"
    ]


def test_a_lost_or_added_cell_is_a_difference():
    assert differences(RECORDED, section("curves", "x\n"), {"curves": 1.0}) == [
        "the output has other cells than the recording"
    ]


def write(tmp_path: Path, marker: str) -> Path:
    path = tmp_path / "example.py"
    source = f'''\
        """Doc."""
        {marker}
        # %% curves
        print(1)
        # %% layouts
        print(2)
    '''
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def test_a_snippet_declares_tolerances_for_named_cells(tmp_path):
    marker = "# numbers within 2e-4 in cells curves, layouts: bf16 kernels differ between CPUs"
    assert tolerances(write(tmp_path, marker)) == {"curves": 2e-4, "layouts": 2e-4}
    one = "# numbers within 0.01 in cell curves: bf16"
    assert tolerances(write(tmp_path, one)) == {"curves": 0.01}
    assert tolerances(write(tmp_path, "# no tolerance")) == {}


@pytest.mark.parametrize(
    "marker, message",
    [
        (
            "# numbers within 2e-4 for the losses",
            "is not of the form '# numbers within 2e-4 in cells curves, same_losses: <why>'",
        ),
        (
            "# numbers within a-bit in cells curves: bf16",
            "the tolerance 'a-bit' is not a positive number; write one such as 2e-4",
        ),
        (
            "# numbers within 0 in cells curves: bf16",
            "the tolerance '0' is not a positive number",
        ),
        (
            "# numbers within 2e-4 in cells curve: bf16",
            "the snippet has no cell 'curve'; its cells are preamble, curves, layouts",
        ),
    ],
)
def test_a_bad_tolerance_line_is_refused_with_what_to_write(tmp_path, marker, message):
    with pytest.raises(ToleranceError, match=message) as error:
        tolerances(write(tmp_path, marker))
    assert "example.py" in str(error.value) and marker in str(error.value)
