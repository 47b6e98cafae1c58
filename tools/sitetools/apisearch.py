"""The API pages' docstrings kept out of the search index of every language but English.

mkdocstrings renders jaxpar's docstrings in English on every language's API pages. In the
index of 简体中文, 한국어 or 繁體中文 they were a tenth of its weight, in a language its
readers did not search in, and the index is most of what every page loads. Each entry keeps
its title, so a search for ``compile_for`` still finds its entry, and each API page keeps
its own translated introduction; the English site's index keeps the text.
"""

from __future__ import annotations

import json
from pathlib import Path


def without_docstrings(index: dict, language: str) -> dict:
    """The search plugin's ``index`` with the text of each API entry left out, for a
    language other than English.

    >>> index = {"docs": [{"location": "api/targets/", "title": "Targets", "text": "Intro"},
    ...                   {"location": "api/targets/#jaxpar.f", "title": "f", "text": "Does"}]}
    >>> [d["text"] for d in without_docstrings(index, "zh")["docs"]]
    ['Intro', '']
    >>> without_docstrings(index, "en") == index
    True
    """
    if language == "en":
        return index
    docs = [
        {**doc, "text": ""} if doc["location"].startswith("api/") and "#jaxpar." in doc["location"]
        else doc
        for doc in index["docs"]
    ]  # fmt: skip
    return {**index, "docs": docs}


def leave_out_docstrings(site_dir: str, language: str) -> None:
    """Rewrite the built ``search/search_index.json`` of ``language`` without the API's
    docstrings (:func:`without_docstrings`)."""
    if language == "en":
        return
    path = Path(site_dir) / "search" / "search_index.json"
    index = without_docstrings(json.loads(path.read_text(encoding="utf-8")), language)
    path.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")
