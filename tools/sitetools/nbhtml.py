"""nbconvert's HTML export without its BeautifulSoup round trip: a third of a cold build.

After rendering a notebook, nbconvert's ``HTMLExporter`` parses the whole page with
BeautifulSoup only to give images without ``alt`` a placeholder text and to make input
and output cells focusable (``tabindex="0"``), then writes the page out again: three
quarters of the time mkdocs-jupyter spends on a notebook, about 2.5 s of a cold build
here. :func:`export_without_soup` makes the same two changes to the rendered text; the
page differs only in how it is written (attribute order, entities, blank lines), which
``tests/test_site.py`` checks by parsing both.
"""

from __future__ import annotations

import re
from typing import Any

from nbconvert.exporters.html import Highlight2HTML, HTMLExporter, WidgetsDataTypeFilter
from nbconvert.exporters.templateexporter import TemplateExporter
from nbformat import NotebookNode

# The opening tag of what nbconvert makes focusable (".jp-Notebook div.<class>"), and an
# image without alternative text.
FOCUSABLE = re.compile(
    r'<div class="(?:[^"]*\s)?(?:jp-Cell-inputWrapper|jp-OutputArea-output)(?:\s[^"]*)?"'
)
IMAGE_WITHOUT_ALT = re.compile(r"<img(?![^>]*\balt=)")
NO_ALT = '<img alt="No description has been provided for this image"'
ORIGINAL = HTMLExporter.from_notebook_node


def export_without_soup(
    self: HTMLExporter, nb: NotebookNode, resources: dict[str, Any] | None = None, **kw: Any
) -> tuple[str, dict[str, Any]]:
    """``HTMLExporter.from_notebook_node`` (nbconvert 7), its changes made with regexes."""
    language = nb.metadata.get("language_info", {})
    lexer = language.get("pygments_lexer", language.get("name", None))
    highlight = self.filters.get(
        "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)
    )
    resources = self._init_resources(resources)
    data_types = WidgetsDataTypeFilter(
        notebook_metadata=self._nb_metadata, parent=self, resources=resources
    )
    self.register_filter("highlight_code", highlight)
    self.register_filter("filter_data_type", data_types)
    html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
    html = IMAGE_WITHOUT_ALT.sub(NO_ALT, html)
    return FOCUSABLE.sub(lambda tag: f'{tag[0]} tabindex="0"', html), resources


def export_notebooks_without_soup() -> None:
    """Make every ``HTMLExporter`` of this process use :func:`export_without_soup`."""
    HTMLExporter.from_notebook_node = export_without_soup
