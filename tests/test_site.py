"""The built site: every language, its search index, switcher, notebooks and fallbacks."""

from __future__ import annotations

import functools
import html
import json
import re
import xml.etree.ElementTree as ET
from html import unescape
from pathlib import Path
from urllib.parse import urljoin

import nbformat
import pytest
from sitebuild import SMALL_SNIPPET, build, copy_project
from sitetools import REPO, mkdocs_settings
from sitetools.codeblocks import put_back, set_aside
from sitetools.i18n import load_languages, nav_titles
from sitetools.links import start_tags
from sitetools.notebook_translations import docstring_in
from sitetools.notebooks import CHAPTERS, NOTEBOOK_ROOT, notebook_for, title_of
from sitetools.snippets import discover, output_path, parse_cells, read_sections
from sitetools.stylesheets import with_shared_stylesheet
from sitetools.weight import (
    BUDGET,
    INDEX_BUDGET,
    PAGE_TYPES,
    index_weight,
    loaded_files,
    page_weight,
    sent_size,
)

LANGUAGES = load_languages()
OTHERS = [code for code in LANGUAGES if code != "en"]
SITE_URL = mkdocs_settings()["site_url"]
SITEMAP = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
XHTML = "{http://www.w3.org/1999/xhtml}"
HAN = re.compile(r"[\u4e00-\u9fff]")
HANGUL = re.compile(r"[\uac00-\ud7a3]")


def language_root(site: Path, code: str) -> Path:
    return site if code == "en" else site / code


class Html:
    """The bits of a built page the tests look at."""

    def __init__(self, text: str):
        self.lang = ""
        self.switcher: dict[str, str] = {}
        self.heading_ids: list[str] = []
        self.canonical = ""
        self.hreflang: dict[str, str] = {}
        for tag, attributes in start_tags(text, r"html|a|h[2-6]|link"):
            if tag == "html":
                self.lang = attributes.get("lang") or ""
            if tag == "a" and "md-select__link" in (attributes.get("class") or ""):
                self.switcher[attributes["hreflang"]] = attributes["href"]
            if re.fullmatch(r"h[2-6]", tag) and attributes.get("id"):
                self.heading_ids.append(attributes["id"])
            if tag == "link" and attributes.get("rel") == "canonical":
                self.canonical = attributes["href"]
            if tag == "link" and attributes.get("rel") == "alternate" and "hreflang" in attributes:
                self.hreflang[attributes["hreflang"]] = attributes["href"]


@functools.cache  # parsed once per test process
def pages(site: Path, code: str) -> dict[str, Html]:
    """Every HTML page of one language, by its URL relative to that language's root."""
    root = language_root(site, code)
    found = {}
    for path in root.rglob("index.html"):
        relative = path.relative_to(root)
        if code == "en" and relative.parts[0] in OTHERS:
            continue
        url = relative.parent.as_posix()
        found["" if url == "." else url + "/"] = Html(path.read_text(encoding="utf-8"))
    return found


def test_every_language_is_built_with_its_own_lang(site):
    for code in LANGUAGES:
        built = pages(site, code)
        assert "" in built and "data-parallel/first-example/" in built, code
        assert {page.lang for page in built.values()} == {LANGUAGES[code].tag}


def test_languages_have_the_same_pages(site):
    english = set(pages(site, "en"))
    for code in OTHERS:
        assert set(pages(site, code)) == english, code


