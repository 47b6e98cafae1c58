"""The built site in a real browser: headless Chromium (Debian's), driven by Playwright.

Every language: pages load without console errors, the language switcher keeps the page,
search finds pages in that language only, code copy buttons copy the snippet, diagrams
(SVG) and math (MathML) are drawn, notebook downloads are valid, unknown URLs get the 404
page, and axe-core finds no serious or critical accessibility violation. Chromium comes from the system (`.ci/run` installs it);
without it these tests skip with instructions, except under CI=true, where they fail.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import nbformat
import pytest
from sitebuild import TUTORIAL_LABEL
from sitetools import REPO, mkdocs_settings
from sitetools.browser import CHROMIUM, CHROMIUM_FLAGS
from sitetools.diagrams import MIN_SCALE
from sitetools.i18n import load_languages
from sitetools.weight import PAGE_TYPES as WEIGHED_PAGE_TYPES
from sitetools.weight import loaded_files

pytestmark = pytest.mark.browser

LANGUAGES = list(load_languages())
TAGS = {code: language.tag for code, language in load_languages().items()}  # zh-hant: zh-TW
CONVERTED = {code for code, language in load_languages().items() if language.converted_from}
TUTORIAL = WEIGHED_PAGE_TYPES["tutorial"]  # code, output, a diagram and math
PAGE_TYPES = WEIGHED_PAGE_TYPES | {"404": "no/such/page/"}  # and an unknown address
# The API page is the docstrings, the same in every language, and axe-core needs 3.7 CPU-s
# on it (0.7 s on the home page): it checks it in the first language, and the theme around
# it, which is each language's own, on the other page types.
AXE_IN_FIRST_LANGUAGE_ONLY = {"api"}
# axe-core's color-contrast rule, about 60 % of its time on these pages, compares each text's
# colour and size with its background's: all of them come from the same stylesheets in
# every language (test_site checks that), so it runs in the first language only.
AXE_RULES_IN_FIRST_LANGUAGE_ONLY = ["color-contrast"]
# A converted language (zh-hant) is its source's pages in the same theme with converted
# text: the tutorial (its prose, drawn diagram labels, switcher) and the home page show
# what conversion changes; the other page types would repeat its source's checks.
CONVERTED_PAGE_TYPES = {"home", "tutorial"}
PAGES = [
    (kind, code)
    for kind in sorted(PAGE_TYPES)
    for code in LANGUAGES
    if code not in CONVERTED or kind in CONVERTED_PAGE_TYPES
]
SITE_URL = mkdocs_settings()["site_url"]
SEARCH_INDEX = "**/search/search_index.json"
# What readers type, in each language's usual words, and where one of the first 3 pages of
# results must lead (the newcomer review of 2026-11-27 found the multi-machine pages there
# for none of these, and nothing for 올리듀스).
MULTI_MACHINE = (
    "beyond-one-process/multi-process/",
    "cluster/launching/",
    "cluster/meshes-across-hosts/",
)
SEARCHES = {
    "en": [("two machines", MULTI_MACHINE), ("multi-host", MULTI_MACHINE)],
    "zh": [
        ("数据并行", ("data-parallel/",)),
        ("多机", MULTI_MACHINE),
        ("全归约", ("data-parallel/", "distributed-arrays/", "glossary/")),
    ],
    "ko": [("데이터 병렬화", ("data-parallel/",)), ("올리듀스", ("data-parallel/", "glossary/"))],
    # its own index, segmented as zh's is
    "zh-hant": [("資料平行", ("data-parallel/",)), ("多機", MULTI_MACHINE)],
}


def prefix(code: str) -> str:
    return "" if code == "en" else f"{code}/"


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    """Static files, and the root's 404 page for every unknown path, as GitHub Pages does."""

    def log_message(self, *args):  # keep test output quiet
        pass

    def send_error(self, code, message=None, explain=None):
        if code != 404:
            return super().send_error(code, message, explain)
        body = (Path(self.directory) / "404.html").read_bytes()
        self.send_response(404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def base_url(site) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(SiteHandler, directory=str(site))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


def require_chromium(path: str) -> None:
    """Skip, saying how to install Chromium, when it is missing; under CI=true, fail."""
    if Path(path).exists():
        return
    message = (
        f"Chromium not found at {path}. Install Debian's package (sudo apt-get install "
        f"chromium) or set CHROMIUM=/path/to/chromium; .ci/run installs it in CI."
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser():
    require_chromium(CHROMIUM)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, base_url, site):
    context = browser.new_context()
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url.rstrip("/"))
    # No request may leave the site (overrides/partials/source.html keeps Material's
    # repository widget from asking api.github.com): any such request is stopped and
    # fails the test.
    context.route(lambda url: not url.startswith(base_url), lambda route: route.abort())
    # Material's switcher maps pages through each language's sitemap.xml, whose addresses
    # are the public site's: here they are this server's, as they are there.
    context.route("**/sitemap.xml", functools.partial(sitemap_at, site=site, base_url=base_url))
    # Material's search worker indexes the whole language at every page load, a third of
    # the CPU these tests use; only the search test needs the pages in it.
    context.route(SEARCH_INDEX, functools.partial(empty_search_index, site=site))
    page = context.new_page()
    page.errors = []
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and "Failed to load resource" not in m.text
            and page.errors.append(m.text)
        ),
    )
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.requested = []  # the site's own files it asked for
    page.on(
        "request",
        lambda r: (
            page.requested.append(r.url)
            if r.url.startswith(base_url)
            else not r.url.startswith(("data:", "blob:"))
            and page.errors.append(f"a request left the site: {r.url}")
        ),
    )
    page.on(
        "requestfailed",
        # ERR_ABORTED: a request cut short by the next navigation, not a missing file.
        lambda r: (
            r.url.startswith(base_url)
            and "ERR_ABORTED" not in (r.failure or "")
            and page.errors.append(f"failed: {r.url} {r.failure}")
        ),
    )
    yield page
    context.unroute_all(behavior="ignoreErrors")
    context.close()


