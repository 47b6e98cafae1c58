"""Inline examples: every ```python block of every page and of jaxpar's docstrings.

Each is linted with ruff and run, and what it prints must match its ``#>`` lines.
Blocks that only include a snippet file (``--8<--``) are not examples: the snippet tests
run those files. A block marked ```` ```{.python .own-process} ```` must set the
environment before JAX starts: it runs as a script of its own, with the XLA compilers
that ``make`` installs on its path (see ``jaxpar.targets``). Fix a changed ``#>`` line with ``pytest tests/test_examples.py --update-examples``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples
from sitetools import REPO
from sitetools.includes import INCLUDE_LINE


def is_include(example: CodeExample) -> bool:
    lines = [line for line in example.source.splitlines() if line.strip()]
    return bool(lines) and all(INCLUDE_LINE.match(line) for line in lines)


ALL_EXAMPLES = [
    example
    for example in find_examples(str(REPO / "docs"), str(REPO / "src" / "jaxpar"))
    if not is_include(example)
]
EXAMPLES = [e for e in ALL_EXAMPLES if "own-process" not in e.prefix_tags()]
OWN_PROCESS = [e for e in ALL_EXAMPLES if "own-process" in e.prefix_tags()]


def test_examples_exist():
    assert EXAMPLES, "no inline examples found in docs/ or src/jaxpar/"


def configure(eval_example: EvalExample) -> None:
    eval_example.set_config(
        line_length=100, ruff_select=["E4", "E7", "E9", "F", "W", "I", "UP", "B"]
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=str)
def test_example(example: CodeExample, eval_example: EvalExample):
    configure(eval_example)
    if eval_example.update_examples:
        eval_example.format(example)
        eval_example.run_print_update(example)
    else:
        eval_example.lint(example)
        eval_example.run_print_check(example)


@pytest.mark.parametrize("example", OWN_PROCESS, ids=str)
def test_example_in_its_own_process(example: CodeExample, eval_example: EvalExample, tmp_path):
    """Run as a script, in a folder holding the H100's description (h100_sxm.txtpb, as in
    XLA's source tree), with the compilers importable; its output must be its #> lines."""
    from jaxpar import targets

    configure(eval_example)
    eval_example.lint(example)
    description = targets._gpu_specs()["NVIDIA H100 80GB HBM3"]
    (tmp_path / "h100_sxm.txtpb").write_text(description, encoding="utf-8")
    compilers = targets._compilers_folders()
    run = subprocess.run(
        [sys.executable, "-c", example.source],
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": ":".join(map(str, compilers)),
            # other test workers may hold libtpu: let this process load it too
            "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    expected = [
        line.strip().removeprefix("#>").strip()
        for line in example.source.splitlines()
        if line.strip().startswith("#>")
    ]
    assert run.stdout.splitlines() == expected
