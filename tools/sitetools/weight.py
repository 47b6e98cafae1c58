"""What a page of the built site costs a reader: every file a browser loads for it, and
their size as GitHub Pages sends them (text compressed with gzip, images as they are).

A page loads its HTML, the stylesheets, scripts and icon it links, and, through Material's
script, the search worker, its language's search index and its language's sitemap. The
browser tests check that a page loads nothing else, and that the search index is asked for
only after the page's load event (``overrides/main.html``). So each has a budget: the page
with all it loads before that event, and the index, which grows with every page of the site
and is fetched once a visit. ``python -m sitetools.weight site`` prints both for each page
type in every language.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from sitetools.i18n import load_languages

COMPRESSED = {".html", ".css", ".js", ".json", ".xml", ".svg", ".txt", ".map"}
LINKED = re.compile(
    r'<(?:link rel="(?:stylesheet|icon)" href|script src)="(?P<url>[^"]+)"', re.IGNORECASE
)
CONFIG = re.compile(r'<script id="__config" type="application/json">(?P<json>.*?)</script>', re.S)
BUDGET = 150_000  # bytes, compressed: a page with everything it loads but the search index
INDEX_BUDGET = 250_000  # bytes, compressed: a language's search index, fetched after load
SEARCH_INDEX = "search_index.json"
PAGE_TYPES = {
    "home": "",
    "tutorial": "data-parallel/first-example/",  # a diagram and math
    "notebook": "notebooks/data_parallel/linear_regression/",
    "api": "api/profiles/",  # the largest page of the API reference
    "status": "translation-status/",
}


def sent_size(path: Path) -> int:
    """Bytes on the wire: gzip-compressed (level 6) for text, as they are otherwise."""
    data = path.read_bytes()
    return len(gzip.compress(data, 6, mtime=0)) if path.suffix in COMPRESSED else len(data)


def loaded_files(site: Path, page: Path) -> set[Path]:
    """The files of ``site`` a browser loads for ``page`` (an HTML file of it)."""
    address = "http://site/" + page.relative_to(site).as_posix().removesuffix("index.html")
    html = page.read_text(encoding="utf-8")
    urls = [m["url"] for m in LINKED.finditer(html)]
    if config := CONFIG.search(html):
        settings = json.loads(config["json"])
        root = urljoin(address, settings["base"].rstrip("/") + "/")
        urls += [settings["search"], root + "search/search_index.json", root + "sitemap.xml"]
    files = {page}
    for url in urls:
        absolute = urljoin(address, url)
        if urlsplit(absolute).netloc == "site":  # the site's own files only
            path = site / urlsplit(absolute).path.lstrip("/")
            files.add(path / "index.html" if path.is_dir() else path)
    return files


def page_weight(site: Path, page: Path) -> int:
    """Bytes a reader's browser receives for ``page`` from an empty cache, before the
    search index (see :func:`index_weight`)."""
    return sum(sent_size(path) for path in loaded_files(site, page) if path.name != SEARCH_INDEX)


def index_weight(site: Path, page: Path) -> int:
    """Bytes of the search index ``page`` asks for after its load event (0 if none)."""
    return sum(sent_size(path) for path in loaded_files(site, page) if path.name == SEARCH_INDEX)


def main(site: Path) -> None:
    languages = load_languages()
    print("| page | " + " | ".join(languages) + " |")
    print("|---|" + "---|" * len(languages))
    for kind, url in PAGE_TYPES.items():
        pages = [site / language.prefix / url / "index.html" for language in languages.values()]
        sizes = [(page_weight(site, page), index_weight(site, page)) for page in pages]
        cells = [f"{size / 1000:.0f} + {index / 1000:.0f} KB" for size, index in sizes]
        print(f"| {kind} (page + search index) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "site"))