def empty_search_index(route, site: Path) -> None:
    index = json.loads((site / urlsplit(route.request.url).path.lstrip("/")).read_text("utf-8"))
    route.fulfill(json=index | {"docs": []})


def sitemap_at(route, site: Path, base_url: str) -> None:
    sitemap = site / urlsplit(route.request.url).path.lstrip("/")
    body = sitemap.read_text(encoding="utf-8").replace(SITE_URL, base_url)
    route.fulfill(body=body, content_type="application/xml")


def check_language_switcher(page, base_url: str, code: str, path: str) -> None:
    """The switcher leads to the same page and section in the next language round the
    circle (test_site checks every switcher link of every page without a browser)."""
    target = LANGUAGES[(LANGUAGES.index(code) + 1) % len(LANGUAGES)]
    section = page.evaluate("document.querySelector('.md-content h2[id]').id")
    page.evaluate(f"location.hash = '#{section}'")
    page.hover(".md-header__option .md-select")
    page.click(f'.md-select__link[hreflang="{TAGS[target]}"]')
    page.wait_for_url(base_url + prefix(target) + path + f"#{section}")
    assert page.evaluate("document.documentElement.lang") == TAGS[target]


@pytest.mark.parametrize("code", sorted(SEARCHES))
def test_search_finds_pages_of_its_own_language_only(page, base_url, code):
    page.context.unroute(SEARCH_INDEX)  # the real index
    page.goto(base_url + prefix(code))
    for term, expected in SEARCHES[code]:
        page.click(".md-search__input")
        page.fill(".md-search__input", "")  # no results of the term before
        page.press(".md-search__input", "End")
        page.wait_for_selector(".md-search-result__item", state="detached")
        page.fill(".md-search__input", term)
        # Material searches on keyup (or when its index is ready); fill() types no key.
        page.press(".md-search__input", "End")
        page.wait_for_selector(".md-search-result__item", timeout=30_000)
        links = page.eval_on_selector_all(
            ".md-search-result__item > a", "els => els.map(e => e.href)"
        )
        assert all(link.startswith(base_url + prefix(code)) for link in links), links
        pages = [urlsplit(link).path.removeprefix(urlsplit(base_url).path) for link in links]
        first = list(dict.fromkeys(page.removeprefix(prefix(code)) for page in pages))[:3]
        assert any(page.startswith(expected) for page in first), (term, first)


def check_line_breaking(page, code: str) -> None:
    """Korean lines break between words, never inside one (스/크립트를); Chinese and English
    as the browser breaks them. On a phone's width, no line of the page's longest Korean
    paragraph ends between two Hangul syllables."""
    style = page.evaluate("getComputedStyle(document.querySelector('.md-typeset p')).wordBreak")
    assert style == ("keep-all" if code == "ko" else "normal"), style
    if code != "ko":
        return
    page.set_viewport_size({"width": 390, "height": 844})
    ends = page.evaluate(
        """() => {
            const p = [...document.querySelectorAll('.md-typeset > p')]
                .sort((a, b) => b.textContent.length - a.textContent.length)[0];
            const walker = document.createTreeWalker(p, NodeFilter.SHOW_TEXT), ends = [];
            let top = null;
            for (let text = walker.nextNode(); text; text = walker.nextNode()) {
                for (let i = 0; i < text.length; i++) {
                    const range = document.createRange();
                    range.setStart(text, i); range.setEnd(text, i + 1);
                    const rect = range.getBoundingClientRect();
                    if (top !== null && rect.top > top + 1 && i > 0)
                        ends.push(text.data[i - 1] + text.data[i]);
                    top = rect.top;
                }
            }
            return ends;
        }"""
    )
    page.set_viewport_size({"width": 1280, "height": 800})

    def hangul(char: str) -> bool:
        return "\uac00" <= char <= "\ud7a3"

    inside_words = [pair for pair in ends if hangul(pair[0]) and hangul(pair[1])]
    assert ends and not inside_words, inside_words


