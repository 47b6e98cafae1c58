"""Tests of jaxpar.memory_plan: the formula's arithmetic and errors (fast), and the formula
against what XLA plans for the same step, compiled for 8 H100s and a TPU v5e-8."""

from __future__ import annotations

import inspect
import json
import math

import jax
import pytest

from jaxpar import (
    LLAMA_3_1_8B,
    LLAMA_3_2_1B,
    Decoder,
    Parallelism,
    Training,
    formula_json,
    plan_memory,
    training_step,
)
from jaxpar import memory_plan as module


def per_device(tree) -> int:
    """The bytes one device holds of a tree of abstract sharded arrays."""
    return sum(
        math.prod(leaf.sharding.shard_shape(leaf.shape) if leaf.sharding else leaf.shape)
        * leaf.dtype.itemsize
        for leaf in jax.tree.leaves(tree)
    )


def test_the_presets_have_the_published_parameter_counts():
    # The exact sums of the shapes: 1.24B and 8.03B, as Hugging Face lists them.
    assert LLAMA_3_2_1B.parameter_count() == 1_235_814_400
    assert LLAMA_3_1_8B.parameter_count() == 8_030_261_248


@pytest.mark.parametrize("decoder", [LLAMA_3_2_1B, LLAMA_3_1_8B], ids=["1B", "8B"])
def test_the_abstract_step_holds_the_formulas_parameters_optimizer_and_batch(decoder):
    layout, training = Parallelism(data=2, fsdp=2, tensor=2), Training(batch=8, microbatches=2)
    _, (params, opt_state, tokens, targets) = training_step(decoder, layout, training)
    plan = plan_memory(decoder, layout, training)
    assert sum(leaf.size for leaf in jax.tree.leaves(params)) == decoder.parameter_count()
    assert per_device(params) == plan.terms["parameters"]
    assert per_device(opt_state) == plan.terms["optimizer"]
    assert per_device((tokens, targets)) == plan.terms["batch_inputs"]
    assert tokens.shape == (2, 4, decoder.seq_len)


def test_terms_add_up_and_scale_as_the_layout_says():
    training = Training(batch=16, remat="full")
    fsdp = plan_memory(LLAMA_3_1_8B, Parallelism(fsdp=8), training, "h100-8")
    data = plan_memory(LLAMA_3_1_8B, Parallelism(data=8), training, "h100-8")
    assert fsdp.total == sum(fsdp.terms.values())
    assert fsdp.memory_bytes == 80 * 2**30 and fsdp.fits and fsdp.headroom > 0
    # FSDP shards parameters, gradients and optimizer state 8 ways; data parallelism does not.
    for term in ("parameters", "gradients"):
        assert 7.9 < data.terms[term] / fsdp.terms[term] < 8
    assert not data.fits and data.headroom < 0
    assert plan_memory(LLAMA_3_1_8B, Parallelism(fsdp=8), training).fits is None


def test_remat_accumulation_and_dtype_change_the_terms_they_should():
    layout, base = Parallelism(fsdp=8), Training(batch=16)
    plain = plan_memory(LLAMA_3_2_1B, layout, base).terms
    remat = plan_memory(LLAMA_3_2_1B, layout, Training(batch=16, remat="full")).terms
    accumulate = plan_memory(LLAMA_3_2_1B, layout, Training(batch=16, microbatches=2)).terms
    wide = plan_memory(LLAMA_3_2_1B, layout, Training(batch=16, compute="float32")).terms
    d, tokens = LLAMA_3_2_1B, 2 * LLAMA_3_2_1B.seq_len  # 2 sequences on each device
    assert remat["activations"] == d.layers * tokens * d.d_model * 2
    assert plain["activations"] > 10 * remat["activations"]
    assert accumulate["activations"] * 2 == plain["activations"]
    assert accumulate["gradients"] == 2 * plain["gradients"]
    assert wide["activations"] == 2 * plain["activations"]
    assert wide["parameters"] == plain["parameters"]


