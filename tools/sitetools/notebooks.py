"""Notebook versions of the snippets, generated at build time and never committed.

Each snippet becomes a notebook in each language: its module docstring (in that language,
from :mod:`sitetools.notebook_translations`) a Markdown cell, each named cell a code cell
(without the ``--8<--`` section markers) followed by that cell's recorded output. Nothing
is executed: the outputs come from the ``.out`` file the tests check.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from sitetools import REPO, hant, recordings
from sitetools.i18n import SOURCE_LANGUAGE, Language, load_languages
from sitetools.notebook_translations import Docstring, docstring_in, translations_file
from sitetools.snippets import (
    PREAMBLE,
    SNIPPETS_DIR,
    discover,
    output_path,
    parse_cells,
    read_sections,
    strip_section_markers,
)

# Generated notebooks live outside docs/ so that writing them never triggers a rebuild:
# each language's under NOTEBOOK_ROOT/<code>/.
NOTEBOOK_ROOT = REPO / ".cache" / "notebooks"
NAV_PREFIX = "notebooks"
# The nav section each snippet folder's notebooks go under (the chapter's own title).
CHAPTERS = {
    "basics": "JAX basics",
    "data_parallel": "Data parallelism",
    "distributed_arrays": "Distributed arrays",
    "multi_process": "Beyond one process",
    "model_sharding": "Beyond one process",
    "pytorch": "Side by side with PyTorch",
    "training_step": "A real training step",
    "checkpoints": "Checkpoints and data across processes",
    "more_splits": "More ways to split",
    "seeing_what_runs": "Seeing what runs",
    "cluster": "On a real cluster",
}
KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}
# mkdocs-jupyter puts on every page a loader that fetches MathJax from a CDN when a notebook
# is shown. The notebooks hold no math (notebook_for refuses TeX in a docstring), so the
# loader goes, and no request leaves the site.
MATHJAX_LOADER = re.compile(r"<script data-mkdocs-jupyter-mathjax=.*?</script>\n?", re.DOTALL)
TEX_MATH = re.compile(r"\$\$|\\\(|\\\[|\$[^\s$][^$\n]*\$")


@dataclass(frozen=True)
class NotebookPage:
    """Where a snippet's notebook sits in the site."""

    snippet: Path
    src_uri: str  # for example "notebooks/data_parallel/linear_regression.ipynb"
    title: str


def nav_sections(pages: list[NotebookPage]) -> list[dict[str, list]]:
    """The notebooks grouped by chapter, in the order of CHAPTERS, each under the short
    title that its title has before a colon."""
    sections: dict[str, list] = {}
    order = list(dict.fromkeys(CHAPTERS.values()))
    for page in pages:
        folder = page.snippet.parent.name
        chapter = CHAPTERS.get(folder, folder.replace("_", " ").capitalize())
        sections.setdefault(chapter, []).append({short_title(page.title): page.src_uri})
    ranked = sorted(sections, key=lambda c: order.index(c) if c in order else len(order))
    return [{chapter: sections[chapter]} for chapter in ranked]


def short_title(title: str) -> str:
    """A notebook's title up to its first colon, as the nav lists it.

    >>> short_title("Sharded matrix multiplication: the layouts"), short_title("分片矩阵乘法：布局")
    ('Sharded matrix multiplication', '分片矩阵乘法')
    """
    return re.split(r": |：", title, maxsplit=1)[0]


def title_of(snippet: Path, language: Language | None = None) -> str:
    """The first line of the snippet's module docstring, in ``language`` (English: None)."""
    docstring = _docstring(snippet, language).text or snippet.stem
    return docstring.strip().splitlines()[0].rstrip(".。")


