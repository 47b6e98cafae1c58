"""Translation status: which English pages each language has, and whether they agree.

A translated page must show the same things as its English original: the same heading
ids in the same order, the same includes, the same code blocks and the same links. Only
prose, and the labels of Mermaid diagrams, are translated. Its prose must also state the
same numbers, as often, so that an English change cannot leave a stale number behind.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sitetools import REPO, mkdocs_settings
from sitetools.i18n import SOURCE_LANGUAGE, Language, load_languages, nav_titles
from sitetools.includes import INCLUDE_LINE, find_includes

HEADING = re.compile(r"^(#{1,6})\s+(?P<text>.*?)\s*(?:\{#(?P<id>[-\w]+)\})?\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
OUTPUT_TITLE = re.compile(r'\s*title="[^"]*"')
# What prose holds besides the numbers it states: link targets, heading ids and attribute
# lists, HTML tags, addresses and footnote names.
NOT_STATED = re.compile(r"\]\([^)]*\)|\{[#:.][^}]*\}|<[^>]+>|https?://\S+|\[\^[^\]]+\]")
# A stated number: 19,280, 0.0986, 1e-5 or 25. Single digits are left out, since a
# language may write them as words (two, 两, 두) where another writes the digit. Korean
# and Chinese may put a letter right after a number (19,280바이트, 约19), English may not.
# A shape's sizes (8x8, 8×8) are not stated numbers, however a language writes the x.
NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.×])"  # not inside a name (bf16); Korean and Chinese may touch it
    r"(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+(?:e[-+]?\d+)?|\d+e[-+]?\d+|\d{2,})"
    r"(?![A-Za-z0-9_×])"
)


@dataclass(frozen=True)
class PageShape:
    """What must not change between languages."""

    heading_ids: tuple[str | None, ...]
    includes: tuple[str, ...]
    code_blocks: tuple[str, ...]
    links: tuple[str, ...]


def shape_of(markdown: str) -> PageShape:
    """Headings, includes, code blocks and links of a page, outside and inside code."""
    heading_ids, code_blocks, links = [], [], []
    block: list[str] | None = None
    fence = ""
    for line in markdown.splitlines():
        match = FENCE.match(line)
        if block is None and match:
            fence, block = match["fence"], [OUTPUT_TITLE.sub("", match["info"])]
            continue
        if block is not None:
            if line.strip() == fence:
                if block[0].strip() == "mermaid":  # a diagram: its labels are translated
                    code_blocks.append(block[0])
                elif not all(INCLUDE_LINE.match(x) for x in block[1:] if x.strip()):
                    code_blocks.append("\n".join(block))
                block = None
            else:
                block.append(line)
            continue
        heading = HEADING.match(line)
        if heading:
            heading_ids.append(heading["id"])
        links += LINK.findall(line)
    return PageShape(
        tuple(heading_ids),
        tuple(str(i) for i in find_includes(markdown)),
        tuple(code_blocks),
        tuple(links),
    )


def prose_lines(markdown: str) -> list[str]:
    """The lines of a page outside code blocks and include lines."""
    lines, fence = [], None
    for line in markdown.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence = match["fence"]
        elif fence is not None:
            fence = None if line.strip() == fence else fence
        elif not INCLUDE_LINE.match(line):
            lines.append(line)
    return lines


def stated_numbers(markdown: str) -> Counter[str]:
    """How often the prose of a page states each number of two or more digits, without
    thousands separators.

    >>> stated_numbers("Device 0 holds 19,280 bytes, 1 in 10 ([x](a.md#b2)).\\n```\\n42\\n```")
    Counter({'19280': 1, '10': 1})
    """
    found: Counter[str] = Counter()
    for line in prose_lines(markdown):
        found.update(n.replace(",", "") for n in NUMBER.findall(NOT_STATED.sub(" ", line)))
    return found


def number_problems(english: str, translated: str, where: str) -> list[str]:
    """Each number that the prose of ``translated`` states another number of times than
    ``english`` does, named with the page ``where`` it is."""
    ours, theirs = stated_numbers(translated), stated_numbers(english)
    return [
        f"{where}: its prose states {number} {ours[number]} time(s), English's "
        f"{theirs[number]}; say the numbers that docs/en says"
        for number in sorted(ours | theirs)
        if ours[number] != theirs[number]
    ]


def english_pages() -> list[str]:
    root = REPO / "docs" / SOURCE_LANGUAGE
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.md"))


def problems(language: Language) -> list[str]:
    """Everything that is wrong with one language's translation."""
    found = []
    english_root = REPO / "docs" / SOURCE_LANGUAGE
    english = english_pages()
    for page in english:
        translated = language.docs_dir / page
        if not translated.exists():
            if page not in language.pending:
                found.append(
                    f"docs/{language.code}/{page} is missing: translate docs/en/{page}, or list it "
                    f"under 'pending' for '{language.code}' in docs/languages.yml"
                )
            continue
        if page in language.pending:
            found.append(
                f"docs/{language.code}/{page} exists but is still listed as pending; remove it from 'pending'"
            )
        ours_text = translated.read_text(encoding="utf-8")
        theirs_text = (english_root / page).read_text(encoding="utf-8")
        found += number_problems(theirs_text, ours_text, f"docs/{language.code}/{page}")
        ours, theirs = shape_of(ours_text), shape_of(theirs_text)
        for field in ("heading_ids", "includes", "code_blocks", "links"):
            if getattr(ours, field) != getattr(theirs, field):
                found.append(
                    f"docs/{language.code}/{page}: its {field.replace('_', ' ')} differ from docs/en/{page}:\n"
                    f"  en: {getattr(theirs, field)}\n  {language.code}: {getattr(ours, field)}"
                )
    for path in sorted(language.docs_dir.rglob("*.md")):
        page = path.relative_to(language.docs_dir).as_posix()
        if page not in english:
            found.append(f"docs/{language.code}/{page} has no English original docs/en/{page}")
    for pending in language.pending:
        if pending not in english:
            found.append(
                f"docs/languages.yml: '{language.code}' lists pending page {pending}, which is not an English page"
            )
    nav = mkdocs_settings().get("nav")
    for title in sorted((nav_titles(nav) | {"Notebooks"}) - set(language.nav)):
        found.append(
            f"docs/languages.yml: '{language.code}' has no translation of the nav section '{title}'"
        )
    return found


def missing_heading_ids(path: Path) -> list[str]:
    """Headings written without an explicit {#id}."""
    text = path.read_text(encoding="utf-8")
    inside = False
    missing = []
    for number, line in enumerate(text.splitlines(), start=1):
        if FENCE.match(line):
            inside = not inside
        elif not inside and (heading := HEADING.match(line)) and heading["id"] is None:
            missing.append(
                f"{path.relative_to(REPO)}:{number}: heading {line.strip()!r} needs an explicit {{#id}}"
            )
    return missing


def other_languages() -> list[Language]:
    """The languages translated from English by hand: not English, and not converted."""
    languages = load_languages().items()
    return [lang for code, lang in languages if code != SOURCE_LANGUAGE and not lang.converted_from]
