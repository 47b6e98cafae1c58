"""Fast and correct rebuilds under ``make serve`` (``mkdocs serve --dirty``).

A dirty rebuild renders only the pages whose source file changed. That alone is wrong here
in four ways, which this module corrects:

- a page must also be rebuilt when a snippet or output it includes changed, and every page
  when the configuration, the theme overrides, the hooks or the library changed;
- Material's search plugin is one instance shared by every language build of the process
  (MkDocs caches plugins that have ``on_startup``), so its memory of the previous index is
  useless here; the index of each language is kept here instead, and merged page by page;
- the pages it does not read have no title, so the nav and the Previous/Next links of the
  pages it renders would name them "None"; each page keeps the title of its last build;
- the languages other than English are rebuilt, dirty as well, into a cache that outlives
  the temporary site directory of ``mkdocs serve``, and only when their inputs changed.

What a language's build knew (its inputs, its pages' titles, its search index) is saved
beside its cache, so that a restart of ``make serve`` rebuilds only what changed since, and
so that a first build made in a process of its own (side by side with the others) can be
rebuilt dirty afterwards in the serving process.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from sitetools import REPO
from sitetools.includes import find_includes
from sitetools.recordings import RECORDINGS_FILE

log = logging.getLogger("mkdocs.hooks.jaxpar")

# Inputs that can change any page: a change rebuilds every page of every language.
CONFIG_INPUTS = ["mkdocs.yml", "docs/languages.yml", "overrides", "tools", "src"]
# Each language but English, built under `make serve` (and what its build knew, as JSON).
SERVE_CACHE = REPO / ".cache" / "site"


@dataclass
class ServeState:
    """What survives from one rebuild to the next (the hooks module itself is reloaded)."""

    serving: bool = False
    dirty: bool = False
    config_stamps: dict[str, tuple] = field(default_factory=dict)
    search_entries: dict[str, list[dict]] = field(default_factory=dict)
    rebuilt: dict[str, set[str]] = field(default_factory=dict)
    titles: dict[str, dict[str, str]] = field(default_factory=dict)


state = ServeState()


def stamp(paths: list[Path]) -> tuple:
    """Modification times of every file under ``paths``."""
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*"))]
    files = [f for f in files if f.is_file() and "__pycache__" not in f.parts]
    return tuple(sorted((str(f), f.stat().st_mtime_ns) for f in files))


def dirty_serving() -> bool:
    return state.serving and state.dirty


def mark_stale_pages(files: Files, code: str) -> None:
    """Make the dirty rebuild also render the pages that changed through their inputs."""
    if not dirty_serving():
        return
    current = stamp([REPO / p for p in CONFIG_INPUTS])
    previous = state.config_stamps.get(code)
    everything = previous != current
    if everything and previous is not None:
        changed = sorted({path for path, _ in set(previous) ^ set(current)})
        log.info("%s changed: rebuilding every page of '%s'", ", ".join(changed[:3]), code)
    state.config_stamps[code] = current
    for file in files.documentation_pages():
        if everything or _includes_changed(file):
            file.is_modified = lambda: True  # type: ignore[method-assign]


def _includes_changed(file: File) -> bool:
    destination = Path(file.abs_dest_path)
    if file.abs_src_path is None or not file.src_uri.endswith(".md") or not destination.exists():
        return False
    built = destination.stat().st_mtime
    text = Path(file.abs_src_path).read_text(encoding="utf-8")
    includes = find_includes(text)
    # What recorded the outputs (a re-recording within tolerance changes only this file).
    recorded = RECORDINGS_FILE if any(i.path.endswith(".out") for i in includes) else None
    paths = [REPO / include.path for include in includes] + ([recorded] if recorded else [])
    return any(path.exists() and path.stat().st_mtime > built for path in paths)


def remember_rebuilt_page(code: str, page: Page) -> None:
    """Note that ``page`` was rendered in this build, and the title it was given."""
    state.rebuilt.setdefault(code, set()).add(page.url)
    if page.title is not None:
        state.titles.setdefault(code, {})[page.file.src_uri] = page.title


def keep_titles_of_pages_not_rebuilt(files: Files, code: str) -> None:
    """Give each page this dirty rebuild did not read the title of its last build."""
    if not dirty_serving():
        return
    titles = state.titles.get(code, {})
    for file in files.documentation_pages():
        page = file.page
        if page is not None and page.markdown is None and file.src_uri in titles:
            page.title = titles[file.src_uri]


def forget_other_search_index(config: MkDocsConfig) -> None:
    """Stop the shared search plugin from merging in the index of the previous build.

    Under ``--dirty`` it keeps its last index to merge into the next, which here may be
    another language's; :func:`merge_search_index` does the merging instead.
    """
    search = config.plugins.get("material/search") or config.plugins.get("search")
    if search is not None:
        search.search_index_prev = None


def merge_search_index(config: MkDocsConfig, code: str) -> None:
    """Complete the index the search plugin just wrote with the pages not rebuilt this time."""
    if not dirty_serving():
        return
    path = Path(config.site_dir) / "search" / "search_index.json"
    index = json.loads(path.read_text(encoding="utf-8"))
    rebuilt = state.rebuilt.pop(code, set())
    kept = [
        e for e in state.search_entries.get(code, []) if e["location"].split("#")[0] not in rebuilt
    ]
    index["docs"] = kept + index["docs"]
    state.search_entries[code] = index["docs"]
    path.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def _saved(code: str) -> Path:
    return SERVE_CACHE / f"{code}.json"


def save_language(code: str, inputs: tuple) -> None:
    """Save what the build of ``code`` just made of ``inputs`` (:func:`stamp`'s) knows."""
    saved = {
        "inputs": inputs,
        "config": state.config_stamps.get(code, ()),
        "titles": state.titles.get(code, {}),
    }
    partial = _saved(code).with_suffix(".partial")
    partial.write_text(json.dumps(saved, ensure_ascii=False), encoding="utf-8")
    partial.replace(_saved(code))  # whole or not at all, if serve is stopped meanwhile


def restore_language(code: str) -> tuple | None:
    """Take up what the last build of ``code`` into the cache knew, made by another
    process or before a restart; returns the stamp of its inputs (None: nothing saved)."""
    index = SERVE_CACHE / code / "search" / "search_index.json"
    if not _saved(code).exists() or not index.exists():
        return None
    try:
        saved = json.loads(_saved(code).read_text(encoding="utf-8"))
        config = tuple(tuple(entry) for entry in saved["config"])
        titles, inputs = dict(saved["titles"]), tuple(tuple(entry) for entry in saved["inputs"])
        entries = json.loads(index.read_text(encoding="utf-8"))["docs"]
    except (ValueError, KeyError, TypeError):  # damaged, or of another version: build anew
        return None
    state.config_stamps[code], state.titles[code] = config, titles
    state.search_entries[code] = entries
    return inputs
