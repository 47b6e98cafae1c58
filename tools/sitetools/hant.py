"""繁體中文 (Taiwan): the Simplified Chinese pages, converted when the site is built.

No page of this edition is kept in the repository. Each build converts ``docs/zh/`` with
OpenCC's ``s2twp`` configuration (Simplified to Traditional, Taiwan's standard and
phrases), then applies ``docs/zh-hant-terms.yml``: the words of this field that ``s2twp``
gets wrong, such as 引數 for 参数 where the site means a parameter.

Only prose and code blocks' titles are converted: fenced code blocks (Mermaid's included,
whose drawings are found by their text), inline code, link targets and HTML tags pass
through as they are, and so do the files a page includes (code and recorded output), which
are read after conversion. Text marked ``lang="zh-Hans"`` stays Simplified (and
``"zh-Hant"``, converted already). Diagram labels are converted in the drawing
(:func:`convert_drawings`).

Command line (``PYTHONPATH=tools``)::

    python -m sitetools.hant docs/zh/index.md   # the page as the 繁體中文 edition shows it
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import opencc
import yaml

from sitetools import REPO

TERMS_FILE = REPO / "docs" / "zh-hant-terms.yml"
OPENCC_CONFIG = "s2twp"
# The opening or closing line of a fenced code block: its indent and its fence.
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")
# What prose holds but conversion leaves alone: inline code, a link's target, text marked
# as Simplified or as Traditional Chinese already, and any other HTML tag (its attributes).
KEPT = re.compile(
    r"(?P<tick>`+).+?(?P=tick)"
    r"|\]\([^)]*\)"
    r'|<(?P<tag>\w+) [^>]*lang="zh-Han[st]"[^>]*>.*?</(?P=tag)>'
    r"|<[^>]+>"
)
# A code block's title, on its opening line: ```text title="输出".
TITLE = re.compile(r'title="([^"]*)"')
SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)
SVG_TEXT = re.compile(r">([^<]+)<")
# The glossary's column of Simplified terms, and the column it gains.
SIMPLIFIED_COLUMN, TRADITIONAL_COLUMN = "简体中文", "繁體中文"


@functools.cache
def _opencc() -> opencc.OpenCC:
    return opencc.OpenCC(OPENCC_CONFIG)


def terms() -> dict[str, str]:
    """The term table: what ``s2twp`` writes -> what this edition writes instead."""
    return _table()[0]


def _table() -> tuple[dict[str, str], re.Pattern[str]]:
    """The term table and the pattern of its wrong forms, read again when the file changes
    (under ``make serve``)."""
    return _read_table(TERMS_FILE.stat().st_mtime_ns)


@functools.cache
def _read_table(mtime_ns: int) -> tuple[dict[str, str], re.Pattern[str]]:
    table = yaml.safe_load(TERMS_FILE.read_text(encoding="utf-8")) or {}
    for wrong, right in table.items():
        if not isinstance(wrong, str) or not isinstance(right, str) or not wrong or wrong == right:
            raise ValueError(
                f"{TERMS_FILE.relative_to(REPO)}: the entry {wrong!r}: {right!r} is not a pair of "
                f"different words; write it as `what s2twp writes: what Taiwan writes`"
            )
    return table, _wrong_forms_pattern(table)


def _wrong_forms_pattern(table: dict[str, str]) -> re.Pattern[str]:
    """Every wrong form, the longest first (編譯後程序 wins over 程序), each unless it is
    already part of its own right form (空集 in 空集合)."""
    alternatives = []
    for wrong in sorted(table, key=len, reverse=True):
        before, _, after = table[wrong].partition(wrong) if wrong in table[wrong] else ("", "", "")
        guard_before = f"(?<!{re.escape(before)})" if before else ""
        guard_after = f"(?!{re.escape(after)})" if after else ""
        alternatives.append(guard_before + re.escape(wrong) + guard_after)
    return re.compile("|".join(alternatives) or r"(?!)")


def convert(text: str) -> str:
    """Simplified Chinese text in Taiwan's script and words.

    >>> convert("每个设备保存一份参数")
    '每個裝置儲存一份參數'
    """
    return with_terms(_opencc().convert(text))


def wrong_forms(text: str) -> list[str]:
    """The term table's wrong forms that ``text`` still holds (none, once converted).

    >>> wrong_forms("每個程序的接續訓練")
    ['程序']
    """
    table, pattern = _table()
    if not any(wrong in text for wrong in table):  # most pages: the pattern alone is slow
        return []
    return [found[0] for found in pattern.finditer(text)]


def with_terms(text: str) -> str:
    """Traditional text with the term table's wrong forms replaced by its right ones.

    >>> with_terms("把程序的指令碼和編譯後程序分開")
    '把行程的腳本和編譯後程式分開'
    """
    table, pattern = _table()
    if not any(wrong in text for wrong in table):
        return text
    return pattern.sub(lambda found: table[found[0]], text)


def convert_markdown(markdown: str) -> str:
    """A Markdown page of ``docs/zh/`` as the 繁體中文 edition shows it: its prose and the
    titles of its code blocks converted; code, inline code, link targets and tags as they are.

    >>> print(convert_markdown("## 数据并行 {#data}\\n\\n把`数组`放到[设备](devices.md#设备)上"))
    ## 資料平行 {#data}
    <BLANKLINE>
    把`数组`放到[裝置](devices.md#设备)上
    """
    lines, fence = [], None
    for line in markdown.splitlines(keepends=True):
        found = FENCE.match(line)
        if fence is None and found:
            fence = found["fence"]
            line = TITLE.sub(lambda title: f'title="{convert(title[1])}"', line)
        elif fence is not None:
            if found and found["fence"][0] == fence[0] and len(found["fence"]) >= len(fence):
                if not line[found.end() :].strip():
                    fence = None
        else:
            line = _convert_prose(line)
        lines.append(line)
    return "".join(lines)


def _convert_prose(text: str) -> str:
    parts, start = [], 0
    for kept in KEPT.finditer(text):
        parts += [convert(text[start : kept.start()]), kept[0]]
        start = kept.end()
    return "".join([*parts, convert(text[start:])])


def convert_drawings(html: str) -> str:
    """The labels of the page's SVG drawings (its Mermaid diagrams) converted."""

    def labels(svg: re.Match[str]) -> str:
        return SVG_TEXT.sub(lambda text: f">{convert(text[1])}<", svg[0])

    return SVG.sub(labels, html)


def with_traditional_column(markdown: str) -> str:
    """Each table with a 简体中文 column gains a 繁體中文 one beside it, its conversion.

    Both columns' cells are marked with their language (``lang="zh-Hans"``, ``"zh-Hant"``),
    which keeps the Simplified ones Simplified in the 繁體中文 edition and lets browsers
    pick the right glyphs.

    >>> print(with_traditional_column("| English | 简体中文 |\\n|---|---|\\n| device | 设备 |"))
    | English | 简体中文 | 繁體中文 |
    |---|---|---|
    | device | <span lang="zh-Hans">设备</span> | <span lang="zh-Hant">裝置</span> |
    """
    lines, column = markdown.splitlines(keepends=True), None
    for index, line in enumerate(lines):
        if not line.startswith("|"):
            column = None
            continue
        cells = line.rstrip("\n").strip("|").split("|")
        if column is None:
            names = [cell.strip() for cell in cells]
            if SIMPLIFIED_COLUMN not in names:
                continue
            column = names.index(SIMPLIFIED_COLUMN)
            cells.insert(column + 1, f" {TRADITIONAL_COLUMN} ")
        elif set(line.strip()) <= set("|-: "):
            cells.insert(column + 1, cells[column])
        else:
            term = cells[column].strip()
            cells[column] = f' <span lang="zh-Hans">{term}</span> '
            cells.insert(column + 1, f' <span lang="zh-Hant">{convert(term)}</span> ')
        lines[index] = "|" + "|".join(cells) + "|" + ("\n" if line.endswith("\n") else "")
    return "".join(lines)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        page = with_traditional_column(Path(name).read_text(encoding="utf-8"))
        print(convert_markdown(page), end="")