def test_search_engines_find_each_page_in_every_language(site):
    """Every page has its absolute canonical link; every language's sitemap lists its pages,
    each with its absolute counterparts in every language (hreflang) and x-default (English);
    no page keeps the theme's hreflang links to each language's home page."""
    roots = {code: f"{SITE_URL}{'' if code == 'en' else code + '/'}" for code in LANGUAGES}
    tags = {LANGUAGES[code].tag: root for code, root in roots.items()}
    tags["x-default"] = roots["en"]
    for code in LANGUAGES:
        built = pages(site, code)
        for url, page in built.items():
            assert page.canonical == roots[code] + url, (code, url)
            assert not page.hreflang, (code, url)
        sitemap = ET.parse(language_root(site, code) / "sitemap.xml").getroot()
        entries = {
            entry.findtext(f"{SITEMAP}loc"): {
                link.get("hreflang"): link.get("href") for link in entry.iter(f"{XHTML}link")
            }
            for entry in sitemap.iter(f"{SITEMAP}url")
        }
        assert set(entries) == {roots[code] + url for url in built}, code
        for loc, alternates in entries.items():
            url = loc.removeprefix(roots[code])
            assert alternates == {lang: root + url for lang, root in tags.items()}, loc


def test_switcher_leads_to_the_same_page_in_each_language(site):
    for code in LANGUAGES:
        prefix = "" if code == "en" else f"{code}/"
        for url, page in pages(site, code).items():
            codes = {LANGUAGES[c].tag: c for c in LANGUAGES}
            assert set(page.switcher) == set(codes), (code, url)
            for target_tag, href in page.switcher.items():
                target_code = codes[target_tag]
                resolved = urljoin(f"http://site/{prefix}{url}", href)
                target_prefix = "" if target_code == "en" else f"{target_code}/"
                assert resolved == f"http://site/{target_prefix}{url}", (
                    code,
                    url,
                    target_code,
                    href,
                )


def test_heading_ids_are_identical_across_languages(site):
    english = pages(site, "en")
    for code in OTHERS:
        for url, page in pages(site, code).items():
            assert page.heading_ids == english[url].heading_ids, (code, url)


def search_index(site: Path, code: str) -> dict:
    return json.loads(
        (language_root(site, code) / "search" / "search_index.json").read_text(encoding="utf-8")
    )


def test_each_language_has_its_own_search_index(site):
    for code in LANGUAGES:
        index = search_index(site, code)
        locations = {doc["location"].split("#")[0] for doc in index["docs"]}
        assert locations <= set(pages(site, code)), code
        assert not any(loc.startswith(tuple(f"{c}/" for c in OTHERS)) for loc in locations)
    chapter = "data-parallel/first-example/"
    titles = {
        code: next(d["title"] for d in search_index(site, code)["docs"] if d["location"] == chapter)
        for code in LANGUAGES
    }
    assert not HAN.search(titles["en"]) and not HANGUL.search(titles["en"])
    assert HAN.search(titles["zh"]), titles
    assert HANGUL.search(titles["ko"]), titles


def test_the_repository_link_asks_nothing_of_github(site):
    """overrides/partials/source.html: the header links the repository without Material's
    widget, which would ask api.github.com for its stars and forks on every page."""
    for code in LANGUAGES:
        html = (language_root(site, code) / "index.html").read_text(encoding="utf-8")
        assert 'class="md-source"' in html, code
        assert 'data-md-component="source"' not in html, code


def test_the_api_docstrings_are_in_the_english_search_index_only(site):
    """sitetools.apisearch: each entry keeps its title everywhere, its English text in English."""
    for code in LANGUAGES:
        docs = {d["location"]: d for d in search_index(site, code)["docs"]}
        entry = docs["api/targets/#jaxpar.compile_for"]
        assert "compile_for(target, function" in entry["title"], (code, entry["title"])
        assert ("as if this machine had them" in entry["text"]) == (code == "en"), code


def test_chinese_search_index_is_segmented_by_jieba(site):
    index = search_index(site, "zh")
    text = " ".join(doc["text"] for doc in index["docs"])
    assert "\u200b" in text, "jieba did not segment the Chinese index"
    assert "\\u200b" in index["config"]["separator"] or "\u200b" in index["config"]["separator"]


def test_pages_show_their_last_update_in_their_language(site):
    for code, marker in {"en": "2026", "zh": "年", "ko": "년"}.items():
        html = (language_root(site, code) / "data-parallel" / "modern" / "index.html").read_text(
            encoding="utf-8"
        )
        date = re.search(r'git-revision-date-localized-plugin-date"[^>]*>([^<]+)<', html)
        assert date and marker in date[1], (code, date and date[1])


