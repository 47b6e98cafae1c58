"""Inline examples: every ```python block of every page and of jaxpar's docstrings.

Each is linted with ruff and run, and what it prints must match its ``#>`` lines.
Blocks that only include a snippet file (``--8<--``) are not examples: the snippet tests
run those files. Fix a changed ``#>`` line with ``pytest tests/test_examples.py --update-examples``.
"""

from __future__ import annotations

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples
from sitetools import REPO
from sitetools.includes import INCLUDE_LINE


def is_include(example: CodeExample) -> bool:
    lines = [line for line in example.source.splitlines() if line.strip()]
    return bool(lines) and all(INCLUDE_LINE.match(line) for line in lines)


EXAMPLES = [
    example
    for example in find_examples(str(REPO / "docs"), str(REPO / "src" / "jaxpar"))
    if not is_include(example)
]


def test_examples_exist():
    assert EXAMPLES, "no inline examples found in docs/ or src/jaxpar/"


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example(example: CodeExample, eval_example: EvalExample):
    eval_example.set_config(
        line_length=100, ruff_select=["E4", "E7", "E9", "F", "W", "I", "UP", "B"]
    )
    if eval_example.update_examples:
        eval_example.format(example)
        eval_example.run_print_update(example)
    else:
        eval_example.lint(example)
        eval_example.run_print_check(example)
