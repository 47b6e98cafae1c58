"""One word per term: the forms the glossary replaced, which translated prose must not use.

The glossary page gives each term one translation; where the pages used to say something
else, that older form is listed here with the glossary's, so that a test finds it in the
prose of any page (code, inline code and the glossary page itself are not prose).

>>> [str(p) for p in avoided_in("ko", "에러가 나면 `jax.Error` 에러를\\n```\\n에러\\n```\\n")]
["line 1: '에러' where the glossary says '오류'", "line 1: '에러' where the glossary says '오류'"]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sitetools import REPO
from sitetools.glosses import FENCE, INLINE_CODE

# language -> {older form: the glossary's term}
AVOIDED = {
    "ko": {"리덕션": "합산", "에러": "오류", "표준 에러": "stderr"},
    "zh": {"全交换": "all-to-all", "跟踪记录": "trace"},
}
NOT_CHECKED = {"glossary.md"}  # it names the older forms where it explains a choice


@dataclass(frozen=True)
class Avoided:
    """An older form found in prose."""

    line: int
    form: str
    term: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.form!r} where the glossary says {self.term!r}"


def avoided_in(language: str, markdown: str) -> list[Avoided]:
    """Each older form in the prose of one page, in order (a longer form, 표준 에러, is
    reported instead of the shorter one it holds)."""
    forms = sorted(AVOIDED.get(language, {}), key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, forms))) if forms else None
    found, in_code = [], False
    for number, line in enumerate(markdown.splitlines(), start=1):
        if FENCE.match(line):
            in_code = not in_code
        elif not in_code and pattern:
            for match in pattern.finditer(INLINE_CODE.sub(" ", line)):
                found.append(Avoided(number, match[0], AVOIDED[language][match[0]]))
    return found


def problems(language: str) -> list[str]:
    """Every older form on the pages of ``language`` and in its notebook pages' texts
    (notebooks.yml), named with its file and line."""
    root = REPO / "docs" / language
    texts = [*sorted(root.rglob("*.md")), *root.glob("notebooks.yml")]
    return [
        f"docs/{language}/{page.relative_to(root).as_posix()}: {found}"
        for page in texts
        if page.name not in NOT_CHECKED
        for found in avoided_in(language, page.read_text(encoding="utf-8"))
    ]