def check_diagram_readable_on_a_phone(page) -> None:
    """On a phone's width, a drawing keeps at least MIN_SCALE of its size (its text at least
    about 10 px) and scrolls sideways in its box instead of shrinking further."""
    page.set_viewport_size({"width": 390, "height": 844})
    scales = page.eval_on_selector_all(
        "div.mermaid > svg",
        """els => els.map(e => [e.getBoundingClientRect().width / e.viewBox.baseVal.width,
                                 e.parentElement.scrollWidth > e.parentElement.clientWidth])""",
    )
    page.set_viewport_size({"width": 1280, "height": 800})
    assert scales and all(scale >= MIN_SCALE - 0.01 for scale, _ in scales), scales
    assert any(scrolls for _, scrolls in scales), scales  # wider than a phone: it scrolls


def check_code_fits_a_laptop(page) -> None:
    """At 1280 px, every code block shows its lines whole (the snippets' lines are at most
    100 characters): none scrolls sideways. Outputs (titled) may, where a line is longer."""
    page.set_viewport_size({"width": 1280, "height": 800})
    widths = page.evaluate(
        """() => [...document.querySelectorAll('.md-typeset .highlight')]
            .filter(block => !block.querySelector('.filename'))  // not an "Output" block
            .map(block => block.querySelector('pre > code'))
            .map(code => [code.scrollWidth, code.clientWidth])"""
    )
    assert widths and all(scroll <= client + 1 for scroll, client in widths), widths


def check_notebook_on_a_phone(page) -> None:
    """On a phone's width, a notebook's code cells take nearly the whole screen: no prompt
    column beside them, and they do not share a line with the page's buttons."""
    page.set_viewport_size({"width": 390, "height": 844})
    widths = page.eval_on_selector_all(
        ".jp-InputArea-editor", "els => els.map(e => e.getBoundingClientRect().width)"
    )
    page.set_viewport_size({"width": 1280, "height": 800})
    assert widths and min(widths) >= 0.85 * 390, widths


def check_contrast_in_dark_mode(page) -> None:
    """The page after the reader switches to dark mode (the header's toggle, Material's
    slate scheme): no serious colour-contrast finding of axe-core."""
    from axe_playwright_python.sync_playwright import Axe

    page.click('label[for="__palette_1"]')  # "Switch to dark mode"
    page.wait_for_function("document.body.getAttribute('data-md-color-scheme') === 'slate'")
    results = Axe().run(
        page, options={"runOnly": ["color-contrast"], "resultTypes": ["violations"]}
    )
    page.click('label[for="__palette_0"]')  # back to light mode for what follows
    found = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    failing = {
        (re.sub(r":nth-child\(\d+\)", "", n["target"][0].split(" ")[-1]),
         re.search(r"foreground color: (#\w+), background color: (#\w+)", n["failureSummary"]).groups())
        for v in found for n in v["nodes"]
    }  # fmt: skip
    assert not found, sorted(failing)


def check_copy_button(page) -> None:
    """The tutorial's first copy button copies exactly its snippet section."""
    page.hover("pre >> nth=0")  # the copy button shows on hover
    page.click(".md-code__button[data-md-type='copy'] >> nth=0")
    copied = page.evaluate("navigator.clipboard.readText()")
    source = (REPO / "snippets/data_parallel/linear_regression.py").read_text(encoding="utf-8")
    section = source.split("# --8<-- [start:devices]\n")[1].split("# --8<-- [end:devices]")[0]
    assert copied.strip() == section.strip()


def drawn_diagrams(page) -> list[str]:
    """The text of each diagram of the page; fails if a diagram or formula is not drawn."""
    sizes = page.eval_on_selector_all(
        "div.mermaid > svg, math", "els => els.map(e => e.getBoundingClientRect().width)"
    )
    assert all(width > 0 for width in sizes), sizes
    return page.eval_on_selector_all("div.mermaid > svg", "els => els.map(e => e.textContent)")


