"""MkDocs hooks of the site: languages, English fallbacks, and snippet notebooks.

See tools/sitetools/i18n.py and tools/sitetools/notebooks.py for what each part does.
"""

from __future__ import annotations

import logging

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from sitetools import i18n, includes, notebooks

log = logging.getLogger("mkdocs.hooks.jaxpar")
_state = {"serving": False}


def on_startup(command: str, dirty: bool) -> None:
    _state["serving"] = command == "serve"


@event_priority(100)  # before the theme's search plugin reads the language
def on_config(config):
    language = i18n.language_of(config)
    i18n.configure(config, language)
    pages = notebooks.write_notebooks()
    section = language.nav.get("Notebooks", "Notebooks")
    config.nav = (config.nav or []) + [{section: [{page.title: page.src_uri} for page in pages]}]
    config["jaxpar_notebooks"] = pages
    return config


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files, config):
    language = i18n.language_of(config)
    root = str(notebooks.NOTEBOOK_ROOT)
    for page in notebooks.write_notebooks():
        file = notebooks_file(page, root, config)
        files.append(file)
    return i18n.add_fallbacks(files, config, language)


def notebooks_file(page, root, config):
    from mkdocs.structure.files import File

    file = File(page.src_uri, root, config.site_dir, config.use_directory_urls)
    file.edit_uri = f"../../{page.snippet.relative_to(i18n.REPO).as_posix()}"
    return file


def on_page_markdown(markdown, page, config, files):
    problems = includes.check_includes(
        markdown, f"docs/{i18n.language_of(config).code}/{page.file.src_uri}"
    )
    if problems:
        raise PluginError("\n".join(problems))
    if getattr(page.file, "fallback", False):
        return i18n.add_notice(markdown, i18n.language_of(config))
    return markdown


def on_page_context(context, page, config, nav):
    language = i18n.language_of(config)
    config.extra["alternate"] = i18n.alternates(page.url, language, i18n.root_url(config, language))
    return context


def on_post_build(config):
    if i18n.language_of(config).code == i18n.SOURCE_LANGUAGE:
        i18n.build_other_languages(config, serving=_state["serving"])
