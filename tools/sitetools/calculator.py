"""The memory calculator of "Will it fit?": the formula, the presets and the targets that its
script (overrides/assets/javascripts/memory-plan.js) evaluates, put into the page when the
site is built, from ``jaxpar.memory_plan`` itself: the calculator and the tests that check
the formula against the compiler use one formula.

A page asks for them with two markers:

- :data:`DATA_MARKER` becomes ``<script type="application/json" id="memory-plan-data">``
  holding :func:`jaxpar.formula_json`, the presets' sizes and the targets' devices and
  memory (the script reads it; search skips scripts);
- :data:`FORMULA_MARKER` becomes a code block of the formula's definitions, in the order
  the script evaluates them (code, the same in every language).

Every text the reader sees (labels, messages) is in the page, so that translators
translate it there; the script takes its messages from the calculator's ``data-*``
attributes.
"""

from __future__ import annotations

import json
from dataclasses import asdict

DATA_MARKER = "<!-- memory-plan-data -->"
FORMULA_MARKER = "<!-- memory-plan-formula -->"
SCRIPT = "assets/javascripts/memory-plan.js"
"""The script, under overrides/: main.html links it on pages that hold the calculator."""


def presets() -> dict[str, dict]:
    """The decoders the calculator offers, by the ``value`` of their ``<option>``."""
    from jaxpar import LLAMA_3_1_8B, LLAMA_3_2_1B

    return {"llama-3.2-1b": asdict(LLAMA_3_2_1B), "llama-3.1-8b": asdict(LLAMA_3_1_8B)}


def targets() -> dict[str, dict]:
    """Every target of ``jaxpar.TARGETS`` with a memory size: its devices and memory."""
    from jaxpar import TARGETS

    return {
        name: {"backend": t.backend, "devices": t.devices, "memory_bytes": t.memory_bytes}
        for name, t in TARGETS.items()
        if t.memory_bytes is not None
    }


def data() -> dict:
    """What the script evaluates: the formula (``formula_json()``), presets, targets."""
    from jaxpar import formula_json

    return {"formula": json.loads(formula_json()), "presets": presets(), "targets": targets()}


def data_block() -> str:
    """The ``<script type="application/json">`` element the script reads."""
    text = json.dumps(data(), separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    return f'<script type="application/json" id="memory-plan-data">{text}</script>'


def formula_block() -> str:
    """The formula's definitions as a code block: ``name = expression``, in order."""
    from jaxpar.memory_plan import FORMULA

    width = max(map(len, FORMULA))
    lines = [f"{name:<{width}} = {expression}" for name, (expression, _) in FORMULA.items()]
    return "```text\n" + "\n".join(lines) + "\n```"


def with_calculator(markdown: str) -> str:
    """``markdown`` with its markers replaced (pages without them are returned as they are)."""
    if DATA_MARKER in markdown:
        markdown = markdown.replace(DATA_MARKER, data_block())
    if FORMULA_MARKER in markdown:
        markdown = markdown.replace(FORMULA_MARKER, formula_block())
    return markdown
