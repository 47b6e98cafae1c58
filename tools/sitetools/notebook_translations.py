"""The notebook pages in each language: the scripts' docstrings, translated.

A notebook page opens with its script's module docstring (its title, then what the script
shows), then the script's cells, whose code and comments are English on every page of the
site. ``docs/<code>/notebooks.yml`` holds each docstring in that language, with the digest
of the English docstring it translates::

    basics/jax_in_one_page.py:
      english: "1f2e3d4c"
      docstring: |
        一页入门 JAX：写给 PyTorch 用户

        ……

When a script's docstring changes, its page shows the English one, under the language's
"not translated yet" notice, until the translation follows with the new digest; ``make
test`` warns of it as of an out-of-date page (``python -m sitetools.notebook_translations``
prints each digest). A converted language (繁體中文) converts its source's translations.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from sitetools import hant
from sitetools.i18n import SOURCE_LANGUAGE, Language
from sitetools.snippets import SNIPPETS_DIR, discover
from sitetools.translations import number_problems

FILE_NAME = "notebooks.yml"
CODE_SPAN = re.compile(r"(`+).+?\1")
DIGEST = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True)
class Docstring:
    """What a language's notebook page of one script opens with."""

    text: str
    translated: bool  # False: the English docstring, the translation missing or older


def english_docstring(snippet: Path) -> str:
    """The script's module docstring, as its English notebook page shows it ('' if none)."""
    return _docstring_of(snippet.read_text(encoding="utf-8"))


@functools.cache  # every language's build asks, and those forked from English's inherit it
def _docstring_of(source: str) -> str:
    return ast.get_docstring(ast.parse(source)) or ""


def digest(docstring: str) -> str:
    """The digest that names the English docstring a translation translates.

    >>> digest("JAX in one page, for PyTorch users.")
    '8367b529'
    """
    return hashlib.sha256(docstring.encode()).hexdigest()[:8]


def key_of(snippet: Path) -> str:
    """The script's key in notebooks.yml: its path under snippets/."""
    return snippet.relative_to(SNIPPETS_DIR).as_posix()


def translations_file(language: Language) -> Path:
    return language.docs_dir / FILE_NAME


def docstring_in(language: Language, snippet: Path) -> Docstring:
    """The docstring the language's notebook page of ``snippet`` opens with."""
    english = english_docstring(snippet)
    if language.code == SOURCE_LANGUAGE:
        return Docstring(english, translated=True)
    entry = _entries(language).get(key_of(snippet))
    if not english or not entry or entry.get("english") != digest(english):
        return Docstring(english, translated=False)
    text = str(entry.get("docstring", "")).strip()
    return Docstring(hant.convert_markdown(text) if language.converted_from else text, True)


def problems(language: Language) -> list[str]:
    """What is wrong with a language's notebooks.yml: a script missing or unknown, a
    malformed entry, and numbers or inline code that differ from the English docstring."""
    where = language.source(FILE_NAME)
    entries = _entries(language)
    scripts = {key_of(s): s for s in discover() if english_docstring(s)}
    found = [
        f"{where}: no translation of the docstring of snippets/{key}; add one (its digest "
        f"is {digest(english_docstring(scripts[key]))})"
        for key in scripts
        if key not in entries
    ]
    for key, entry in entries.items():
        english = english_docstring(scripts[key]) if key in scripts else ""
        if key not in scripts:
            found.append(f"{where}: {key!r} is not a script with a docstring under snippets/")
            continue
        if not isinstance(entry, dict) or set(entry) != {"english", "docstring"}:
            found.append(f"{where}: {key} must have exactly the keys 'english' and 'docstring'")
            continue
        if not (isinstance(entry["english"], str) and DIGEST.fullmatch(entry["english"])):
            found.append(
                f"{where}: {key}: english: {entry['english']!r} is not an 8-hex-digit digest "
                f'in quotes (YAML reads 22262738 unquoted as a number): write "{digest(english)}"'
            )
        ours = str(entry["docstring"])
        title, _, _ = ours.strip().partition("\n")
        if not title.strip():
            found.append(f"{where}: {key}: the docstring's first line, the title, is empty")
        found += number_problems(english, ours, f"{where}: {key}")
        theirs_code, ours_code = _code_spans(english), _code_spans(ours)
        if theirs_code != ours_code:
            found.append(
                f"{where}: {key}: its inline code differs from the English docstring's: "
                f"missing {sorted((theirs_code - ours_code).elements())}, "
                f"extra {sorted((ours_code - theirs_code).elements())}"
            )
    return found


def outdated(language: Language) -> list[str]:
    """One line per notebook page shown in English because the docstring changed after its
    translation (a missing one is a problem, not a warning)."""
    where = language.source(FILE_NAME)
    entries = _entries(language)
    return [
        f"{where}: snippets/{key_of(snippet)}'s docstring changed after its translation "
        f"(now {digest(english)}): its notebook page is shown in English"
        for snippet in discover()
        if (english := english_docstring(snippet))
        and (entry := entries.get(key_of(snippet))) is not None
        and isinstance(entry, dict)
        and entry.get("english") != digest(english)
    ]


def _code_spans(markdown: str) -> Counter[str]:
    return Counter(match[0] for match in CODE_SPAN.finditer(markdown))


def _entries(language: Language) -> dict:
    path = translations_file(language)
    return _read(path, path.stat().st_mtime_ns) if path.exists() else {}


@functools.cache  # per file and modification time: every notebook page of a build reads it
def _read(path: Path, mtime_ns: int) -> dict:
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(entries, dict):
        raise ValueError(f"{path}: expected a mapping of script paths to translations")
    return entries


def main(argv: list[str]) -> int:
    """Print each script's key and the digest of its English docstring."""
    for snippet in discover():
        if english := english_docstring(snippet):
            print(f"{key_of(snippet)}: {digest(english)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