def test_material_interface_is_in_each_language(site):
    placeholders = {
        "en": 'placeholder="Search"',
        "zh": 'placeholder="搜索"',
        "ko": 'placeholder="검색"',
    }
    for code, placeholder in placeholders.items():
        html = (language_root(site, code) / "index.html").read_text(encoding="utf-8")
        assert placeholder in html, code


@pytest.mark.parametrize("snippet", discover(), ids=lambda p: p.stem)
def test_notebook_page_and_download_in_every_language(site, snippet):
    relative = snippet.relative_to(REPO / "snippets").with_suffix("")
    recorded = read_sections(output_path(snippet).read_text(encoding="utf-8"))
    for code in LANGUAGES:
        folder = language_root(site, code) / "notebooks" / relative
        html = (folder / "index.html").read_text(encoding="utf-8")
        download = folder / f"{relative.name}.ipynb"
        assert f'href="{relative.name}.ipynb"' in html or download.name in html, code
        script = folder / f"{relative.name}.py"
        assert f'href="{script.name}"' in html
        # JupyterLab's stylesheet is one shared file (its cell rules), not 590 KB inline on every page
        assert "<style" not in html, code
        (stylesheet,) = re.findall(
            r'<link rel="stylesheet" href="([^"]*/notebook\.\w+\.css)"', html
        )
        assert ".jp-OutputArea" in (folder / stylesheet).read_text(encoding="utf-8")
        assert script.read_text(encoding="utf-8") == snippet.read_text(encoding="utf-8")
        notebook = nbformat.read(download, as_version=4)
        nbformat.validate(notebook)
        # Its text in the page's language (a Chinese page's, converted for 繁體中文)
        opening = docstring_in(LANGUAGES[code], snippet)
        assert opening.translated, (code, "older than its English docstring")
        title = title_of(snippet, LANGUAGES[code])
        assert notebook.cells[0].source.startswith(f"# {title}\n"), code
        assert f"<title>{title.replace('`', '')} - " in unescape(html), code
        outputs = {
            cell.id: "".join(o.text for o in cell.outputs)
            for cell in notebook.cells
            if cell.cell_type == "code"
        }
        names = [cell.name for cell in parse_cells(snippet)]
        assert set(outputs) <= set(names)
        for name, text in recorded.items():
            assert outputs[name] == text, (code, name)
            assert text.splitlines()[0] in unescape(html)


@pytest.mark.parametrize("code", LANGUAGES)
def test_every_page_type_loads_at_most_150_kb_and_a_search_index_of_at_most_250_kb(site, code):
    """HTML, stylesheets, scripts, icon, search worker and sitemap, gzipped as GitHub Pages
    sends them, and apart, the search index that the page asks for after its load event
    (test_browser checks that a page loads nothing else, and the index after load)."""
    root = language_root(site, code)
    for page in [root / url / "index.html" for url in PAGE_TYPES.values()] + [root / "404.html"]:
        weight, index = page_weight(site, page), index_weight(site, page)
        biggest = sorted(((sent_size(f), f.name) for f in loaded_files(site, page)), reverse=True)
        assert weight <= BUDGET, f"{page}: {weight} B compressed; the biggest: {biggest[:4]}"
        assert 0 < index <= INDEX_BUDGET, f"{page}: its search index is {index} B compressed"


