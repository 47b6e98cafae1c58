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
from pathlib import Path

import mkdocs_jupyter
import nbconvert
import tinycss2
from mkdocs.utils import get_relative_url

INLINE_STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.DOTALL)
INTERFACE_PREFIXES = ("jp-", "bp3-", "lm-", "p-", "cm-")


@functools.cache
def template_classes() -> frozenset[str]:
    """Every interface class that nbconvert's lab templates and mkdocs-jupyter's can write."""
    share = Path(nbconvert.__file__).parents[4] / "share" / "jupyter" / "nbconvert" / "templates"
    templates = [
        *(share / "lab").glob("*.j2"),
        *(share / "base").glob("*.j2"),
        *(Path(mkdocs_jupyter.__file__).parent / "templates" / "mkdocs_html").glob("*.j2"),
    ]
    if not templates:
        raise RuntimeError(f"no nbconvert templates under {share}: cannot tell which rules to keep")
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


def _pruned(rules: list, classes: frozenset[str]) -> str:
    kept = []
    for rule in rules:
        if rule.type == "qualified-rule":
            selectors = [s for s in _selectors(rule.prelude) if _kept(s, classes)]
            if selectors:
                prelude = ",".join(tinycss2.serialize(s).strip() for s in selectors)
                kept.append(f"{prelude}{{{tinycss2.serialize(rule.content)}}}")
        elif rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports"):
            inner = tinycss2.parse_rule_list(rule.content, skip_whitespace=True, skip_comments=True)
            if body := _pruned(inner, classes):
                kept.append(f"@{rule.at_keyword}{tinycss2.serialize(rule.prelude)}{{{body}}}")
        elif rule.type == "at-rule":
            kept.append(tinycss2.serialize([rule]))
    return "".join(kept)


def _without_properties(css: str, unused: set[str]) -> str:
    def declarations(content: list) -> str:
        kept = []
        for item in tinycss2.parse_blocks_contents(content):
            if item.type == "declaration":
                if item.name not in unused:
                    important = "!important" if item.important else ""
                    kept.append(f"{item.name}:{tinycss2.serialize(item.value).strip()}{important}")
            elif item.type not in ("whitespace", "comment"):
                kept.append(tinycss2.serialize([item]))
        return ";".join(kept)

    def rules(parsed: list) -> str:
        out = []
        for rule in parsed:
            if rule.type == "qualified-rule":
                body = declarations(rule.content)
                out.append(f"{tinycss2.serialize(rule.prelude).strip()}{{{body}}}")
            elif rule.type == "at-rule" and rule.lower_at_keyword in ("media", "supports"):
                inner = tinycss2.parse_rule_list(rule.content, skip_whitespace=True)
                out.append(
                    f"@{rule.at_keyword}{tinycss2.serialize(rule.prelude)}{{{rules(inner)}}}"
                )
            else:
                out.append(tinycss2.serialize([rule]))
        return "".join(out)

    return rules(tinycss2.parse_stylesheet(css, skip_whitespace=True, skip_comments=True))


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
        css = _without_properties(css, unused)


def without_unused_rules(css: str, classes: frozenset[str] | None = None) -> str:
    """The stylesheet without selectors that need an interface class no page can have.

    >>> without_unused_rules(".jp-Cell{a:1}.jp-Dialog{b:2}.x,.bp3-tag{c:3}", frozenset({"jp-Cell"}))
    '.jp-Cell{a:1}.x{c:3}'
    """
    rules = tinycss2.parse_stylesheet(css, skip_whitespace=True, skip_comments=True)
    return _pruned(rules, template_classes() if classes is None else classes)


def with_shared_stylesheet(html: str, page_url: str, site_dir: str) -> str:
    """A notebook page whose inline stylesheets are one file under ``assets/stylesheets/``,
    written once (without unused rules). The link ends the ``<head>``: after the theme's
    stylesheets, as the inline ones came after them (the cascade is unchanged), and found
    before anything is drawn (a stylesheet in the body holds back what follows it)."""
    styles = INLINE_STYLE.findall(html)
    if not styles:
        return html
    css = "\n".join(styles)
    name = f"assets/stylesheets/notebook.{hashlib.sha256(css.encode()).hexdigest()[:8]}.css"
    target = Path(site_dir) / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(without_unused_properties(without_unused_rules(css)), encoding="utf-8")
    link = f'<link rel="stylesheet" href="{get_relative_url(name, page_url)}">\n'
    head_end = html.index("</head>")
    if INLINE_STYLE.search(html[:head_end]):
        raise ValueError(f"{page_url}: a stylesheet inside <head> would change place")
    return html[:head_end] + link + INLINE_STYLE.sub("", html[head_end:])
