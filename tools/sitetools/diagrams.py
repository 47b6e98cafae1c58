"""Mermaid diagrams drawn once, as SVG kept in the repository, instead of in readers' browsers.

Every ```` ```mermaid ```` block of every language is drawn by ``make diagrams`` (headless
Chromium and the vendored Mermaid, with Material's theme) into ``docs/diagrams/<key>.svg``,
where ``<key>`` hashes the block's text and everything else that shapes the drawing. The
build puts that SVG in the page: labels stay real ``<text>`` (searchable, read by screen
readers), colours follow the page's light or dark palette, and no script runs.

A block with no SVG yet (a diagram just edited under ``make serve``) is drawn in the
browser instead, as Material does it; ``make test`` fails until ``make diagrams`` has drawn it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

from pymdownx.superfences import fence_code_format

from sitetools import REPO
from sitetools.browser import CHROMIUM, CHROMIUM_FLAGS
from sitetools.translations import FENCE
from sitetools.vendor import VENDOR_DIR

SVG_DIR = REPO / "docs" / "diagrams"
MERMAID_JS = VENDOR_DIR / "mermaid" / "mermaid.min.js"
# Material's own text font stack (mkdocs.yml: font: false): Mermaid measures labels with it.
FONT_FAMILY = "-apple-system, BlinkMacSystemFont, Helvetica, Arial, sans-serif"
# Material's diagram stylesheet, a string in its JavaScript bundle: colours from its palette.
MATERIAL_CSS = re.compile(r'"(\.node circle,\.node ellipse,[^"]*)"')
# Material styles HTML labels; drawn as SVG text, edge labels need their backing box filled.
SVG_LABEL_CSS = (
    ".edgeLabel .label rect.background{fill:var(--md-mermaid-label-bg-color);opacity:1}"
    ".edgeLabel text{fill:var(--md-mermaid-edge-color)}"
)
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")

log = logging.getLogger("mkdocs.plugins.jaxpar.diagrams")
drawn_in_browser: list[str] = []  # titles of this build's diagrams that have no SVG yet


@cache
def mermaid_config() -> dict:
    """What ``mermaid.initialize`` gets: Material's settings, with labels as SVG text."""
    import material

    bundles = sorted(
        Path(material.__file__).parent.glob("templates/assets/javascripts/bundle.*.js")
    )
    found = [m[1] for b in bundles if (m := MATERIAL_CSS.search(b.read_text(encoding="utf-8")))]
    if not found:
        raise RuntimeError(
            f"no Mermaid stylesheet found in Material's bundle ({', '.join(map(str, bundles))}): "
            f"sitetools.diagrams.MATERIAL_CSS must follow this release of mkdocs-material"
        )
    return {
        "startOnLoad": False,
        "themeCSS": json.loads(f'"{found[0]}"') + SVG_LABEL_CSS,
        "fontFamily": FONT_FAMILY,
        "htmlLabels": False,
        "flowchart": {"htmlLabels": False},
        "sequence": {"actorFontSize": "16px", "messageFontSize": "16px", "noteFontSize": "16px"},
    }


def normalized(source: str) -> str:
    return textwrap.dedent(source).strip()


@cache
def recipe() -> str:
    """Everything but a diagram's text that shapes its drawing: Mermaid's release and settings."""
    manifest = json.loads((VENDOR_DIR / "manifest.json").read_text(encoding="utf-8"))
    return json.dumps([manifest["packages"]["mermaid"], mermaid_config()], sort_keys=True)


def key_of(source: str) -> str:
    """The name of a diagram's SVG: a hash of its text and of :func:`recipe`."""
    return hashlib.sha256(f"{recipe()}\n{normalized(source)}".encode()).hexdigest()[:20]


def svg_path(source: str) -> Path:
    return SVG_DIR / f"{key_of(source)}.svg"


def diagrams_in(markdown: str) -> list[str]:
    """The text of every ```` ```mermaid ```` block of a page."""
    found, block, fence = [], None, ""
    for line in markdown.splitlines():
        match = FENCE.match(line)
        if block is None:
            if match and match["info"].strip() == "mermaid":
                block, fence = [], match["fence"]
        elif line.strip() == fence:
            found.append("\n".join(block))
            block = None
        else:
            block.append(line)
    return found


def every_diagram() -> dict[Path, list[str]]:
    """Every page of every language that has diagrams, with their texts."""
    pages = {}
    for page in sorted((REPO / "docs").glob("*/**/*.md")):
        if found := diagrams_in(page.read_text(encoding="utf-8")):
            pages[page] = found
    return pages


def title_of(source: str) -> str:
    match = re.search(r"^\s*accTitle:\s*(.+)$", source, re.MULTILINE)
    return match[1].strip() if match else normalized(source).splitlines()[0]