@pytest.mark.parametrize("code", OTHERS)
def test_every_language_is_styled_as_english_is(site, code):
    """Each page type loads English's stylesheets, byte for byte, and what they style by
    language is line breaking only: colours and font sizes are the same in every language
    (test_browser runs axe-core's color-contrast rule in English only)."""
    english, root = language_root(site, "en"), language_root(site, code)

    def stylesheets(root: Path, page: Path) -> dict[Path, bytes]:
        files = loaded_files(site, root / page)
        return {f.relative_to(root): f.read_bytes() for f in files if f.suffix == ".css"}

    for page in [Path(url) / "index.html" for url in PAGE_TYPES.values()] + [Path("404.html")]:
        styles = stylesheets(root, page)
        assert styles and styles == stylesheets(english, page), (
            f"{code}/{page}: not English's stylesheets"
        )
        for name, text in styles.items():
            # Every innermost rule, then those whose selector names a language: one pattern
            # that looks for the selector first backtracks for 5 s over a theme's CSS.
            for rule in re.finditer(rb"([^{}]*)\{([^{}]*)\}", text):
                if b":lang(" not in rule[1] and b"[lang" not in rule[1]:
                    continue
                properties = set(re.findall(rb"([\w-]+)\s*:", rule[2]))
                assert properties <= LINE_BREAKING, (
                    f"{code}/{name} styles {sorted(properties - LINE_BREAKING)} by language"
                )


LINE_BREAKING = {b"word-break", b"overflow-wrap", b"line-break"}


def test_notebooks_export_as_nbconvert_would_without_its_soup():
    """sitetools.nbhtml's export gives the page nbconvert's own gives, parsed (tabindex
    and all): a new nbconvert that changes its export fails here."""
    from bs4 import BeautifulSoup
    from nbconvert import HTMLExporter
    from sitetools import nbhtml

    notebook = notebook_for(REPO / "snippets" / f"{SMALL_SNIPPET}.py")
    notebook.cells.append(nbformat.v4.new_markdown_cell('<img src="a.png">'))
    exporter = HTMLExporter(template_name="lab")
    theirs, _ = nbhtml.ORIGINAL(exporter, notebook)
    ours, _ = nbhtml.export_without_soup(exporter, notebook)
    assert ours.count('tabindex="0"') == theirs.count('tabindex="0"') > 4
    assert str(BeautifulSoup(ours, "html.parser")) == theirs
    assert theirs.count("No description has been provided") == 1


def test_a_notebook_page_links_its_stylesheets_at_the_end_of_its_head(tmp_path):
    page = "<head><x></head><body><p>a</p><style>x{}</style><p>b</p><style>y{}</style></body>"
    shared = with_shared_stylesheet(page, "notebooks/a/b/", str(tmp_path))
    (name,) = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.css")]
    assert shared == (
        f'<head><x><link rel="stylesheet" href="../../../{name}">\n</head>'
        "<body><p>a</p><p>b</p></body>"
    )
    assert (tmp_path / name).read_text(encoding="utf-8") == "x{}y{}"
    assert with_shared_stylesheet("<p>none</p>", "x/", str(tmp_path)) == "<p>none</p>"


def test_a_notebook_page_with_a_stylesheet_in_its_head_is_refused(tmp_path):
    page = "<head><style>x{}</style></head><body><style>y{}</style></body>"
    with pytest.raises(ValueError, match=r"notebooks/a/: a stylesheet inside <head>"):
        with_shared_stylesheet(page, "notebooks/a/", str(tmp_path))


def test_missing_nbconvert_templates_are_named(monkeypatch, tmp_path):
    from sitetools import stylesheets

    monkeypatch.setattr(stylesheets, "jupyter_path", lambda *parts: [str(tmp_path)])
    with pytest.raises(RuntimeError, match=r"nbconvert's lab templates are in none of .*: cannot"):
        stylesheets.template_classes.__wrapped__()


def test_code_blocks_set_aside_for_search_are_back_on_every_page(site):
    pages = [page for page in site.rglob("*.html") if "/notebooks/" not in page.as_posix()]
    assert pages
    for page in pages:
        assert "data-set-aside" not in page.read_text(encoding="utf-8"), page
    tutorial = language_root(site, "en") / PAGE_TYPES["tutorial"] / "index.html"
    assert tutorial.read_text(encoding="utf-8").count("<pre>") >= 2, (
        "the tutorial page lost its code blocks"
    )


