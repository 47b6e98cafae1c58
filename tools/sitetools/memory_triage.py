"""Record what the page "Will it fit?" shows of out-of-memory triage: XLA:TPU's refusal of
a step that cannot fit (its whole message), and the files ``XLA_FLAGS=--xla_dump_to``
makes XLA:GPU and XLA:TPU write, with the head of each one's memory-usage report.

    PYTHONPATH=tools .venv/bin/python -m sitetools.memory_triage

writes ``snippets/training_step/memory_triage.json``, which the page shows and
``tests/test_chapter_will_it_fit.py`` checks the page against. Each compile runs in a
process of its own (``XLA_FLAGS`` is read once per process): XLA:TPU refuses the 8B step
of the recorded grid in about 2 s, XLA:GPU compiles the 1B step in about 10 s. Nothing
here runs in the tests: the refusal's first line is also in ``memory_grid.json``, which
``tests/test_memory_plan.py`` re-checks against the formula.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from sitetools import REPO

TRIAGE_FILE = REPO / "snippets" / "training_step" / "memory_triage.json"

# (name, model, target, layout, training): cells of sitetools.memory_grid.CELLS.
DUMPS = [
    ("gpu", "llama-3.2-1b", "h100-8", {"fsdp": 8}, {"batch": 16, "remat": "full"}),
    ("tpu_refused", "llama-3.1-8b", "v5e-8", {"fsdp": 8}, {"batch": 8, "remat": "full"}),
]
REPORT_LINES = 8
"""Lines kept of each memory-usage report: its total and its largest buffers."""

CHILD = """
import json, sys
import jax
jax.config.update("jax_num_cpu_devices", 8)
from jaxpar import Parallelism, Training, compile_for, summarise, training_step
from sitetools.memory_grid import decoders
model, target, layout, training = json.loads(sys.argv[1])
step, args = training_step(decoders()[model], Parallelism(**layout), Training(**training))
try:
    compiled = compile_for(target, step, *args)
    print(json.dumps({"total_bytes": summarise(compiled).total_bytes}))
except jax.errors.JaxRuntimeError as error:
    print(json.dumps({"error_type": type(error).__module__ + "." + type(error).__name__,
                      "error": str(error)}))
"""


def record_one(model: str, target: str, layout: dict, training: dict) -> dict:
    """Compile one cell with a dump folder; what it raised or planned, and the dump."""
    with tempfile.TemporaryDirectory() as folder:
        env = os.environ | {
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"--xla_dump_to={folder}",
            "PYTHONPATH": str(REPO / "tools"),
        }
        run = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps([model, target, layout, training])],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        result = json.loads(run.stdout.strip().splitlines()[-1])
        names = sorted(p.name for p in Path(folder).iterdir())
        report = next(Path(folder).glob("*memory-usage-report.txt"))
        head = report.read_text(encoding="utf-8").splitlines()[:REPORT_LINES]
    return {**result, "files": names, "report_head": head}


def main() -> int:
    recorded = {}
    for name, model, target, layout, training in DUMPS:
        cell = {"model": model, "target": target, "layout": layout, "training": training}
        recorded[name] = cell | record_one(model, target, layout, training)
        print(f"{name}: {len(recorded[name]['files'])} files", flush=True)
    TRIAGE_FILE.write_text(json.dumps(recorded, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {TRIAGE_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
