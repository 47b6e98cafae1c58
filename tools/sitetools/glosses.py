"""English glosses in translated prose: ``设备（device）``, ``디바이스(device)``.

The glossary's rule: give the English term in parentheses only where a reader could not
guess it from the translation, at most once per page, and never in a heading or a table.
The glossary page is where every term meets its English, so it is not counted. This module
finds the glosses, so that a test can hold the site to that rule and to a budget.

Command line (``PYTHONPATH=tools``)::

    python -m sitetools.glosses [LANG ...]   # every gloss, page by page, and the totals
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sitetools import REPO

# The most glosses a language may carry on all its pages together (the glossary excluded).
BUDGET = 40
NOT_COUNTED = {"glossary.md"}
CJK = r"[\u3400-\u9fff\uac00-\ud7af]"
# A run of Chinese or Korean text (maybe closed by emphasis or a quote), then an English word
# or phrase in parentheses (full- or half-width); parentheses after code or numbers, or
# holding only code, are not glosses.
GLOSS = re.compile(
    CJK + r"[*_”\"」』》]*\s?[（(]\s*(?P<english>[A-Za-z][A-Za-z0-9 .,'’/-]*?)\s*[）)]"
)
INLINE_CODE = re.compile(r"`[^`]*`")
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


@dataclass(frozen=True)
class Gloss:
    """One English gloss: where it is and what kind of line holds it."""

    page: Path
    line: int
    english: str
    where: str  # "prose", "heading" or "table"

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}: ({self.english}) in a {self.where}"


def glosses_in(page: Path) -> list[Gloss]:
    """The glosses of one Markdown page, outside code blocks and inline code."""
    found: list[Gloss] = []
    in_code = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        stripped = line.lstrip()
        where = (
            "heading"
            if stripped.startswith("#")
            else "table"
            if stripped.startswith("|")
            else "prose"
        )
        for match in GLOSS.finditer(INLINE_CODE.sub("\u2400", line)):
            found.append(Gloss(page, number, match["english"], where))
    return found


def site_glosses(language: str) -> list[Gloss]:
    """Every gloss on the pages of ``docs/<language>/``, the glossary page excepted."""
    pages = sorted((REPO / "docs" / language).rglob("*.md"))
    return [g for page in pages if page.name not in NOT_COUNTED for g in glosses_in(page)]


def problems(language: str) -> list[str]:
    """Breaches of the rule: a gloss in a heading or table, one term glossed twice on a
    page, or more glosses in the language than the budget."""
    glosses = site_glosses(language)
    found = [f"{g}: glosses never go in headings or tables" for g in glosses if g.where != "prose"]
    per_page = Counter((g.page, g.english.lower()) for g in glosses)
    found += [
        f"{page.relative_to(REPO)}: ({english}) is glossed {count} times; once per page at most"
        for (page, english), count in per_page.items()
        if count > 1
    ]
    if len(glosses) > BUDGET:
        found.append(
            f"docs/{language}/ has {len(glosses)} English glosses, over the budget of {BUDGET}: "
            f"keep only those a reader could not guess from the translation "
            f"(`python -m sitetools.glosses {language}` lists them)"
        )
    return found


def main(argv: list[str]) -> int:
    for language in argv or ["zh", "ko"]:
        glosses = site_glosses(language)
        for gloss in glosses:
            print(gloss)
        print(f"{language}: {len(glosses)} glosses (budget {BUDGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