def test_a_code_block_lost_between_search_and_page_is_named():
    block = '<div class="highlight" data-search-exclude><span class="filename">t</span><pre>x</pre>'
    html, blocks = set_aside(block + block)
    with pytest.raises(ValueError, match=r"page\.md: 2 code blocks were set aside .* has 1 place"):
        put_back(html.replace('<pre data-set-aside="1"></pre>', ""), blocks, "page.md")


def test_nbconvert_exporters_reuse_compiled_templates():
    from nbconvert import HTMLExporter
    from sitetools.templates import CACHE_DIR, cache_nbconvert_templates

    cache_nbconvert_templates()
    cache_nbconvert_templates()  # a second call wraps nothing twice
    assert HTMLExporter().environment.bytecode_cache.directory == str(CACHE_DIR)


def test_no_page_loads_mathjax_from_a_cdn(site):
    pages = list(site.rglob("*.html"))
    assert pages
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "data-mkdocs-jupyter-mathjax" not in html and "mathjax@" not in html, page


def test_a_docstring_with_tex_math_is_refused_for_its_notebook(tmp_path):
    snippet = tmp_path / "formula.py"
    snippet.write_text('"""The loss falls as $1/n$."""\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"formula\.py: its docstring holds TeX math"):
        notebook_for(snippet)


def test_a_docstring_title_wrapped_onto_two_lines_is_refused_for_its_notebook(tmp_path):
    snippet = tmp_path / "wrapped.py"
    snippet.write_text('"""Debugging: NaNs and the errors\nreaders search for.\n\nMore."""\n')
    with pytest.raises(ValueError, match=r"goes on with 'readers search for\.' on the next line"):
        notebook_for(snippet)


def test_every_snippet_folder_s_notebooks_go_under_their_chapter_s_title():
    titles = nav_titles(mkdocs_settings()["nav"])
    folders = {snippet.parent.name for snippet in discover()}
    assert folders <= set(CHAPTERS), f"add {sorted(folders - set(CHAPTERS))} to CHAPTERS"
    assert set(CHAPTERS.values()) <= titles  # each language's nav translates them


def test_generated_notebooks_are_not_committed():
    assert NOTEBOOK_ROOT.is_relative_to(REPO / ".cache")
    assert not list((REPO / "docs").rglob("*.ipynb")), "notebooks are generated from snippets"


# Breaking a copy of the site on purpose ------------------------------------------------


def test_a_new_english_page_falls_back_with_a_notice_and_its_new_diagram_in_the_browser(
    tmp_path,
):
    project = copy_project(tmp_path / "project")  # without docs/diagrams/: nothing is drawn
    extra = (
        "# An untranslated page {#untranslated}\n\nOnly in English, with \\(x^2\\).\n\n"
        "```mermaid\nflowchart LR\n    accTitle: Not drawn yet\n    a --> b\n```\n"
    )
    (project / "docs" / "en" / "extra.md").write_text(extra, encoding="utf-8")
    config = project / "mkdocs.yml"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            "  - glossary.md\n", "  - glossary.md\n  - extra.md\n"
        )
    )
    result = build(project, tmp_path / "site")
    assert result.returncode == 0, result.stderr
    for code in OTHERS:
        html = (tmp_path / "site" / code / "extra" / "index.html").read_text(encoding="utf-8")
        assert LANGUAGES[code].notice in html
        assert "Only in English" in html
        assert f'lang="{LANGUAGES[code].tag}"' in html
    english = (tmp_path / "site" / "extra" / "index.html").read_text(encoding="utf-8")
    assert "Only in English" in english and LANGUAGES["zh"].notice not in english
    # A diagram with no drawing yet is drawn by the Mermaid the site then keeps; math is MathML.
    assert '<pre class="mermaid"><code>flowchart LR' in english
    assert 'src="../assets/vendor/mermaid/mermaid.min.js"' in english
    assert (tmp_path / "site" / "assets" / "vendor" / "mermaid" / "mermaid.min.js").exists()
    assert "<msup><mi>x</mi><mn>2</mn></msup>" in english
    assert "diagram 'Not drawn yet' has no drawing in docs/diagrams/" in result.stderr


