"""Notebook pages' stylesheets: one shared file, without the rules no notebook page can use.

mkdocs-jupyter puts JupyterLab's whole stylesheet (590 KB) inline in every notebook page.
:func:`with_shared_stylesheet` moves it into one file that browsers cache across pages,
and :func:`without_unused_rules` keeps only the selectors a static notebook can match:
JupyterLab's interface classes (``jp-``, Blueprint's ``bp3-``, Lumino's ``lm-`` and ``p-``,
CodeMirror's ``cm-``) that nbconvert's templates never write cannot appear in a page.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import mkdocs_jupyter
import tinycss2
from jupyter_core.paths import jupyter_path
from mkdocs.utils import get_relative_url

INLINE_STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.DOTALL)
INTERFACE_PREFIXES = ("jp-", "bp3-", "lm-", "p-", "cm-")


@functools.cache
def template_classes() -> frozenset[str]:
    """Every interface class that nbconvert's lab templates and mkdocs-jupyter's can write."""
    # Where nbconvert itself looks for its templates, in its order of precedence.
    shares = [Path(p) for p in jupyter_path("nbconvert", "templates")]
    share = next((p for p in shares if (p / "lab").is_dir()), None)
    if share is None:
        raise RuntimeError(
            f"nbconvert's lab templates are in none of {', '.join(map(str, shares))}: "
            f"cannot tell which stylesheet rules a notebook page can use"
        )
    templates = [
        *(share / "lab").glob("*.j2"),
        *(share / "base").glob("*.j2"),
        *(Path(mkdocs_jupyter.__file__).parent / "templates" / "mkdocs_html").glob("*.j2"),
    ]
    pattern = re.compile(rf"\b(?:{'|'.join(INTERFACE_PREFIXES)})[A-Za-z0-9_-]+")
    return frozenset(pattern.findall("".join(t.read_text(encoding="utf-8") for t in templates)))


def _selectors(prelude: list) -> list[list]:
    found: list[list] = [[]]
    for token in prelude:
        if token.type == "literal" and token.value == ",":
            found.append([])
        else:
            found[-1].append(token)
    return found


def _classes(selector: list) -> list[str]:
    return [
        after.value
        for before, after in zip(selector, selector[1:], strict=False)
        if before.type == "literal" and before.value == "." and after.type == "ident"
    ]


def _kept(selector: list, classes: frozenset[str]) -> bool:
    return all(c in classes for c in _classes(selector) if c.startswith(INTERFACE_PREFIXES))


def _rewritten(rules: list, rewrite: Callable[[Any], str | None]) -> str:
    """The rules serialised again, each style rule through ``rewrite`` (``None`` drops it),
    inside ``@media`` and ``@supports`` too (dropped when nothing in them is left)."""
    kept = []
    for rule in rules:
        if rule.type == "qualified-rule":
            if (written := rewrite(rule)) is not None:
                kept.append(written)
        elif rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports"):
            inner = tinycss2.parse_rule_list(rule.content, skip_whitespace=True, skip_comments=True)
            if body := _rewritten(inner, rewrite):
                kept.append(f"@{rule.at_keyword}{tinycss2.serialize(rule.prelude)}{{{body}}}")
        elif rule.type == "at-rule":
            kept.append(tinycss2.serialize([rule]))
    return "".join(kept)


def _parsed(css: str) -> list:
    return tinycss2.parse_stylesheet(css, skip_whitespace=True, skip_comments=True)


def _without_selectors(rule, classes: frozenset[str]) -> str | None:
    selectors = [s for s in _selectors(rule.prelude) if _kept(s, classes)]
    if not selectors:
        return None
    prelude = ",".join(tinycss2.serialize(s).strip() for s in selectors)
    return f"{prelude}{{{tinycss2.serialize(rule.content)}}}"


def _without_declarations(rule, unused: set[str]) -> str:
    kept = []
    for item in tinycss2.parse_blocks_contents(rule.content):
        if item.type == "declaration":
            if item.name not in unused:
                important = "!important" if item.important else ""
                kept.append(f"{item.name}:{tinycss2.serialize(item.value).strip()}{important}")
        elif item.type not in ("whitespace", "comment"):
            kept.append(tinycss2.serialize([item]))
    return f"{tinycss2.serialize(rule.prelude).strip()}{{{';'.join(kept)}}}"


def without_unused_properties(css: str) -> str:
    """The stylesheet without the custom properties (``--jp-…``) that nothing in it reads.

    Material's own (``--md-…``) stay: its stylesheets read them.

    >>> without_unused_properties(".a{--jp-x:1;--jp-y:var(--jp-z);--jp-z:2;color:var(--jp-x)}")
    '.a{--jp-x:1;color:var(--jp-x)}'
    """
    while True:
        defined = set(re.findall(r"(--[\w-]+)\s*:", css))
        used = set(re.findall(r"var\(\s*(--[\w-]+)", css))
        unused = {name for name in defined - used if not name.startswith("--md-")}
        if not unused:
            return css
        css = _rewritten(_parsed(css), functools.partial(_without_declarations, unused=unused))


def without_unused_rules(css: str, classes: frozenset[str] | None = None) -> str:
    """The stylesheet without selectors that need an interface class no page can have.

    >>> without_unused_rules(".jp-Cell{a:1}.jp-Dialog{b:2}.x,.bp3-tag{c:3}", frozenset({"jp-Cell"}))
    '.jp-Cell{a:1}.x{c:3}'
    """
    classes = template_classes() if classes is None else classes
    return _rewritten(_parsed(css), functools.partial(_without_selectors, classes=classes))


@functools.cache  # the same for every language's build, in one process
def _pruned(css: str) -> str:
    return without_unused_properties(without_unused_rules(css))


def prune_ahead(contents: Iterable[str]) -> None:
    """Prune the stylesheet that the first of these notebook pages' contents holds now, for
    :func:`with_shared_stylesheet` to find pruned: in a process that forks the other
    languages' builds, each of them inherits it."""
    for content in contents:
        if styles := INLINE_STYLE.findall(content):
            _pruned("\n".join(styles))
            return


def with_shared_stylesheet(html: str, page_url: str, site_dir: str) -> str:
    """A notebook page whose inline stylesheets are one file under ``assets/stylesheets/``,
    written once (without unused rules). The link ends the ``<head>``: after the theme's
    stylesheets, as the inline ones came after them (the cascade is unchanged), and found
    before anything is drawn (a stylesheet in the body holds back what follows it)."""
    styles = INLINE_STYLE.findall(html)
    if not styles:
        return html
    head_end = html.index("</head>")
    if INLINE_STYLE.search(html[:head_end]):
        raise ValueError(f"{page_url}: a stylesheet inside <head> would change place")
    css = "\n".join(styles)
    name = f"assets/stylesheets/notebook.{hashlib.sha256(css.encode()).hexdigest()[:8]}.css"
    target = Path(site_dir) / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_pruned(css), encoding="utf-8")
    link = f'<link rel="stylesheet" href="{get_relative_url(name, page_url)}">\n'
    return html[:head_end] + link + INLINE_STYLE.sub("", html[head_end:])
