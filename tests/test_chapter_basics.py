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
    assert out["device_put"].startswith("8 devices; the default is cpu:0")
    assert "lives on cpu:7" in out["device_put"]
    # The Python print runs once (while tracing); jax.debug.print on every call.
    assert out["debug_print"].count("print: JitTracer") == 1
    assert out["debug_print"].count("jax.debug.print:") == 2
    first, second, *_ = out["random"].splitlines()
    assert first == second, "the same key must give the same numbers"


def test_donation_aliases_the_argument_and_deletes_it():
    out = recorded("jax_in_one_page")["donation"].splitlines()
    sizes = re.compile(r"argument ([\d,]+) B, output ([\d,]+) B, aliased ([\d,]+) B$")
    plain, donated = (sizes.search(line).groups() for line in out[:2])
    # The page: without donation nothing is aliased; with it, the whole 4,000,000-byte output.
    assert plain == ("4,000,000", "4,000,000", "0")
    assert donated == ("4,000,000", "4,000,000", "4,000,000")
    assert out[0].startswith("jax.jit(f) ") and out[1].startswith("jax.jit(f, donate_argnums=0)")
    assert out[2] == "x deleted: True"
    assert out[3].startswith("RuntimeError: Array has been deleted")


def test_cache_key_calls_trace_and_compile_as_the_page_says():
    lines = recorded("jax_in_one_page")["cache_key"].splitlines()
    # What each numbered call printed before its result line "N: ...".
    events: dict[int, list[str]] = {}
    pending: list[str] = []
    for line in lines:
        if re.match(r"^\d: ", line):
            events[int(line[0])] = pending
            pending = []
        else:
            pending.append(line.split()[0])
    assert events == {
        1: ["tracing", "compiling"],  # first call
        2: [],  # same types: the cached program
        3: ["compiling"],  # committed to another device: compiled, not traced
        4: ["cache", "tracing", "compiling"],  # Explicit sharding: a new type, explained
        5: ["cache", "tracing", "compiling"],  # a tuple instead of a list, explained
        6: ["cache", "tracing", "compiling"],  # the same arrays under jax.set_mesh
        7: ["cache", "tracing", "compiling"],  # the same arrays with jax_enable_x64
    }
    text = "\n".join(lines)
    assert "JitTracer(float32[8@data])" in text
    assert "now f32[8@data]" in text
    assert "now <class 'tuple'> and before <class 'list'>" in text
    assert "cache miss: abstract_mesh_context_manager differs: now AbstractMesh('data'" in text
    assert "cache miss: jax_enable_x64 differs: now True and before False" in text


@pytest.mark.parametrize(
    ("snippet", "donation"),
    [
        ("mlp_pure_jax", '@jax.jit(donate_argnames="params")'),
        ("mlp_flax_nnx", '@nnx.jit(donate_argnames=("model", "optimizer"))'),
    ],
)
def test_mlp_train_steps_donate_and_shuffle_on_the_host(snippet: str, donation: str):
    source = (REPO / "snippets" / "basics" / f"{snippet}.py").read_text(encoding="utf-8")
    assert donation in source, f"the pages say {snippet}'s train step donates: {donation}"
    assert "np.random.default_rng(seed).permutation" in source
    assert "jax.random.permutation" not in source
    assert not re.search(r"\bnp\.mean\(", source), "no np.mean over a list of device scalars"
    assert source.count("jax.device_get(") == 1, "losses are fetched once, after training"


def test_flax_loop_counts_every_update():
    rows = [line for line in recorded("mlp_flax_nnx")["train"].splitlines() if "step" in line]
    assert rows[-1].startswith("epoch 15  step 330  lr 0.00010")


def test_nnx_jit_donation_deletes_arrays_taken_out_before_the_step():
    """mlp-flax-nnx.md: the objects stay usable; an array read out of them before the
    step is deleted by it (hence the loop's jnp.copy of optimizer.step)."""
    out = recorded("nnx_pitfalls")["donation"].splitlines()
    assert out == [
        "taken out before the step, deleted: True True",
        "read from the objects after it, deleted: False False",
    ]


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
