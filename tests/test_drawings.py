"""Diagrams and math are static markup in the built pages: SVG and MathML, no script."""

from __future__ import annotations

import re

import pytest
from sitebuild import TUTORIAL_LABEL
from sitetools import REPO
from sitetools.diagrams import diagrams_in, every_diagram, fence_format, stale, svg_path, title_of
from sitetools.i18n import load_languages
from sitetools.mathml import MathError, mathml, with_mathml
from sitetools.translations import other_languages
from sitetools.weight import PAGE_TYPES

LANGUAGES = list(load_languages())
WRITTEN = ["en", *(language.code for language in other_languages())]  # with pages of their own
TUTORIAL = PAGE_TYPES["tutorial"] + "index.html"  # a diagram and math
SCRIPTS = re.compile(r"<script[^>]*\bsrc=\"[^\"]*(mermaid|katex|mathjax)", re.I)


def built(site, code: str, page: str) -> str:
    return (site / ("" if code == "en" else code) / page).read_text(encoding="utf-8")


def test_every_diagram_has_a_current_drawing_and_every_drawing_a_diagram():
    missing, unused = stale()
    assert not missing, (
        f"diagrams with no drawing in docs/diagrams/: {[title_of(s) for s in missing.values()]}; "
        f"run `make diagrams` (it needs Chromium) and commit the SVG it writes"
    )
    assert not unused, f"drawings no page uses: {unused}; `make diagrams` removes them"


def test_every_language_has_the_diagrams_of_english():
    pages = every_diagram()
    english = {
        p.relative_to(REPO / "docs" / "en"): len(d) for p, d in pages.items() if "/en/" in str(p)
    }
    assert english
    for code in WRITTEN:
        for page, count in english.items():
            assert len(pages.get(REPO / "docs" / code / page, [])) == count, (code, page)


@pytest.mark.parametrize("code", LANGUAGES)
def test_diagrams_are_svg_with_their_labels_as_text(site, code):
    html = built(site, code, TUTORIAL)
    svgs = re.findall(r'<div class="mermaid"[^>]*>\s*(<svg .*?</svg>)\s*</div>', html, re.S)
    assert len(svgs) == 1
    svg = svgs[0]
    assert re.search(r'aria-labelledby="chart-title-[^"]+"', svg) and "<desc " in svg
    text = "".join(re.findall(r">([^<>]+)</tspan>", svg))
    assert TUTORIAL_LABEL[code] in text and "pmean" in text
    assert "<foreignObject" not in svg  # real SVG text, not HTML inside the drawing


def test_no_page_loads_a_script_for_diagrams_or_math(site):
    pages = list(site.rglob("*.html"))
    assert len(pages) > 100
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert '<pre class="mermaid">' not in html, page
        assert not SCRIPTS.search(html), page
        assert not re.search(r'class="arithmatex">\s*\\[(\[]', html), page  # TeX left
    assert not list(site.rglob("assets/vendor")), "Mermaid ships only when a diagram needs it"


@pytest.mark.parametrize("code", LANGUAGES)
def test_math_is_mathml(site, code):
    html = built(site, code, TUTORIAL)
    formulas = re.findall(
        r'<(span|div) class="arithmatex"(?: tabindex="0")?>(.*?)</\1>', html, re.S
    )
    assert len(formulas) == 7
    assert all(inner.startswith("<math ") for _, inner in formulas)
    assert sum(tag == "div" for tag, _ in formulas) == 1
    assert 'display="block"' in html and "&#x23DF;" in html  # the underbrace of g_d


def test_a_diagram_with_no_drawing_is_left_to_the_browser():
    source = "flowchart LR\n    accTitle: Not drawn yet\n    a --> b"
    assert not svg_path(source).exists()
    html = fence_format(source, "mermaid", "mermaid", {}, None, classes=[], id_value="", attrs={})
    assert html.startswith('<pre class="mermaid"><code>') and "a --&gt; b" in html


def test_diagrams_are_found_in_their_fences():
    page = "Text\n\n```mermaid\nflowchart LR\n    a --> b\n```\n\n```python\nx = 1\n```\n"
    assert diagrams_in(page) == ["flowchart LR\n    a --> b"]


def test_tex_becomes_mathml():
    page = '<p><span class="arithmatex">\\(a &lt; b\\)</span></p>'
    written = with_mathml(page, "docs/en/x.md")
    assert written.startswith('<p><span class="arithmatex"><math ')
    assert "<mo>&#x0003C;</mo>" in written
    assert mathml("x", display=True).endswith('display="block"><mrow><mi>x</mi></mrow></math>')


@pytest.mark.parametrize(
    ("tex", "message"),
    [
        ("\\nosuchcommand x", r"uses \\nosuchcommand, which latex2mathml does not know"),
        ("\\frac{1}{", r"cannot read the TeX '\\\\frac\{1\}\{'"),
    ],
)
def test_tex_that_cannot_be_written_as_mathml_fails_naming_the_page(tex, message):
    page = f'<div class="arithmatex">\\[{tex}\\]</div>'
    with pytest.raises(MathError, match=r"^docs/zh/x\.md: .*" + message):
        with_mathml(page, "docs/zh/x.md")


def test_chinese_or_korean_labels_are_not_drawn_without_a_font_for_them(monkeypatch):
    import subprocess

    from sitetools import diagrams

    monkeypatch.setattr(diagrams.shutil, "which", lambda name: "/usr/bin/fc-list")
    monkeypatch.setattr(
        diagrams.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", "")
    )
    with pytest.raises(SystemExit, match=r"no font for 'zh' labels .*fonts-noto-cjk"):
        diagrams.draw(["flowchart LR\n    a[设备] --> b"])


def test_a_material_release_without_its_diagram_stylesheet_is_named(monkeypatch):
    from sitetools import diagrams

    monkeypatch.setattr(diagrams, "MATERIAL_CSS", re.compile("no such stylesheet"))
    with pytest.raises(RuntimeError, match=r"no Mermaid stylesheet found in Material's bundle"):
        diagrams.mermaid_config.__wrapped__()