def test_published_pages_say_what_recorded_their_outputs_and_warn_of_nothing(site):
    """Each page's line names the JAX version and CPU of its outputs' recording, in its
    language; a page that shows no output has none; no page warns of a stale output."""
    from sitetools import recordings

    snippet = SMALL_SNIPPET.rsplit("/", 1)[-1]
    recorded = recordings.load()[f"snippets/{SMALL_SNIPPET}.py"]
    for code, language in LANGUAGES.items():
        root = language_root(site, code)
        line = html.escape(language.labels["recorded_with"].format(**recorded), quote=False)
        for page in ("data-parallel/first-example", f"notebooks/data_parallel/{snippet}"):
            shown = (root / page / "index.html").read_text(encoding="utf-8")
            assert f'<p class="jaxpar-recorded"><small>{line}</small></p>' in shown, (code, page)
            assert "make outputs" not in shown
        glossary = (root / "glossary" / "index.html").read_text(encoding="utf-8")
        assert "jaxpar-recorded" not in glossary  # it shows no output


def test_a_script_edited_after_its_recording_puts_a_warning_under_the_page_s_title(tmp_path):
    """As under `make serve` after a snippet edit: every page showing that script's output
    warns under its title, naming the script and the command that records it again; and
    so does the script's notebook page, in every language."""
    project = copy_project(tmp_path / "project")
    snippet = f"snippets/{SMALL_SNIPPET}.py"
    extra = f'# Outputs\n\n```text\n--8<-- "snippets/{SMALL_SNIPPET}.out:setup"\n```\n'
    (project / "docs" / "en" / "extra.md").write_text(extra, encoding="utf-8")
    config = project / "mkdocs.yml"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            "  - glossary.md\n", "  - glossary.md\n  - extra.md\n"
        )
    )
    with (project / snippet).open("a", encoding="utf-8") as script:
        script.write("# edited after the recording\n")
    assert build(project, tmp_path / "site").returncode == 0
    for code, language in LANGUAGES.items():
        shown = (tmp_path / "site" / language.prefix / "extra" / "index.html").read_text("utf-8")
        warning = html.escape(language.labels["stale_output"].format(scripts=snippet), quote=False)
        warning = re.sub(r"`([^`]*)`", r"<code>\1</code>", warning)
        assert f'<div class="admonition warning">\n<p>{warning}</p>' in shown, code
        assert shown.index("<h1") < shown.index('<div class="admonition warning">'), code
        assert "<title>Outputs - " in shown, code  # the title is still the page's
        notebook = tmp_path / "site" / language.prefix / "notebooks" / SMALL_SNIPPET / "index.html"
        assert html.escape(language.labels["stale_output"].format(scripts=snippet)).replace(
            "`", ""
        ) in re.sub(r"</?code>", "", notebook.read_text("utf-8")), code


def test_every_language_s_search_worker_lets_a_query_s_last_word_count(site, tmp_path):
    """sitetools.searchwords corrects Material's worker in each language (a query's last
    Chinese word was never looked up whole) and names a new worker it cannot correct."""
    from sitetools import searchwords

    for code in LANGUAGES:
        (worker,) = language_root(site, code).glob(searchwords.WORKER_GLOB)
        text = worker.read_text(encoding="utf-8")
        assert searchwords.WORKER_FIXED in text and searchwords.WORKER_SEGMENTING not in text
    changed = tmp_path / searchwords.WORKER_GLOB.replace("*", "0")
    changed.parent.mkdir(parents=True)
    changed.write_text(text.replace(searchwords.WORKER_FIXED, "for(;;)"), encoding="utf-8")
    with pytest.raises(searchwords.WorkerChanged, match="no longer segments Chinese queries"):
        searchwords.fix_query_segmenting(tmp_path)


