"""MkDocs hooks of the site: languages, English fallbacks, snippet notebooks, fast serving.

Each part lives in a module of tools/sitetools/: apisearch, calculator, codeblocks, diagrams, hant, i18n,
includes, mathml, nbhtml, notebooks, recordings, searchwords, serving, status, stylesheets, templates.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from sitetools import (
    apisearch,
    calculator,
    codeblocks,
    diagrams,
    hant,
    i18n,
    includes,
    mathml,
    nbhtml,
    notebooks,
    recordings,
    roles,
    searchwords,
    serving,
    status,
    stylesheets,
    templates,
)


def on_startup(command: str, dirty: bool) -> None:
    # Kept in sitetools, not here: `mkdocs serve` reloads this file for every rebuild.
    serving.state.serving = command == "serve"
    serving.state.dirty = dirty
    templates.cache_nbconvert_templates()
    nbhtml.export_notebooks_without_soup()


@event_priority(100)  # before the theme's search plugin reads the language
def on_config(config):
    language = i18n.language_of(config)
    i18n.configure(config, language)
    searchwords.teach_jieba()  # before any Chinese page is indexed
    searchwords.set_separator(config, language.code)
    diagrams.use_drawings(config)
    notebooks.use_cache_of(config, language)
    sections = notebooks.nav_sections(notebooks.write_notebooks(language))
    config.nav = (config.nav or []) + i18n.translate_nav([{"Notebooks": sections}], language)
    return config


@event_priority(100)  # before mkdocs-jupyter turns .ipynb files into pages
def on_files(files, config):
    language = i18n.language_of(config)
    for file in notebooks.notebook_files(config, language):
        files.append(file)
    files = i18n.add_fallbacks(files, config, language)
    serving.mark_stale_pages(files, language.code)
    return files


@event_priority(-100)  # after mkdocstrings has set up its handlers
def on_pre_build(config):
    serving.forget_other_search_index(config)
    mkdocstrings = config.plugins.get("mkdocstrings")
    if mkdocstrings is not None:
        templates.cache_compiled_templates(mkdocstrings.handlers.get_handler("python").env)


def on_env(env, config, files):  # after the pages are read, before they are written
    templates.cache_compiled_templates(env)
    language = i18n.language_of(config)
    serving.keep_titles_of_pages_not_rebuilt(files, language.code)
    if language.code == i18n.SOURCE_LANGUAGE:
        # The other languages' builds are forked from this one: what every build computes
        # once is done before (the notebooks' stylesheet), and each inherits it.
        stylesheets.prune_ahead(page.content for page in _notebook_pages(files))
        i18n.start_other_languages(config, serving.state)
    return env


def _notebook_pages(files):
    return [f.page for f in files if notebooks.is_notebook(f) and f.page and f.page.content]


def on_page_markdown(markdown, page, config, files):
    language = i18n.language_of(config)
    problems = includes.check_includes(markdown, language.source(page.file.src_uri))
    if problems:
        raise PluginError("\n".join(problems))
    if status.MARKER in markdown:  # only the translation status page
        markdown = markdown.replace(status.MARKER, status.status_table(language))
    markdown = hant.with_traditional_column(markdown)  # the glossary's 繁體中文 terms
    if getattr(page.file, "fallback", False):
        markdown = i18n.add_notice(markdown, language)
    if language.converted_from:  # 繁體中文: the 简体中文 page, converted
        markdown = hant.convert_markdown(markdown)
    shown = recordings.shown_outputs(markdown)
    page.meta["recorded_with"] = recordings.recorded_with(shown, language.labels["recorded_with"])
    if stale := [snippet for snippet in shown if recordings.stale(snippet)]:
        markdown = recordings.with_stale_notice(markdown, stale, language.labels["stale_output"])
    return calculator.with_calculator(markdown)  # the memory calculator's formula and data


def on_page_content(html, page, config, files):
    language = i18n.language_of(config)
    try:
        html = mathml.with_mathml(html, language.source(page.file.src_uri))
    except mathml.MathError as error:
        raise PluginError(str(error)) from None
    if language.converted_from:  # diagrams are drawn from the 简体中文 text, labels and all
        html = hant.convert_drawings(html)
    html = roles.with_links(html, page.url)  # the docstrings' :func:`name` on API pages
    return codeblocks.excluded_from_search(html)


@event_priority(100)  # before the search plugin indexes the page
def on_page_context(context, page, config, nav):
    if notebooks.is_notebook(page.file):
        snippet = recordings.snippet_of_notebook(page.file.src_uri)
        label = i18n.language_of(config).labels["recorded_with"]
        page.meta["recorded_with"] = recordings.recorded_with([snippet], label)
        # The tutorial pages already hold this code and output: keep search results to them
        # (and skip indexing the notebooks' large HTML on every rebuild).
        page.meta["search"] = {"exclude": True}
    else:  # put back in on_post_page
        page.content, page.code_set_aside = codeblocks.set_aside(page.content)
    language = i18n.language_of(config)
    config.extra["alternate"] = i18n.alternates(page.url, language)
    serving.remember_rebuilt_page(language.code, page)
    return context


@event_priority(-100)  # after mkdocs-jupyter has added its MathJax loader
def on_post_page(output, page, config):
    output = i18n.without_theme_alternates(output)
    if hasattr(page, "code_set_aside"):
        output = codeblocks.put_back(output, page.code_set_aside, page.file.src_uri)
    if notebooks.is_notebook(page.file):
        output = stylesheets.with_shared_stylesheet(output, page.url, config.site_dir)
    return notebooks.without_mathjax(output)


def on_build_error(error):
    i18n.stop_other_languages()


def on_post_build(config):
    notebooks.copy_scripts(config)
    if not serving.state.serving:  # under `make serve` an edited diagram may need it
        diagrams.drop_unused_mermaid(config.site_dir)
    language = i18n.language_of(config)
    serving.merge_search_index(config, language.code)  # runs after the search plugin's
    apisearch.leave_out_docstrings(config.site_dir, language.code)
    try:
        searchwords.fix_query_segmenting(Path(config.site_dir))
    except searchwords.WorkerChanged as error:
        raise PluginError(str(error)) from None
    if language.code == i18n.SOURCE_LANGUAGE:
        i18n.build_other_languages(config, serving.state)
