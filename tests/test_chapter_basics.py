"""The JAX basics chapter's claims, checked against the recorded outputs of its snippets.

The two MLP pages each state the accuracy their model reaches on the held-out split by
including the recorded line that prints it; these tests keep that number at 95 % or more,
keep the pages including that line, and check the other facts the pages' prose relies on.
"""

from __future__ import annotations

import re

import pytest
from sitetools import REPO
from sitetools.includes import find_includes
from sitetools.snippets import read_sections

MINIMUM_ACCURACY = 95.0
ACCURACY_LINE = re.compile(r"^held-out accuracy: (?P<percent>\d+\.\d)%$", re.MULTILINE)
# page -> (snippet, the cell whose recorded output prints the held-out accuracy)
MLP_PAGES = {
    "basics/mlp-pure-jax.md": ("mlp_pure_jax", "evaluate"),
    "basics/mlp-flax-nnx.md": ("mlp_flax_nnx", "evaluate"),
}


def recorded(snippet: str) -> dict[str, str]:
    return read_sections((REPO / "snippets" / "basics" / f"{snippet}.out").read_text("utf-8"))


def held_out_accuracy(snippet: str, cell: str) -> float:
    output = recorded(snippet)[cell]
    found = ACCURACY_LINE.findall(output)
    assert len(found) == 1, f"expected one 'held-out accuracy: NN.N%' line in {snippet}.out:{cell}"
    return float(found[0])


@pytest.mark.parametrize(("snippet", "cell"), MLP_PAGES.values(), ids=list(MLP_PAGES))
def test_mlp_reaches_95_percent_on_the_held_out_split(snippet: str, cell: str):
    accuracy = held_out_accuracy(snippet, cell)
    assert accuracy >= MINIMUM_ACCURACY, (
        f"{snippet} reaches {accuracy}% on the held-out split; the page promises at least "
        f"{MINIMUM_ACCURACY}%"
    )


@pytest.mark.parametrize(("page", "target"), MLP_PAGES.items(), ids=list(MLP_PAGES))
def test_mlp_page_shows_its_held_out_accuracy(page: str, target: tuple[str, str]):
    snippet, cell = target
    markdown = (REPO / "docs" / "en" / page).read_text(encoding="utf-8")
    shown = {str(include) for include in find_includes(markdown)}
    assert f"snippets/basics/{snippet}.out:{cell}" in shown, (
        f"docs/en/{page} must include the recorded line that prints the held-out accuracy: "
        f'--8<-- "snippets/basics/{snippet}.out:{cell}"'
    )


def test_derivatives_and_retraces_are_as_the_page_says():
    out = recorded("jax_in_one_page")
    assert "f'(2) = 14.0, f''(2) = 12.0, f'''(2) = 6.0" in out["grad"]
    assert out["immutable"].startswith("TypeError: JAX arrays are immutable")
    # Calls 1, 3, 4 and 5 trace; call 2 (same shapes and dtypes) does not.
    traces = [line for line in out["jit_trace"].splitlines() if "tracing" in line]
    assert len(traces) == 4
    assert out["jit_trace"].splitlines()[1:3] == ["1: 6.0", "2: 15.0"]
    assert out["jit_static"].count("tracing with n") == 2
    # The Python print runs once (while tracing); jax.debug.print on every call.
    assert out["debug_print"].count("print: JitTracer") == 1
    assert out["debug_print"].count("jax.debug.print:") == 2
    first, second, *_ = out["random"].splitlines()
    assert first == second, "the same key must give the same numbers"


def test_plain_jax_jit_step_loses_the_optimizer_state_and_the_fixes_keep_it():
    out = recorded("nnx_pitfalls")
    assert "Missing required argument `wrt`" in out["without_wrt"]
    rows = {
        line[:23].strip(): line[23:]
        for line in out["compare"].splitlines()
        if "optimizer step" in line
    }
    assert rows["jax.jit, model only"] == rows["before training"]
    assert "optimizer step 0 " in rows["jax.jit, model only"]
    assert "optimizer step 5 " in rows["jax.jit, both returned"]
    assert rows["jax.jit, both returned"] == rows["nnx.jit"]