# Both in one page, so one build shows both: each problem of a page is named.
MISSING_INCLUDES = {
    "snippets/data_parallel/nowhere.py": (
        "includes snippets/data_parallel/nowhere.py, which does not exist"
    ),
    "snippets/data_parallel/linear_regression.py:no_such_section": (
        "includes section 'no_such_section' of snippets/data_parallel/linear_regression.py, "
        "which has no such section"
    ),
}


def test_missing_includes_and_broken_anchors_fail_the_build_naming_page_and_path(tmp_path):
    """Missing includes in one language and a broken anchor in another: one build (each
    language is built by a process of its own) fails, naming every problem."""
    project = copy_project(tmp_path / "project")
    page = project / "docs" / "zh" / "glossary.md"
    blocks = "".join(f'\n```python\n--8<-- "{include}"\n```\n' for include in MISSING_INCLUDES)
    page.write_text(page.read_text(encoding="utf-8") + blocks, encoding="utf-8")
    page = project / "docs" / "ko" / "glossary.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[a](glossary.md#no-such-anchor)\n")
    result = build(project, tmp_path / "site")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    for expected in MISSING_INCLUDES.values():
        assert f"docs/zh/glossary.md {expected}" in output
    assert "a link 'glossary.md#no-such-anchor', but there is no such anchor" in output
    failed = re.search(r"the build of (.+) failed", output)
    assert failed and set(failed[1].split(", ")) == {"zh", "ko", "zh-hant"}, output


def test_a_failed_english_build_stops_the_other_languages_builds(tmp_path):
    """The other languages are built beside English's (forked once its pages are read): when
    English's build fails after that, it stops them at once (before they write a page), and
    no process is left writing the site."""
    project = copy_project(tmp_path / "project")
    template = project / "overrides" / "main.html"
    failing = '{% if config.theme.language == "en" %}{{ english_only_failure.here }}{% endif %}'
    text = template.read_text(encoding="utf-8")
    template.write_text(text.replace("{{ super() }}", failing + "{{ super() }}", 1), "utf-8")
    site = tmp_path / "site"
    result = build(project, site)
    assert result.returncode != 0
    assert "english_only_failure" in result.stdout + result.stderr
    still_running = [
        cmdline.parent.name
        for cmdline in Path("/proc").glob("[0-9]*/cmdline")
        if str(site).encode() in _read_or_nothing(cmdline)
    ]
    assert not still_running, f"processes {still_running} still build into {site}"
    written = [str(page.relative_to(site)) for page in site.glob("*/**/index.html")]
    assert not written, f"the other languages' builds went on after English's failed: {written}"


def _read_or_nothing(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process has ended
        return b""


def test_no_page_shows_a_docstrings_sphinx_role_as_text(site):
    """``:func:`summarise``` in a docstring is a link on the API pages (sitetools.roles),
    in every language, never the role's text."""
    shown = [
        str(page.relative_to(site))
        for page in site.rglob("*.html")
        if re.search(r":(?:func|class|meth|attr|data|mod|obj):<code>", page.read_text("utf-8"))
    ]
    assert not shown, shown


def test_each_language_s_notebooks_have_a_cache_folder_of_their_own():
    """mkdocs-jupyter evicts every cache entry its build did not use: languages building side
    by side from one folder would delete each other's (and raced to, failing the build)."""
    from types import SimpleNamespace

    from sitetools.notebooks import use_cache_of

    folders = {}
    for code, language in LANGUAGES.items():
        plugin = SimpleNamespace(config={"cache_dir": ".cache/mkdocs-jupyter"})
        config = SimpleNamespace(plugins={"mkdocs-jupyter": plugin})
        use_cache_of(config, language)
        use_cache_of(config, language)  # a rebuild under `mkdocs serve` adds nothing
        folders[code] = plugin.config["cache_dir"]
    assert folders == {code: f".cache/mkdocs-jupyter/{code}" for code in LANGUAGES}