def test_the_evaluator_takes_arithmetic_and_refuses_everything_else():
    assert module.evaluate("ceil(7 / 2) + min(1, 2) - -max(3, 4, 5)", {}) == 10
    assert module.evaluate("head_dim", {"d_model": 2048, "heads": 32}) == 64
    for bad in ("__import__('os')", "a ** 2", "a if a else b", "a.real", "max()", "[1]"):
        with pytest.raises(ValueError, match="allows only|Cannot parse"):
            module.evaluate(bad, {"a": 1, "b": 2})
    with pytest.raises(ValueError, match="'b', which has no value"):
        module.evaluate("a + b", {"a": 1})
    with pytest.raises(ValueError, match="Cannot parse"):
        module.evaluate("a +", {"a": 1})


def test_every_expression_uses_only_inputs_and_names_defined_above_it():
    import ast

    known = set(module.VARIABLES)
    for name, (expression, meaning) in module.FORMULA.items():
        used = {n.id for n in ast.walk(ast.parse(expression)) if isinstance(n, ast.Name)}
        assert used - known <= set(module._FUNCTIONS), (name, used - known)
        assert meaning
        known.add(name)
    assert set(module.TERMS) <= set(module.FORMULA)


def test_the_json_is_the_formula_in_order():
    formula = json.loads(formula_json())
    assert [d["name"] for d in formula["definitions"]] == list(module.FORMULA)
    assert formula["variables"] == module.VARIABLES
    assert formula["terms"] == list(module.TERMS)
    assert formula["tolerance"] == module.TOLERANCE
    # A page's script, evaluating the strings in order, gets the same numbers.
    plan = plan_memory(LLAMA_3_2_1B, Parallelism(fsdp=8), Training(batch=16))
    values = dict(plan.variables)
    for definition in formula["definitions"]:
        values[definition["name"]] = module.evaluate(definition["expression"], values)
    assert round(values["total"]) == plan.total


@pytest.mark.parametrize(
    ("decoder", "layout", "training", "target", "message"),
    [
        (
            LLAMA_3_2_1B,
            Parallelism(fsdp=4),
            Training(batch=8),
            "h100-8",
            "uses 4 devices, but h100-8 has 8",
        ),
        (
            LLAMA_3_2_1B,
            Parallelism(tensor=16),
            Training(batch=8),
            None,
            r"kv_heads \(8\) must be a multiple of tensor \(16\)",
        ),
        (
            LLAMA_3_2_1B,
            Parallelism(data=2, fsdp=4),
            Training(batch=12),
            None,
            r"batch \(12\) must be a multiple of data × fsdp × microbatches \(2 × 4 × 1 = 8\)",
        ),
        (LLAMA_3_2_1B, Parallelism(fsdp=8), Training(batch=8, microbatches=2), None, "= 16"),
        (
            LLAMA_3_2_1B,
            Parallelism(fsdp=3),
            Training(batch=3),
            None,
            r"d_model \(2048\) must be a multiple of fsdp \(3\)",
        ),
        (
            Decoder(1001, 2048, 2, 32, 8, 8192, 128),
            Parallelism(tensor=8),
            Training(batch=1),
            None,
            r"vocab \(1001\) must be a multiple of tensor \(8\); pad it",
        ),
        (
            Decoder(1024, 2048, 2, 30, 6, 8192, 128),
            Parallelism(),
            Training(batch=1),
            None,
            r"d_model \(2048\) must be a multiple of heads \(30\)",
        ),
        (
            Decoder(1024, 2048, 2, 32, 6, 8192, 128),
            Parallelism(),
            Training(batch=1),
            None,
            r"heads \(32\) must be a multiple of kv_heads \(6\)",
        ),
        (
            Decoder(1024, 2048, -2, 32, 8, 8192, 128),
            Parallelism(),
            Training(batch=1),
            None,
            "layers must be a positive integer, got int -2",
        ),
        (
            LLAMA_3_2_1B,
            Parallelism(data=0),
            Training(batch=1),
            None,
            "data must be a positive integer, got int 0",
        ),
        (
            LLAMA_3_2_1B,
            Parallelism(),
            Training(batch=2.0),
            None,
            "batch must be a positive integer, got float 2.0",
        ),
        (
            LLAMA_3_2_1B,
            Parallelism(),
            Training(batch=1, compute="fp16"),
            None,
            "compute must be one of 'bfloat16', 'float32', got str 'fp16'",
        ),
        (
            LLAMA_3_2_1B,
            Parallelism(),
            Training(batch=1, remat="selective"),
            None,
            "remat must be 'none'",
        ),
        (LLAMA_3_2_1B, Parallelism(), Training(batch=1), "tpu-9000", "Unknown target 'tpu-9000'"),
    ],  # fmt: skip
)
def test_bad_input_is_refused_with_a_message_that_names_the_fix(
    decoder, layout, training, target, message
):
    with pytest.raises(ValueError, match=message):
        plan_memory(decoder, layout, training, target)


