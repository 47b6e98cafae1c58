"""Record the memory planner's real-size grid: Llama 3.2 1B and Llama 3.1 8B, trained on
8 H100s, 2 × 8 H100s and a TPU v5e-8 in several layouts, each cell's formula
(``jaxpar.plan_memory``) beside what XLA plans for the very step (``jaxpar.fits``).

    PYTHONPATH=tools .venv/bin/python -m sitetools.memory_grid [cells|checks|layers ...]

writes ``snippets/training_step/memory_grid.json``, which the page "Will it fit?" shows and
``tests/test_memory_plan.py`` re-checks (the formula in every cell, XLA in one: the
compilers' byte counts are deterministic). Compile times go to the terminal only.

Each cell also records its ``program``: a hash of what decides XLA's numbers, the step as
lowered (StableHLO, a second to make) and the versions of jax, jaxlib and the target's
compiler. The test compiles its cell again (35 s for XLA:TPU) only when that hash changed.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import functools  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

from sitetools import REPO  # noqa: E402

GRID_FILE = REPO / "snippets" / "training_step" / "memory_grid.json"
# In HLO text: the entry computation, a while loop's body, an instruction's operand list
# (the parentheses after its opcode) and the names in it.
_ENTRY = re.compile(r"^ENTRY %?([\w.-]+)", re.MULTILINE)
_WHILE_BODY = re.compile(r"\bbody=%?([\w.-]+)")
_TUPLE_INDEX = re.compile(r"\bindex=(\d+)")
_OPERANDS = re.compile(r"[\w-]+\((.*?)\)(?:,|$)")
_NAME = re.compile(r"%([\w.-]+)")

# (model, target, layout, training): sizes as jaxpar.Parallelism and jaxpar.Training take them.
CELLS: list[tuple[str, str, dict[str, int], dict[str, Any]]] = [
    ("llama-3.2-1b", "h100-8", {"fsdp": 8}, {"batch": 16, "remat": "none"}),
    ("llama-3.2-1b", "h100-8", {"fsdp": 8}, {"batch": 16, "remat": "full"}),
    ("llama-3.2-1b", "h100-8", {"data": 8}, {"batch": 16, "remat": "full"}),
    ("llama-3.2-1b", "h100-8", {"fsdp": 2, "tensor": 4}, {"batch": 4, "remat": "none"}),
    ("llama-3.2-1b", "h100-8", {"fsdp": 8}, {"batch": 32, "microbatches": 2, "remat": "full"}),
    ("llama-3.2-1b", "v5e-8", {"fsdp": 8}, {"batch": 16, "remat": "full"}),
    ("llama-3.2-1b", "h100-16", {"fsdp": 16}, {"batch": 32, "remat": "full"}),
    ("llama-3.1-8b", "h100-8", {"fsdp": 8}, {"batch": 16, "remat": "full"}),
    ("llama-3.1-8b", "h100-8", {"fsdp": 8}, {"batch": 8, "remat": "none"}),
    ("llama-3.1-8b", "h100-8", {"fsdp": 2, "tensor": 4}, {"batch": 8, "remat": "full"}),
    ("llama-3.1-8b", "h100-16", {"data": 2, "fsdp": 8}, {"batch": 32, "remat": "full"}),
    ("llama-3.1-8b", "v5e-8", {"fsdp": 8}, {"batch": 8, "remat": "full"}),
    ("llama-3.2-1b", "h100-8", {"tensor": 8}, {"batch": 4, "remat": "none"}),
    ("llama-3.2-1b", "h100-8", {"fsdp": 8}, {"batch": 16, "compute": "float32", "remat": "full"}),
]
"""The grid: each cell a model, a target, a layout and the training settings."""

CHECKS: list[tuple[str, str, dict[str, int], dict[str, Any]]] = [
    ("llama-3.2-1b", "h100-8", {"data": 8}, {"batch": 8, "remat": "none"}),
    ("llama-3.2-1b", "h100-8", {"fsdp": 8}, {"batch": 32, "microbatches": 2, "remat": "full"}),
    ("llama-3.2-1b", "h100-8", {"tensor": 8}, {"batch": 2, "remat": "none"}),
    ("llama-3.2-1b", "h100-8", {"fsdp": 2, "tensor": 4},
     {"batch": 4, "compute": "float32", "remat": "full"}),
    ("llama-3.2-1b", "h100-8", {"fsdp": 8}, {"batch": 8, "compute": "float32", "remat": "none"}),
    ("llama-3.2-1b", "v5e-8", {"fsdp": 8}, {"batch": 8, "remat": "none"}),
    ("llama-3.2-1b", "v5e-8", {"fsdp": 4, "tensor": 2},
     {"batch": 16, "microbatches": 2, "remat": "full"}),
    ("llama-3.2-1b", "v5e-8", {"data": 2, "fsdp": 4},
     {"batch": 8, "compute": "float32", "remat": "full"}),
]  # fmt: skip
"""A wider grid of smaller steps that the tests hold to the same tolerance as the page's
grid: every layout, float32 compute and accumulation, on XLA:GPU and XLA:TPU."""

DEPTHS = (2, 4, 8)
"""Layer counts of the 1B model, besides its own 16, that the layers section compiles."""


LAYERS: list[tuple[str, str, dict[str, int], dict[str, Any]]] = [
    ("llama-3.2-1b", target, {"fsdp": 8}, {"batch": 16, "remat": "full", "scan_layers": scan})
    for target in ("h100-8", "v5e-8")
    for scan in (True, False)
] + [
    (f"llama-3.2-1b, {n} layers", "h100-8", {"fsdp": 8}, {"batch": 16, "remat": "full", "scan_layers": scan})
    for n in DEPTHS
    for scan in (True, False)
]  # fmt: skip
"""The page "Scan over layers": the 1B step with its 16 layers in a ``lax.scan`` and
unrolled, for 8 H100s and a v5e-8, then cut to 2, 4 and 8 layers for 8 H100s, with the
seconds each took to compile here."""

SECTIONS = {"cells": CELLS, "checks": CHECKS, "layers": LAYERS}


def decoders() -> dict[str, Any]:
    """The models by name; "llama-3.2-1b, 4 layers" is the 1B model cut to 4 layers."""
    import dataclasses

    from jaxpar import LLAMA_3_1_8B, LLAMA_3_2_1B

    cut = {f"llama-3.2-1b, {n} layers": dataclasses.replace(LLAMA_3_2_1B, layers=n) for n in DEPTHS}
    return {"llama-3.2-1b": LLAMA_3_2_1B, "llama-3.1-8b": LLAMA_3_1_8B, **cut}


def formula_cell(model: str, target: str, layout: dict, training: dict) -> dict[str, Any]:
    """One cell's formula: its terms and total, in bytes, and the device's memory."""
    from jaxpar import Parallelism, Training, plan_memory

    plan = plan_memory(decoders()[model], Parallelism(**layout), Training(**training), target)
    return {"terms": plan.terms, "total": plan.total, "memory_bytes": plan.memory_bytes}


def xla_cell(
    model: str, target: str, layout: dict, training: dict, gathers: bool = False
) -> dict[str, Any]:
    """One cell compiled for its target: XLA's memory plan for one device, in bytes, and
    with ``gathers`` how many all-gathers the step runs (loop trip counts included) and,
    on XLA:GPU, how its schedule places them (:func:`gather_schedule`)."""
    from jaxpar import TARGETS, Parallelism, Training, compile_for, fits, summarise, training_step

    step, args = training_step(decoders()[model], Parallelism(**layout), Training(**training))
    schedule = {}
    if gathers:  # the layers section, whose cells all fit: the compiled text is needed too
        compiled = compile_for(target, step, *args)
        summary = summarise(compiled)
        if TARGETS[target].backend == "XLA:GPU":  # XLA:TPU writes its gathers otherwise
            schedule = gather_schedule(compiled.as_text())
    else:
        report = fits(target, step, *args)
        if report.summary is None:  # XLA:TPU refused: it does not fit
            return {"error": report.error}
        summary = report.summary
    counted = [c.runs for c in summary.collectives if c.kind == "all-gather"] if gathers else []
    return {
        **({"all_gather_runs": None if None in counted else sum(counted)} if gathers else {}),
        **schedule,
        "argument_bytes": summary.argument_bytes,
        "output_bytes": summary.output_bytes,
        "alias_bytes": summary.alias_bytes,
        "temp_bytes": summary.temp_bytes,
        "total_bytes": summary.total_bytes,
        "peak_bytes": summary.peak_bytes,
    }


def gather_schedule(hlo: str) -> dict[str, int]:
    """How a compiled program's schedule places its all-gathers, from its HLO text, whose
    instructions are in the order they run (the text of ``compiled.as_text()``, which
    writes asynchronous gathers as ``all-gather-start`` and ``all-gather-done``).

    ``all_gathers_paired``: the ``all-gather-done`` ops whose ``all-gather-start`` is in
    the same computation; ``all_gathers_split``: those whose start is in another one, as
    when a loop starts the next iteration's gather early. ``gathered_bytes_alive``: the
    most bytes of gathered results alive at one point, each from its start (where its
    buffer is reserved) to its last use, through bitcasts and the elements of a combined
    gather's tuple; a loop's body counted at the loop's instruction. Bytes per device.

    >>> gather_schedule('''ENTRY %main {
    ...   %p = bf16[4,8]{1,0} parameter(0)
    ...   %s = bf16[32,8]{1,0} all-gather-start(%p), dimensions={0}
    ...   %t = (bf16[32,8]{1,0}, bf16[32,8]{1,0}) all-gather-start(%p, %p), dimensions={0}
    ...   %d = bf16[32,8]{1,0} all-gather-done(%s)
    ...   %e = (bf16[32,8]{1,0}, bf16[32,8]{1,0}) all-gather-done(%t)
    ...   %first = bf16[32,8]{1,0} get-tuple-element(%e), index=0
    ...   %b = bf16[256]{0} bitcast(%d)
    ...   ROOT %r = (bf16[256]{0}, bf16[32,8]{1,0}) tuple(%b, %first)
    ... }''')
    {'all_gathers_paired': 2, 'all_gathers_split': 0, 'gathered_bytes_alive': 1536}
    """
    from jaxpar.compiled import _ARRAY_TYPE, _computations, _opcode_and_type, _type_bytes

    computations = _computations(hlo)
    counts = {"all_gathers_paired": 0, "all_gathers_split": 0}

    @functools.cache
    def alive(computation: str) -> int:
        instructions = computations[computation]
        defined = {name for name, _ in instructions}
        starts: dict[str, int] = {}  # an all-gather-start -> its index
        gathered: dict[str, list[tuple[str, int]]] = {}  # an instruction -> buffers it is
        spans: dict[tuple[str, int], list[int]] = {}  # a buffer -> [reserved, last used]
        sizes: dict[tuple[str, int], int] = {}
        inside: dict[int, int] = {}  # a loop's index -> what its body keeps alive
        for index, (name, rest) in enumerate(instructions):
            opcode, result_type = _opcode_and_type(rest)
            used = [a for a in _operands(rest) if a in defined]
            for operand in used:
                for buffer in gathered.get(operand, ()):
                    spans[buffer][1] = index
            if opcode in ("all-gather", "all-gather-done"):
                begun = index
                if opcode == "all-gather-done":
                    paired = bool(used) and used[0] in starts
                    counts["all_gathers_paired" if paired else "all_gathers_split"] += 1
                    begun = starts[used[0]] if paired else index
                elements = [f"{t}[{d}]" for t, d in _ARRAY_TYPE.findall(result_type)]
                gathered[name] = [(name, i) for i in range(len(elements))]
                for buffer, element in zip(gathered[name], elements, strict=True):
                    spans[buffer], sizes[buffer] = [begun, index], _type_bytes(element)
            elif opcode == "all-gather-start":
                starts[name] = index
            elif opcode == "bitcast" and used and used[0] in gathered:
                gathered[name] = gathered[used[0]]
            elif opcode == "get-tuple-element" and used and used[0] in gathered:
                element = int(_TUPLE_INDEX.search(rest)[1])
                gathered[name] = gathered[used[0]][element : element + 1]
            elif opcode == "while":
                inside[index] = alive(_WHILE_BODY.search(rest)[1])
        return max(
            (
                inside.get(index, 0)
                + sum(size for b, size in sizes.items() if spans[b][0] <= index <= spans[b][1])
                for index in range(len(instructions))
            ),
            default=0,
        )

    entry = _ENTRY.search(hlo)
    most = alive(entry[1]) if entry else 0
    for computation in computations:  # the pairs of computations no loop calls, too
        alive(computation)
    return {**counts, "gathered_bytes_alive": most}


def _opcode(rest: str) -> str | None:
    from jaxpar.compiled import _opcode_and_type

    return _opcode_and_type(rest)[0]


def _operands(rest: str) -> list[str]:
    """The names an instruction's operand list holds (not its attributes' computations)."""
    found = _OPERANDS.search(rest)
    return _NAME.findall(found[1]) if found else []


def program(model: str, target: str, layout: dict, training: dict) -> str:
    """A hash of what XLA's plan for one cell depends on: the step's StableHLO, lowered for
    the target's devices as :func:`jaxpar.compile_for` lowers it, and the versions of jax,
    jaxlib and the target's compiler (libtpu's build, for a TPU). Text: it names no paths."""
    import jax
    import jaxlib

    from jaxpar import Parallelism, Training, training_step
    from jaxpar.targets import _lower_for, target_devices

    step, args = training_step(decoders()[model], Parallelism(**layout), Training(**training))
    lowered = _lower_for(target, step, args, {})
    devices = target_devices(target)
    compiler = devices[0].client.platform_version
    versions = f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, {compiler}"
    return hashlib.sha256(f"{versions}\n{lowered.as_text()}".encode()).hexdigest()


def recorded(
    grid: list[tuple[str, str, dict, dict]], detailed: bool = False
) -> list[dict[str, Any]]:
    """Each cell of ``grid`` compiled, beside its formula, with a line on standard output;
    ``detailed``: with its all-gathers and the seconds it took to compile here."""
    cells = []
    for model, target, layout, training in grid:
        started = time.perf_counter()
        xla = xla_cell(model, target, layout, training, gathers=detailed)
        seconds = time.perf_counter() - started
        formula = formula_cell(model, target, layout, training)
        cell = {"model": model, "target": target, "layout": layout, "training": training}
        fingerprint = program(model, target, layout, training)
        cells.append({**cell, "formula": formula, "xla": xla, "program": fingerprint})
        if detailed:
            cells[-1]["compile_seconds"] = round(seconds, 1)
        if "error" in xla:
            found = xla["error"]
        else:
            ratio = formula["total"] / xla["total_bytes"]
            found = f"XLA {xla['total_bytes'] / 2**30:.2f} GiB, ratio {ratio:.3f}"
        print(
            f"{model} {target} {layout} {training}: formula {formula['total'] / 2**30:.2f} "
            f"GiB, {found} (compiled in {seconds:.0f} s)",
            flush=True,
        )
    return cells


def main(sections: list[str]) -> int:
    """Record the named sections of the grid (all of them if none is named)."""
    import jax

    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        print(f"unknown sections {unknown}; the grid has {', '.join(SECTIONS)}", file=sys.stderr)
        return 2
    jax.config.update("jax_num_cpu_devices", 8)
    grid = json.loads(GRID_FILE.read_text(encoding="utf-8")) if GRID_FILE.exists() else {}
    for name in sections or SECTIONS:
        grid[name] = recorded(SECTIONS[name], detailed=name == "layers")
    grid = {name: grid[name] for name in SECTIONS}
    GRID_FILE.write_text(json.dumps(grid, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {GRID_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
