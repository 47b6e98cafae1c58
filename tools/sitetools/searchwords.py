"""Search in the reader's own words: the glossary's Chinese terms kept whole in the index,
and found whole in what the reader types.

Material's search cuts Chinese text into words with jieba when it builds the index, and
matches what the reader types against those words. jieba does not know this field's terms:
it cuts 全归约 (all-reduce) into 全 and 归约, so a reader who types 全归约 finds pages that
merely hold 全 (全局) first. Each Chinese term of the glossary (``docs/en/glossary.md``'s
简体中文 column), and its 繁體中文 form, is given to jieba as a word before any page is
indexed, with the few words readers type that are no term of the glossary (:data:`TYPED`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig

from sitetools import REPO, hant

GLOSSARY = REPO / "docs" / "en" / "glossary.md"
WORD = re.compile(r"[\u4e00-\u9fff]{2,}")  # Han characters only: not a note in the cell
# Parentheses (full or half width) hold another name or the English: not part of the term.
IN_PARENTHESES = re.compile(r"（[^）]*）|\([^)]*\)")
# What readers type for "two or more machines", which jieba cuts into 多 and 机.
TYPED = ("多机", "多节点")


def glossary_terms() -> tuple[str, ...]:
    """The Chinese terms of the glossary and :data:`TYPED`, simplified then traditional,
    each once.

    >>> {"全归约", "全歸約", "数据并行"} <= set(glossary_terms())
    True
    """
    return _glossary_terms(GLOSSARY.stat().st_mtime_ns)


@functools.cache
def _glossary_terms(mtime_ns: int) -> tuple[str, ...]:
    terms: list[str] = []
    for line in GLOSSARY.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[0] == "English":
            continue
        for term in IN_PARENTHESES.sub("", cells[1]).split("/"):
            term = term.strip()
            if WORD.fullmatch(term):
                terms.append(term)
    terms += TYPED
    return tuple(dict.fromkeys([*terms, *(hant.convert(term) for term in terms)]))


# Word separators where Material's default for the language is not enough: Korean glues a
# parenthesised other name to its word (all-reduce(올리듀스)이며), so parentheses separate.
SEPARATORS = {"ko": r"[\s\-()]+"}


def set_separator(config: MkDocsConfig, code: str) -> None:
    """The search's word separator for ``code``: :data:`SEPARATORS`' or, with None, the
    theme's default for the language (set again for each language, as the plugin may be
    shared between the language builds of one process)."""
    search = config.plugins.get("material/search")
    if search is not None:
        search.config.separator = SEPARATORS.get(code)


def teach_jieba() -> None:
    """Give jieba every glossary term as a word, once per process and glossary edit (the
    forked language builds inherit them)."""
    _teach(glossary_terms())


@functools.cache
def _teach(terms: tuple[str, ...]) -> None:
    import jieba

    for term in terms:
        jieba.add_word(term)


# Material's search worker cuts a Chinese query into the longest words of the index, but
# never tries a word that ends where the query ends: 多机 is searched as 多*, and 全归约 as
# 全* 归*, so a page that says 全局 (global) ranks above every page about all-reduce. The
# built worker gets the one comparison that lets the last word count (<= for <).
WORKER_GLOB = "assets/javascripts/workers/search.*.min.js"
WORKER_SEGMENTING = "for(let o=s+1;o<t.length;o++)t.slice(s,o)in e"
WORKER_FIXED = "for(let o=s+1;o<=t.length;o++)t.slice(s,o)in e"


class WorkerChanged(Exception):
    """Material's search worker no longer holds the loop this module corrects."""


def fix_query_segmenting(site_dir: Path) -> None:
    """Correct the search worker of one built language (``site_dir``), or say that a new
    Material changed it (then check whether its segmenting still drops the last word)."""
    workers = sorted(site_dir.glob(WORKER_GLOB))
    for worker in workers:
        text = worker.read_text(encoding="utf-8")
        if WORKER_FIXED in text:
            continue
        if text.count(WORKER_SEGMENTING) != 1:
            raise WorkerChanged(
                f"{worker}: Material's search worker no longer segments Chinese queries as "
                f"sitetools.searchwords expects ({WORKER_SEGMENTING!r}); see whether a query's "
                f"last word still counts, and update or remove fix_query_segmenting"
            )
        worker.write_text(text.replace(WORKER_SEGMENTING, WORKER_FIXED), encoding="utf-8")
    if not workers:
        raise WorkerChanged(f"{site_dir}: no search worker at {WORKER_GLOB}")
