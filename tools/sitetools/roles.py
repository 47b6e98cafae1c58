"""Sphinx roles in jaxpar's docstrings (``:func:`summarise```) as links on the API pages.

The docstrings use Sphinx's roles, which editors and ``help()`` show as they are, and which
mkdocstrings leaves as text: ``:func:<code>summarise</code>``. Each becomes a link to the
object's entry on its API page, or plain code where the name names no documented object.

>>> html = "see :func:<code>summarise</code> and :attr:<code>temp_bytes</code>"
>>> print(with_links(html, "api/targets/"))
see <a href="../compiled/#jaxpar.summarise"><code>summarise</code></a> and <a href="../compiled/#jaxpar.CompiledSummary.temp_bytes"><code>temp_bytes</code></a>
"""

from __future__ import annotations

import functools
import re

ROLE = re.compile(r":(?:func|class|meth|attr|data|mod|obj):<code>([\w.]+)</code>")
ENTRY = re.compile(r"^::: jaxpar\.(\w+)$", re.MULTILINE)  # an API page's entry for a name


@functools.cache
def documented() -> dict[str, str]:
    """Every documented name, ``Class.member`` included, -> ``page/#anchor`` under api/: the
    page is the one whose ``::: jaxpar.NAME`` line documents it."""
    import jaxpar
    from sitetools import REPO

    found = {}
    for page in sorted((REPO / "docs/en/api").glob("*.md")):
        for name in ENTRY.findall(page.read_text(encoding="utf-8")):
            found[name] = f"{page.stem}/#jaxpar.{name}"
            value = getattr(jaxpar, name, None)
            if isinstance(value, type):  # its methods and properties, a dataclass's fields
                for member in [*vars(value), *getattr(value, "__dataclass_fields__", {})]:
                    if not member.startswith("_"):
                        found[f"{name}.{member}"] = f"{page.stem}/#jaxpar.{name}.{member}"
    return found


def target(name: str) -> str | None:
    """Where ``name`` is documented: ``summarise``, ``jaxpar.summarise``,
    ``Collective.axes``, or a member name that only one class has (``temp_bytes``)."""
    name = name.removeprefix("jaxpar.")
    names = documented()
    if name in names:
        return names[name]
    members = [path for full, path in names.items() if full.endswith(f".{name}")]
    return members[0] if len(members) == 1 else None


def with_links(html: str, page_url: str) -> str:
    """``html`` of the API page at ``page_url`` (such as ``api/compiled/``) with its roles
    as links, relative to the page."""

    def link(match: re.Match) -> str:
        code = f"<code>{match[1]}</code>"
        where = target(match[1])
        return f'<a href="../{where}">{code}</a>' if where else code

    return ROLE.sub(link, html) if page_url.startswith("api/") else html