def test_arguments_of_the_wrong_kind_are_refused():
    with pytest.raises(TypeError, match="layout must be a jaxpar.Parallelism"):
        plan_memory(LLAMA_3_2_1B, (1, 8, 1), Training(batch=8))
    with pytest.raises(ValueError, match="must be a multiple"):
        training_step(LLAMA_3_2_1B, Parallelism(tensor=3), Training(batch=1))
    with pytest.raises(TypeError, match=r"scan_layers must be True .* or False .*got str 'no'"):
        plan_memory(LLAMA_3_2_1B, Parallelism(fsdp=8), Training(batch=8, scan_layers="no"))


def test_unrolled_layers_are_the_same_program_without_its_loop():
    """scan_layers=False asks lax.scan to repeat the layer's code once per layer (unroll =
    the number of layers), which lowers with no loop left, as a Python loop would."""
    unrolls = {}
    for scan in (True, False):
        step, args = training_step(LLAMA_3_2_1B, Parallelism(fsdp=8), Training(8, scan_layers=scan))
        with jax.sharding.use_abstract_mesh(args[0]["embed"].sharding.mesh):
            program = step.trace(*args).jaxpr
        unrolls[scan] = {e.params["unroll"] for e in program.eqns if e.primitive.name == "scan"}
    assert unrolls == {True: {1}, False: {LLAMA_3_2_1B.layers}}


def recorded(kind: str = "cells") -> list[dict]:
    """The recorded grid (``cells``: the page's) or the wider one the tests hold to the same
    tolerances (``checks``)."""
    from sitetools.memory_grid import GRID_FILE

    return json.loads(GRID_FILE.read_text(encoding="utf-8"))[kind]


@pytest.mark.parametrize("kind", ["cells", "checks"])
def test_the_formula_agrees_with_what_xla_planned_within_the_tolerance(kind):
    from sitetools.memory_grid import CELLS, CHECKS

    from jaxpar import TARGETS

    cells = recorded(kind)
    grid = CELLS if kind == "cells" else CHECKS
    assert [(c["model"], c["target"], c["layout"], c["training"]) for c in cells] == grid
    for cell in cells:
        decoder = {"llama-3.2-1b": LLAMA_3_2_1B, "llama-3.1-8b": LLAMA_3_1_8B}[cell["model"]]
        plan = plan_memory(
            decoder, Parallelism(**cell["layout"]), Training(**cell["training"]), cell["target"]
        )
        assert cell["formula"] == {
            "terms": plan.terms, "total": plan.total, "memory_bytes": plan.memory_bytes
        }, cell  # fmt: skip
        xla = cell["xla"]
        if "error" in xla:  # XLA:TPU refused to compile: the formula must agree
            assert "RESOURCE_EXHAUSTED" in xla["error"] and not plan.fits, cell
            continue
        # The arguments are exact: parameters, optimizer state and batch, as the formula
        # counts them (XLA:TPU pads scalars and the step count to its tiles: a few hundred
        # bytes); the donated state is aliased.
        arguments = sum(plan.terms[t] for t in ("parameters", "optimizer", "batch_inputs"))
        assert 0 <= xla["argument_bytes"] - arguments < 4096, cell
        assert xla["alias_bytes"] >= plan.terms["parameters"] + plan.terms["optimizer"] - 4096
        backend = TARGETS[cell["target"]].backend
        assert abs(plan.total / xla["total_bytes"] - 1) <= module.TOLERANCE[backend], cell
        if backend == "XLA:TPU":  # a lower bound there
            assert plan.total < xla["total_bytes"], cell