def check_loaded_files(page, base_url: str, site: Path, code: str, kind: str) -> None:
    """The page loaded nothing beyond what sitetools.weight counts (test_site checks that
    sum against the byte budget)."""
    html = (
        site / "404.html"
        if kind == "404"
        else site / prefix(code) / PAGE_TYPES[kind] / "index.html"
    )
    counted = loaded_files(site, html)
    assert len(page.requested) >= 5, page.requested  # the page, its styles and scripts
    for url in page.requested:
        path = site / urlsplit(url).path.lstrip("/")
        path = path / "index.html" if path.is_dir() else path
        if kind == "404" and not path.exists():
            continue  # the unknown address itself, answered with the 404 page
        assert path in counted or path.suffix == ".ipynb", f"{url} is not counted in {html}"


def check_search_index_waits_for_load(page) -> None:
    """Material asks for the search index after the page's load event, not while the page is
    being painted (overrides/main.html holds its requests until then)."""
    index = f"e => e.name.endsWith('{SEARCH_INDEX.removeprefix('**')}')"
    page.wait_for_function(f"performance.getEntriesByType('resource').some({index})")
    loaded, asked = page.evaluate(
        f"""[performance.getEntriesByType('navigation')[0].loadEventEnd,
             performance.getEntriesByType('resource').find({index}).startTime]"""
    )
    assert asked >= loaded > 0, f"search index asked for at {asked} ms, page loaded at {loaded} ms"


def check_notebook_download(page) -> None:
    """The page's .ipynb download link gives a valid notebook."""
    href = page.get_attribute('a[download][href$=".ipynb"]', "href")
    response = page.request.get(urljoin(page.url, href))
    assert response.ok
    nbformat.validate(nbformat.reads(response.text(), as_version=4))


@pytest.mark.parametrize("kind, code", PAGES, ids=[f"{kind}-{code}" for kind, code in PAGES])
def test_page_loads_cleanly_and_accessibly(page, base_url, site, code, kind):
    """No console error, the right <html lang>, no serious or critical axe-core violation;
    the notebook's download valid; on the tutorial page, its diagram drawn in the page's
    language, the copy button and the language switcher working (one page load for all)."""
    from axe_playwright_python.sync_playwright import Axe

    response = page.goto(base_url + prefix(code) + PAGE_TYPES[kind], wait_until="load")
    if kind == "404":  # the root's 404 page, in every language: the page's own is there
        assert response.status == 404
        assert page.locator("h1").first.inner_text().strip() == "404"
        homes = page.eval_on_selector_all(".jaxpar-not-found a", "as => as.map(a => a.href)")
        assert homes == [base_url + prefix(other) for other in LANGUAGES], homes
        assert page.locator(f'.jaxpar-not-found[lang="{TAGS[code]}"] a').count() == 1
    diagrams = drawn_diagrams(page)
    if kind == "tutorial":  # drawn, with labels in the page's language (test_drawings
        # checks the markup of every page; one page shows that browsers draw it)
        assert len(diagrams) == 1 and page.locator("math").count() == 7
        assert "pmean" in diagrams[0] and TUTORIAL_LABEL[code] in diagrams[0], diagrams
        check_diagram_readable_on_a_phone(page)
    if kind == "notebook":
        check_notebook_download(page)
        check_notebook_on_a_phone(page)
    if kind in ("notebook", "tutorial") and code == LANGUAGES[0]:  # as color-contrast above
        check_contrast_in_dark_mode(page)
    check_loaded_files(page, base_url, site, code, kind)
    check_search_index_waits_for_load(page)
    lang = TAGS[LANGUAGES[0]] if kind == "404" else TAGS[code]  # the root's 404 page
    assert page.evaluate("document.documentElement.lang") == lang
    if kind not in AXE_IN_FIRST_LANGUAGE_ONLY or code == LANGUAGES[0]:
        # Every rule (color-contrast in the first language), with details of the violations
        # only (twice as fast on the API page).
        options: dict = {"resultTypes": ["violations"]}
        if code != LANGUAGES[0]:
            options["rules"] = {
                rule: {"enabled": False} for rule in AXE_RULES_IN_FIRST_LANGUAGE_ONLY
            }
        results = Axe().run(page, options=options)
        violations = results.response["violations"]
        serious = [v for v in violations if v["impact"] in ("serious", "critical")]
        assert not serious, "\n".join(
            f"{v['id']} ({v['impact']}): {v['help']} x{len(v['nodes'])}" for v in serious
        )
    if kind == "tutorial":
        check_line_breaking(page, code)
        check_code_fits_a_laptop(page)
        check_copy_button(page)
        check_language_switcher(page, base_url, code, TUTORIAL)
    assert page.errors == []


@pytest.mark.parametrize(
    "ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_missing_chromium_says_how_to_install_it(monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(
        outcome, match=r"Chromium not found at /nowhere/chromium\. Install Debian's"
    ):
        require_chromium("/nowhere/chromium")
