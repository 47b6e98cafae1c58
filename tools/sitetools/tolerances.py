"""Comparing a snippet's output with its recording, exactly or within a declared tolerance.

Most recorded output must come back character for character. A few numbers cannot: XLA:CPU
picks its bfloat16 kernels by CPU (AVX512-BF16, AMX, ...), so a bf16 loss can end in 3 on
one x86-64 machine and in 4 on another, deterministically on each. A snippet declares such
cells in a line of its own, with the reason, which the page repeats to its readers::

    # numbers within 2e-4 in cells curves, same_losses: bfloat16 sums differ between CPUs

In those cells each number may differ from the recorded one by at most the tolerance; the
text around the numbers, and how many numbers there are, must still match exactly. Every
other cell must match exactly.

>>> declared = {"curves": 2e-4}
>>> recorded = "# --8<-- [start:curves]\\nloss 3.8984\\n# --8<-- [end:curves]\\n"
>>> differences(recorded, recorded.replace("3.8984", "3.8983"), declared)
[]
>>> differences(recorded, recorded.replace("3.8984", "3.8990"), declared)
["cell 'curves': 3.8990 is not within 0.0002 of the recorded 3.8984"]
"""

from __future__ import annotations

import re
from pathlib import Path

TOLERANCE_MARKER = re.compile(r"^# numbers within .*$", re.MULTILINE)
TOLERANCE_LINE = re.compile(
    r"# numbers within (?P<tolerance>\S+) in cells? (?P<cells>[^:]+): (?P<why>\S.*)"
)
TOLERANCE_EXAMPLE = "# numbers within 2e-4 in cells curves, same_losses: <why>"
# A number as a snippet prints one: an optional sign, digits, an optional fraction and
# exponent, not part of a name (bf16, x6). Thousands separators split a number into parts,
# each compared on its own.
NUMBER = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


class ToleranceError(ValueError):
    """A ``# numbers within`` line that cannot be applied."""


def declared_tolerances(snippet: Path, cell_names: list[str]) -> dict[str, float]:
    """Cell name -> the absolute tolerance its ``# numbers within`` line declares.

    Raises ``ToleranceError`` naming the line for a tolerance that is not a positive number
    or a cell the snippet does not have.
    """
    tolerances: dict[str, float] = {}
    for marker in TOLERANCE_MARKER.finditer(snippet.read_text(encoding="utf-8")):
        line = f"{snippet.name}: {marker[0]!r}"
        match = TOLERANCE_LINE.fullmatch(marker[0])
        if match is None:
            raise ToleranceError(f"{line} is not of the form {TOLERANCE_EXAMPLE!r}")
        try:
            tolerance = float(match["tolerance"])
        except ValueError:
            tolerance = -1.0
        if not tolerance > 0:
            raise ToleranceError(
                f"{line}: the tolerance {match['tolerance']!r} is not a positive number; "
                f"write one such as 2e-4"
            )
        for cell in (name.strip() for name in match["cells"].split(",")):
            if cell not in cell_names:
                raise ToleranceError(
                    f"{line}: the snippet has no cell {cell!r}; its cells are "
                    f"{', '.join(cell_names)}"
                )
            tolerances[cell] = tolerance
    return tolerances


def differences(recorded: str, actual: str, tolerances: dict[str, float]) -> list[str]:
    """What makes ``actual`` disagree with ``recorded``: empty when every cell without a
    tolerance is identical and every cell with one differs only in numbers within it."""
    if not tolerances or recorded == actual:
        return [] if recorded == actual else ["the output differs"]
    from sitetools.snippets import read_sections  # which imports this module

    found: list[str] = []
    recorded_cells, actual_cells = read_sections(recorded), read_sections(actual)
    if list(recorded_cells) != list(actual_cells):
        return ["the output has other cells than the recording"]
    for name, expected in recorded_cells.items():
        got = actual_cells[name]
        if name in tolerances:
            found += _numbers_apart(name, expected, got, tolerances[name])
        elif expected != got:
            found.append(f"cell {name!r} differs, and has no tolerance")
    return found


def _numbers_apart(cell: str, expected: str, got: str, tolerance: float) -> list[str]:
    expected_lines, got_lines = expected.splitlines(), got.splitlines()
    if len(expected_lines) != len(got_lines):
        return [
            f"cell {cell!r} prints {len(got_lines)} lines, not the recorded {len(expected_lines)}"
        ]
    found = []
    for want_line, have_line in zip(expected_lines, got_lines, strict=True):
        want, have = NUMBER.split(want_line), NUMBER.split(have_line)
        # NUMBER.split alternates text (even places) and numbers (odd places).
        if len(want) != len(have) or want[::2] != have[::2]:
            found.append(
                f"cell {cell!r}: the line {have_line!r} differs from the recorded "
                f"{want_line!r} in more than its numbers"
            )
            continue
        found += [
            f"cell {cell!r}: {number} is not within {tolerance:g} of the recorded {recorded}"
            for recorded, number in zip(want[1::2], have[1::2], strict=True)
            if not abs(float(recorded) - float(number)) <= tolerance
        ]
    return found