def notebook_for(snippet: Path, language: Language | None = None) -> nbformat.NotebookNode:
    """Build the notebook of a snippet in ``language`` (English: None), with its recorded
    outputs."""
    source = snippet.read_text(encoding="utf-8")
    tree = ast.parse(source)
    shown = _docstring(snippet, language)
    docstring = shown.text
    recorded = output_path(snippet)
    outputs = read_sections(recorded.read_text(encoding="utf-8")) if recorded.exists() else {}
    cells = []
    if docstring:
        math = TEX_MATH.search(docstring)
        if math:
            raise ValueError(
                f"{snippet}: its docstring holds TeX math ({math[0]!r}), "
                f"which its notebook page cannot draw: the site loads no MathJax (it would "
                f"come from a CDN). Say it in words, or show the formula on the tutorial "
                f"page, where it becomes MathML."
            )
        first, _, rest = docstring.partition("\n")
        if rest and not rest.startswith("\n"):
            raise ValueError(
                f"{snippet}: the first line of its docstring, the title of its notebook page "
                f"(in this language: {first!r}), goes on with {rest.splitlines()[0]!r} on the "
                f"next line; write the title on one line, then a blank line."
            )
        if not shown.translated and language is not None:  # English, under the notice
            rest = f"\n> **{language.name}**: {language.notice}\n{rest}"
        if snippet.is_relative_to(REPO) and recordings.stale(snippet):  # as on tutorial pages
            labels = (language or load_languages()[SOURCE_LANGUAGE]).labels
            scripts = snippet.relative_to(REPO).as_posix()
            rest = f"\n> ⚠️ {labels['stale_output'].format(scripts=scripts)}\n{rest}"
        heading = f"# {first.rstrip('.。')}\n{rest}".rstrip()
        cells.append(new_markdown_cell(heading, id="docstring"))
    count = 0
    for cell in parse_cells(snippet):
        code = strip_section_markers(cell.source)
        if cell.name == PREAMBLE and ast.get_docstring(tree):
            # Drop the docstring, already shown as Markdown, from the first cell.
            end = tree.body[0].end_lineno or 0
            code = "".join(code.splitlines(keepends=True)[end:])
        code = code.strip("\n")
        if not code:
            continue
        count += 1
        text = outputs.get(cell.name)
        cell_outputs = [new_output("stream", name="stdout", text=text)] if text else []
        # Cell ids are the cell names, so the same snippet always gives the same file.
        cells.append(new_code_cell(code, id=cell.name, execution_count=count, outputs=cell_outputs))
    notebook = new_notebook(
        cells=cells, metadata={"kernelspec": KERNEL, "language_info": {"name": "python"}}
    )
    nbformat.validate(notebook)
    return notebook


def write_notebooks(language: Language) -> list[NotebookPage]:
    """Write every snippet's notebook in ``language`` under its folder of NOTEBOOK_ROOT
    (only when it changed)."""
    return [
        _write_notebook(snippet, language.code, *_stamp(snippet, language))
        for snippet in discover()
    ]


def use_cache_of(config: MkDocsConfig, language: Language) -> None:
    """Give each language its own mkdocs-jupyter cache folder: a build evicts every entry it
    did not use, and the languages' builds (side by side) use different notebooks."""
    plugin = config.plugins.get("mkdocs-jupyter")
    if plugin is not None and not plugin.config["cache_dir"].endswith(f"/{language.code}"):
        plugin.config["cache_dir"] = f"{plugin.config['cache_dir']}/{language.code}"


def notebook_files(config: MkDocsConfig, language: Language) -> list[File]:
    """The notebook pages of a build, as MkDocs files (mkdocs-jupyter renders them)."""
    files = []
    root = str(NOTEBOOK_ROOT / language.code)
    for page in write_notebooks(language):
        file = File(page.src_uri, root, config.site_dir, config.use_directory_urls)
        # "Edit this page" leads to the snippet (edit_uri is relative to docs/<language>/).
        file.edit_uri = f"../../{page.snippet.relative_to(REPO).as_posix()}"
        files.append(file)
    return files


def copy_scripts(config: MkDocsConfig) -> None:
    """Put each snippet's .py next to its notebook page, for the download button."""
    for snippet in discover():
        relative = snippet.relative_to(SNIPPETS_DIR)
        target = Path(config.site_dir) / NAV_PREFIX / relative.with_suffix("") / relative.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(snippet, target)


def without_mathjax(html: str) -> str:
    """A built page without mkdocs-jupyter's MathJax loader.

    >>> without_mathjax('<p>x</p><script data-mkdocs-jupyter-mathjax="{}">load()</script>\\n')
    '<p>x</p>'
    """
    return MATHJAX_LOADER.sub("", html)


def is_notebook(file: File) -> bool:
    """Whether a page of the build is one of the generated notebooks."""
    return file.abs_src_path is not None and Path(file.abs_src_path).is_relative_to(NOTEBOOK_ROOT)


def _docstring(snippet: Path, language: Language | None) -> Docstring:
    return docstring_in(language or load_languages()[SOURCE_LANGUAGE], snippet)


def _stamp(snippet: Path, language: Language) -> tuple[int, ...]:
    """What a notebook is made from: the snippet, its recording (and whether it is older
    than the snippet), the translations and, for a converted language, its terms."""
    terms = [hant.TERMS_FILE] if language.converted_from else []
    made_from = (
        snippet,
        output_path(snippet),
        recordings.RECORDINGS_FILE,
        translations_file(language),
        *terms,
    )
    return tuple(path.stat().st_mtime_ns if path.exists() else 0 for path in made_from)


@functools.cache  # per snippet and modification times: builds under `mkdocs serve` repeat this
def _write_notebook(snippet: Path, code: str, *stamp: int) -> NotebookPage:
    relative = snippet.relative_to(SNIPPETS_DIR).with_suffix(".ipynb")
    src_uri = f"{NAV_PREFIX}/{relative.as_posix()}"
    target = NOTEBOOK_ROOT / code / src_uri
    language = None if code == SOURCE_LANGUAGE else load_languages()[code]
    text = nbformat.writes(notebook_for(snippet, language)) + "\n"
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        # Atomically: a build running beside this one (the tests run several) never reads
        # half a notebook.
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
    return NotebookPage(snippet, src_uri, title_of(snippet, language))
