"""Code blocks kept out of the search index, and out of the search plugin's way.

Code (snippets and their outputs) is 55 % of what the index would hold and 71 % of the
pages' HTML; prose and inline code keep every name findable. The theme's search plugin
skips an element marked ``data-search-exclude`` but still parses every highlighted token
inside it, a third of a build. So each code block is marked, and its ``<pre>`` is set aside
while the plugin reads the page and put back when the page is written.
"""

from __future__ import annotations

import re

HIGHLIGHT = '<div class="highlight">'
EXCLUDED = '<div class="highlight" data-search-exclude>'
# The <pre> of a marked block, after its title if it has one.
MARKED_PRE = re.compile(
    rf'(?<={re.escape(EXCLUDED)})((?:<span class="filename">[^<]*</span>)?)(<pre\b.*?</pre>)', re.S
)
SET_ASIDE = re.compile(r'<pre data-set-aside="(\d+)"></pre>')


def excluded_from_search(html: str) -> str:
    """Every highlighted code block marked for the search plugin to skip.

    >>> excluded_from_search('<p>x</p><div class="highlight"><pre>y</pre></div>')
    '<p>x</p><div class="highlight" data-search-exclude><pre>y</pre></div>'
    """
    return html.replace(HIGHLIGHT, EXCLUDED)


def set_aside(html: str) -> tuple[str, list[str]]:
    """``html`` with the ``<pre>`` of every marked code block emptied, and what they held,
    for :func:`put_back`.

    >>> set_aside('<div class="highlight" data-search-exclude><pre>y</pre></div><pre>z</pre>')
    ('<div class="highlight" data-search-exclude><pre data-set-aside="0"></pre></div><pre>z</pre>', ['<pre>y</pre>'])
    """
    blocks: list[str] = []

    def placeholder(match: re.Match) -> str:
        blocks.append(match[2])
        return f'{match[1]}<pre data-set-aside="{len(blocks) - 1}"></pre>'

    return MARKED_PRE.sub(placeholder, html), blocks


def put_back(html: str, blocks: list[str], where: str) -> str:
    """``html`` with the blocks that :func:`set_aside` took out back in their places.

    >>> put_back('<div><pre data-set-aside="0"></pre></div>', ['<pre>y</pre>'], "page.md")
    '<div><pre>y</pre></div>'
    """
    html, count = SET_ASIDE.subn(lambda match: blocks[int(match[1])], html)
    if count != len(blocks):
        raise ValueError(
            f"{where}: {len(blocks)} code blocks were set aside while the search index was "
            f"written, but the written page has {count} places for them; a plugin that runs "
            f"between on_page_context and on_post_page changed the page's content"
        )
    return html
