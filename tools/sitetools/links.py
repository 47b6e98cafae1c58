"""Broken internal links and anchors in a built site, every language at once.

Reads every HTML page under the site folder and checks each link, script, stylesheet and
image that stays on the site: the file it names exists, and so does the id its #fragment
names. Links off the site are not followed (nothing here reaches the internet). It does
what ``linkchecker`` does for a static site, in seconds rather than minutes:

    python -m sitetools.links site/
"""

from __future__ import annotations

import functools
import html
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
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


# Comments and the text of scripts and stylesheets, where a "<a href" is not a link.
NOT_MARKUP = re.compile(r"<!--.*?-->|<(script|style)\b[^>]*>.*?</\1\s*>", re.S | re.I)
EVERY_TAG = r"[a-zA-Z][^\s/>]*"
ATTRIBUTE = re.compile(r"([^\s/>=]+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>]+)))?")


@dataclass
class _Page:
    ids: set[str] = field(default_factory=set)
    links: list[str] = field(default_factory=list)


@functools.cache
def _start_tag(names: str) -> re.Pattern[str]:
    attributes = r"(?:\s+[^\s/>=]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s>]+))?)*"
    return re.compile(rf"<({names})({attributes})\s*/?>", re.I)


def _outside_scripts_and_comments(pattern: re.Pattern[str], text: str) -> Iterator[re.Match]:
    """Each match of a start tag's ``pattern`` in ``text``, that of a script or stylesheet
    included, but none inside comments or the text of scripts and stylesheets."""
    position = 0
    for skipped in NOT_MARKUP.finditer(text):
        yield from pattern.finditer(text, position, skipped.start())
        if skipped[1] and (tag := pattern.match(skipped[0])):
            yield tag
        position = skipped.end()
    yield from pattern.finditer(text, position)


def start_tags(text: str, names: str = EVERY_TAG) -> Iterator[tuple[str, dict[str, str | None]]]:
    """Each start tag of an HTML page whose name matches ``names`` (a regular expression;
    any tag by default), with its attributes, in order: what HTMLParser's handle_starttag
    sees (checked on the whole built site), in less than half its time, and in a tenth of
    it for a few tag names. A tag name is lower case; an attribute's value is unescaped,
    and None for an attribute without one.

    >>> list(start_tags('<A HREF="a.html?x=1&amp;y=2">a</A><!-- <a href="no"> --><br/>'))
    [('a', {'href': 'a.html?x=1&y=2'}), ('br', {})]
    >>> [tag for tag, _ in start_tags('<abbr><a id=x><h2 hidden>', r"a|h[2-6]")]
    ['a', 'h2']
    """
    for match in _outside_scripts_and_comments(_start_tag(names), text):
        values: dict[str, str | None] = {}
        for attribute in ATTRIBUTE.finditer(match[2]):
            value = next((v for v in attribute.groups()[1:] if v is not None), None)
            values.setdefault(attribute[1].lower(), value and html.unescape(value))
        yield match[1].lower(), values


def _parse_text(text: str) -> _Page:
    """The ids and the link targets of a page.

    >>> page = _parse_text('<h2 id="a">x</h2><!-- <a href="no"> --><a href="b.html#c">y</a>')
    >>> page.ids, page.links
    ({'a'}, ['b.html#c'])
    """
    page = _Page()
    for tag, values in start_tags(text):
        for name in ("id", "name") if tag == "a" else ("id",):
            if values.get(name):
                page.ids.add(values[name])
        target = values.get(LINK_ATTRIBUTES.get(tag, ""))
        if target is None or (tag == "link" and NOT_FILES & set((values.get("rel") or "").split())):
            continue
        page.links.append(target)
    return page


def _parse(path: Path) -> _Page:
    return _parse_text(path.read_text(encoding="utf-8", errors="replace"))


def _file_for(site: Path, url_path: str) -> str | None:
    """The file that a static server sends for ``url_path`` (its path in ``site``), or None."""
    candidate = site / unquote(url_path).lstrip("/")
    if ".." in candidate.relative_to(site).parts:  # %2e%2e: outside the site
        return None
    if candidate.is_dir():
        candidate = candidate / "index.html"
    return candidate.relative_to(site).as_posix() if candidate.is_file() else None


def broken_links(site: Path) -> list[BrokenLink]:
    """Every internal link of every page under ``site`` whose file or anchor is missing."""
    pages = {path: _parse(path) for path in sorted(site.rglob("*.html"))}
    ids = {path.relative_to(site).as_posix(): parsed.ids for path, parsed in pages.items()}
    file_for = functools.cache(functools.partial(_file_for, site))  # most links are shared
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
            file = file_for(parts.path)
            if file is None:
                broken.append(BrokenLink(page, target, f"no file for {parts.path}"))
            elif parts.fragment and file.endswith(".html"):
                fragment = unquote(parts.fragment)
                if fragment not in ids.get(file, set()) and fragment != "top":
                    broken.append(BrokenLink(page, target, f"no id {fragment!r} in {file}"))
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
