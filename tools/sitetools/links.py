"""Broken internal links and anchors in a built site, every language at once.

Reads every HTML page under the site folder and checks each link, script, stylesheet and
image that stays on the site: the file it names exists, and so does the id its #fragment
names. Links off the site are not followed (nothing here reaches the internet). It does
what ``linkchecker`` does for a static site, in seconds rather than minutes:

    python -m sitetools.links site/
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

LINK_ATTRIBUTES = {"a": "href", "link": "href", "script": "src", "img": "src", "source": "src"}
# <link rel> values that name something other than a file of this site.
NOT_FILES = {"canonical", "alternate", "preconnect", "dns-prefetch"}


@dataclass(frozen=True)
class BrokenLink:
    page: str  # the page's path in the site, like "zh/basics/index.html"
    target: str  # the link as written
    reason: str

    def __str__(self) -> str:
        return f"{self.page}: {self.target} ({self.reason})"


class _PageParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for name in ("id", "name") if tag == "a" else ("id",):
            if values.get(name):
                self.ids.add(values[name])
        target = values.get(LINK_ATTRIBUTES.get(tag, ""))
        if target is None or (tag == "link" and NOT_FILES & set((values.get("rel") or "").split())):
            return
        self.links.append(target)


def _parse(path: Path) -> _PageParser:
    parser = _PageParser()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return parser


def _file_for(site: Path, url_path: str) -> Path | None:
    """The file that a static server sends for ``url_path``, or None."""
    candidate = site / unquote(url_path).lstrip("/")
    if candidate.is_dir():
        candidate = candidate / "index.html"
    return candidate if candidate.is_file() else None


def broken_links(site: Path) -> list[BrokenLink]:
    """Every internal link of every page under ``site`` whose file or anchor is missing."""
    pages = {path: _parse(path) for path in sorted(site.rglob("*.html"))}
    ids = {path.resolve(): parsed.ids for path, parsed in pages.items()}
    broken = []
    for path, parsed in pages.items():
        page = path.relative_to(site).as_posix()
        # 404.html is served at any missing address, so its links are absolute.
        base = "/" + page
        for target in dict.fromkeys(parsed.links):
            parts = urlsplit(urljoin(base, target))
            if parts.scheme or parts.netloc:
                continue  # off the site: mailto:, https://, data:, javascript:
            if parts.path == base and not parts.fragment:
                continue
            file = _file_for(site, parts.path)
            if file is None:
                broken.append(BrokenLink(page, target, f"no file for {parts.path}"))
            elif parts.fragment and file.suffix == ".html":
                fragment = unquote(parts.fragment)
                if fragment not in ids.get(file.resolve(), set()) and fragment != "top":
                    where = file.relative_to(site).as_posix()
                    broken.append(BrokenLink(page, target, f"no id {fragment!r} in {where}"))
    return broken


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "site")
    broken = broken_links(site)
    for link in broken:
        print(link)
    pages = sum(1 for _ in site.rglob("*.html"))
    print(f"{len(broken)} broken internal links or anchors in {pages} pages under {site}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