def fence_format(source, language, class_name, options, md, **kwargs) -> str:
    """pymdownx.superfences' formatter for ```` ```mermaid ````: the stored SVG, if any."""
    path = svg_path(source)
    if not path.exists():
        drawn_in_browser.append(title := title_of(source))
        log.info(
            "diagram %r has no drawing in docs/diagrams/ yet: the browser draws it; "
            "`make diagrams` draws it for the site",
            title,
        )
        return fence_code_format(source, language, class_name, options, md, **kwargs)
    drawing = readable_on_phones(path.read_text(encoding="utf-8"))
    # focusable, so that a keyboard can scroll it where it is wider than the screen
    return f'<div class="mermaid" tabindex="0">{drawing}</div>'


# The smallest scale a drawing is shown at: Mermaid draws its text at 16 px, so at least
# about 10 px. A drawing wider than the screen at that scale scrolls sideways instead of
# shrinking (a phone fitted a 1,029 px flowchart into 390 px: text of about 4 px); a
# laptop's page is wide enough for every drawing at that scale.
MIN_SCALE = 0.65
MAX_WIDTH = re.compile(r'style="max-width: ([\d.]+)px;"')


def readable_on_phones(svg: str) -> str:
    """``svg`` (Mermaid's, which fits any width up to its own) with a minimum width of
    :data:`MIN_SCALE` of its own, so that it never shrinks below that.

    >>> readable_on_phones('<svg width="100%" style="max-width: 1000px;" viewBox="0 0 1000 300">')
    '<svg width="100%" style="max-width: 1000px; min-width: 650px;" viewBox="0 0 1000 300">'
    """
    return MAX_WIDTH.sub(
        lambda m: f'style="max-width: {m[1]}px; min-width: {float(m[1]) * MIN_SCALE:.0f}px;"',
        svg,
        count=1,
    )


def use_drawings(config) -> None:
    """Make pymdownx.superfences put the stored SVG where a page has a diagram."""
    drawn_in_browser.clear()
    for fence in config.mdx_configs["pymdownx.superfences"]["custom_fences"]:
        if fence["name"] == "mermaid":
            fence["format"] = fence_format


def drop_unused_mermaid(site_dir: str) -> None:
    """Take the vendored Mermaid (3.5 MB) out of a built site whose every diagram has its SVG."""
    if not drawn_in_browser:
        shutil.rmtree(Path(site_dir) / "assets" / "vendor", ignore_errors=True)


def require_cjk_fonts() -> None:
    """Refuse to draw Chinese or Korean labels where no font has them: Mermaid would size
    the boxes for missing-glyph boxes (where fontconfig can tell)."""
    if shutil.which("fc-list") is None:
        return
    for language in ("zh", "ko"):
        found = subprocess.run(["fc-list", f":lang={language}"], capture_output=True, text=True)
        if not found.stdout.strip():
            raise SystemExit(
                f"no font for '{language}' labels (fc-list :lang={language} finds none): "
                f"install one (Debian: apt-get install fonts-noto-cjk) and run make diagrams again"
            )


def draw(sources: list[str]) -> dict[str, str]:
    """SVG of each diagram, drawn by Mermaid in headless Chromium."""
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        raise SystemExit(
            f"Chromium not found at {CHROMIUM}: install it (Debian: apt-get install chromium) "
            f"or set CHROMIUM=/path/to/chromium"
        )
    if any(CJK.search(source) for source in sources):
        require_cjk_fonts()
    drawn = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        page = browser.new_page()
        page.set_content("<!doctype html><html><body></body></html>")
        page.add_script_tag(path=MERMAID_JS)
        page.evaluate("config => mermaid.initialize(config)", mermaid_config())
        for source in sources:
            key = key_of(source)
            svg = page.evaluate(
                "async ([id, text]) => (await mermaid.render(id, text)).svg",
                [f"diagram-{key}", normalized(source)],
            )
            drawn[key] = svg
        browser.close()
    return drawn


def stale() -> tuple[dict[str, str], list[Path]]:
    """Diagrams with no SVG (by key), and SVGs no diagram uses any more."""
    wanted = {key_of(s): s for sources in every_diagram().values() for s in sources}
    missing = {k: s for k, s in wanted.items() if not (SVG_DIR / f"{k}.svg").exists()}
    unused = [p for p in sorted(SVG_DIR.glob("*.svg")) if p.stem not in wanted]
    return missing, unused


def main() -> None:
    missing, unused = stale()
    SVG_DIR.mkdir(parents=True, exist_ok=True)
    for key, svg in draw(list(missing.values())).items():
        (SVG_DIR / f"{key}.svg").write_text(svg + "\n", encoding="utf-8")
        print(f"drew {title_of(missing[key])!r} into docs/diagrams/{key}.svg", file=sys.stderr)
    for path in unused:
        path.unlink()
        print(f"removed docs/diagrams/{path.name}, which no page uses", file=sys.stderr)
    if not missing and not unused:
        print("every diagram is drawn", file=sys.stderr)


if __name__ == "__main__":
    main()