# XLA's byte counts are a function of the program and the compiler: the grid records a hash
# of both (sitetools.memory_grid.program, a second to make), and the cell is compiled again
# for XLA:TPU (35 s) only where it changed, as after an update of jax or libtpu. XLA:GPU's
# live compile of cell 1 (10 s) is the example of jaxpar.fits, which tests/test_examples.py
# runs: the next test ties its output to cell 1.
# Cell 5 of the page's grid (scanned layers) and the two unrolled steps of "Scan over
# layers", for XLA:TPU and XLA:GPU.
@pytest.mark.parametrize("kind, index", [("cells", 5), ("layers", 1), ("layers", 3)])
def test_recorded_xla_numbers_are_what_xla_plans_today(kind, index):
    from sitetools.memory_grid import program, xla_cell

    cell = recorded(kind)[index]
    inputs = cell["model"], cell["target"], cell["layout"], cell["training"]
    if program(*inputs) == cell["program"]:
        return  # the very program and compiler that gave the recorded numbers
    fresh = xla_cell(*inputs, gathers="all_gather_runs" in cell["xla"])
    assert fresh == cell["xla"], "re-record with PYTHONPATH=tools python -m sitetools.memory_grid"


def test_every_recorded_cell_names_the_program_its_numbers_came_from():
    from sitetools.memory_grid import SECTIONS

    for kind, cells in SECTIONS.items():
        found = [(c["model"], c["target"], c["layout"], c["training"]) for c in recorded(kind)]
        assert found == cells, f"the grid's {kind} changed: re-record (sitetools.memory_grid)"
        assert all(len(c["program"]) == 64 for c in recorded(kind))


def test_the_scanned_steps_of_the_layers_section_are_cells_of_the_grid():
    """The same program compiles to the same plan: "Scan over layers" and the grid agree."""
    cells, layers = recorded(), recorded("layers")
    for scanned, cell in ((layers[0], cells[1]), (layers[2], cells[5])):
        assert scanned["program"] == cell["program"]
        assert {k: v for k, v in scanned["xla"].items() if k in cell["xla"]} == cell["xla"]


def test_the_fits_example_compiles_what_the_grid_recorded():
    example = inspect.getdoc(module.fits)
    cell = recorded()[1]
    assert (cell["model"], cell["target"]) == ("llama-3.2-1b", "h100-8")
    assert (cell["layout"], cell["training"]) == ({"fsdp": 8}, {"batch": 16, "remat": "full"})
    assert 'Parallelism(fsdp=8), Training(batch=16, remat="full")' in example
    assert f"{cell['xla']['total_bytes'] / 2**30:.2f} GiB of 80.00 GiB" in example


def test_recording_an_unknown_section_names_the_sections_there_are(capsys):
    from sitetools.memory_grid import main

    assert main(["cell"]) == 2
    assert (
        "unknown sections ['cell']; the grid has cells, checks, layers" in capsys.readouterr().err
    )


def test_gather_schedule_counts_a_gather_finished_in_a_loop_and_what_the_loop_keeps_alive():
    from sitetools.memory_grid import gather_schedule

    hlo = """
%body {
  %param = (bf16[32,8]{1,0}, bf16[4,8]{1,0}) parameter(0)
  %previous = bf16[32,8]{1,0} get-tuple-element(%param), index=0
  %done = bf16[32,8]{1,0} all-gather-done(%previous)
  %w = bf16[4,8]{1,0} get-tuple-element(%param), index=1
  %gathered = bf16[64,8]{1,0} all-gather(%w), dimensions={0}
  ROOT %next = (bf16[32,8]{1,0}, bf16[4,8]{1,0}) tuple(%done, %w)
}

ENTRY %main {
  %x = bf16[4,8]{1,0} parameter(0)
  %start = bf16[32,8]{1,0} all-gather-start(%x), dimensions={0}
  %init = (bf16[32,8]{1,0}, bf16[4,8]{1,0}) tuple(%start, %x)
  %loop = (bf16[32,8]{1,0}, bf16[4,8]{1,0}) while(%init), condition=%cond, body=%body
  ROOT %out = bf16[32,8]{1,0} get-tuple-element(%loop), index=0
}
"""
    # The done in the body finishes a gather the entry started; inside the loop, its 512
    # bytes and the body's own 1,024-byte gather are alive together.
    assert gather_schedule(hlo) == {
        "all_gathers_paired": 0,
        "all_gathers_split": 1,
        "gathered_bytes_alive": 1536,
    }
