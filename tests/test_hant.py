"""The 繁體中文 edition: docs/zh/ converted by OpenCC and the term table, at build time."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from mkdocs.exceptions import ConfigurationError
from sitetools import REPO, hant, i18n, status

FIXTURE = Path(__file__).parent / "hant"
LANGUAGES = i18n.load_languages()
# Characters only Simplified Chinese writes (the Traditional forms differ): none may reach
# the edition's prose. The first eight are the issue's; the rest, the commonest in docs/zh/.
SIMPLIFIED_ONLY = set(
    "们这个数据设备并"
    "时会进参样输写对训后练为组编调运译来计页与环两传种状网结给轴从没复变节读块间则态码"
    "动发过录层让么记脚机换损维见标开应还优单检启经归约处张"
)


def edition(site: Path) -> Path:
    return site / "zh-hant"


class Prose(HTMLParser):
    """The text of a page that the edition converts: not code, not text marked as another
    language (the glossary's Simplified terms, the language switcher's names)."""

    KEPT = {"pre", "code", "script", "style"}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "wbr"}

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, bool]] = []  # (tag, whether its text is kept as it is)
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.VOID:
            return
        lang = dict(attrs).get("lang")
        kept = tag in self.KEPT or (lang is not None and lang not in ("zh-TW", "zh-Hant"))
        self.open.append((tag, kept))

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        pass

    def handle_endtag(self, tag: str) -> None:
        while self.open and self.open.pop()[0] != tag:
            pass

    def handle_data(self, data: str) -> None:
        if not any(kept for _, kept in self.open):
            self.text.append(data)


def prose(page: Path) -> str:
    parser = Prose()
    parser.feed(page.read_text(encoding="utf-8"))
    return "".join(parser.text)


def test_a_page_converts_as_recorded():
    """A new OpenCC release, or a new term, that changes the conversion fails here: check
    the difference, then record it with
    PYTHONPATH=tools python -m sitetools.hant tests/hant/page.md > tests/hant/page-zh-hant.md"""
    page = (FIXTURE / "page.md").read_text(encoding="utf-8")
    expected = (FIXTURE / "page-zh-hant.md").read_text(encoding="utf-8")
    assert hant.convert_markdown(hant.with_traditional_column(page)) == expected


def test_conversion_keeps_code_links_and_drawings_text_as_written():
    page = (FIXTURE / "page.md").read_text(encoding="utf-8")
    converted = hant.convert_markdown(page)
    for kept in (
        '```python title="輸出"\nprint("设备数量：", jax.device_count())  # 代码里的中文保持原样\n',
        '  A["设备 0"] --> B["设备 1"]',  # the drawing is found by this text; labels below
        "(../distributed-arrays/meshes.md#设备)",
        '<span lang="zh-Hans">简体中文</span>保持簡體',
        "`jax.jit` 之外",
    ):
        assert kept in converted, kept
    svg = '<p>设备</p><svg viewBox="0 0 1 1"><text>设备 0</text><desc>设备</desc></svg>'
    assert hant.convert_drawings(svg) == (
        '<p>设备</p><svg viewBox="0 0 1 1"><text>裝置 0</text><desc>裝置</desc></svg>'
    )


def test_the_term_table_overrules_opencc():
    table = hant.terms()
    assert len(table) >= 3
    for wrong, right in table.items():
        assert hant.wrong_forms(f"甲{wrong}乙") == [wrong], (wrong, right)
        assert not hant.wrong_forms(hant.with_terms(f"甲{wrong}乙")), (wrong, right)
    assert hant.convert("参数分区并行") == "參數分區平行"


def test_the_term_table_leaves_its_own_right_forms_alone():
    """Converting converted text changes nothing: no right form holds a wrong one that
    would be replaced again (空集 -> 空集合 leaves 空集合 as it is)."""
    for right in hant.terms().values():
        assert hant.with_terms(right) == right, right
    assert hant.with_terms("空集和空集合") == "空集合和空集合"


def test_a_bad_term_table_entry_is_named(tmp_path, monkeypatch):
    bad = tmp_path / "zh-hant-terms.yml"
    bad.write_text("引數: 引數\n", encoding="utf-8")
    monkeypatch.setattr(hant, "TERMS_FILE", bad)
    monkeypatch.setattr(hant, "REPO", tmp_path)
    with pytest.raises(ValueError, match=r"'引數': '引數' is not a pair of different words"):
        hant.terms()


def test_only_a_language_with_pages_of_its_own_can_be_converted():
    with pytest.raises(ConfigurationError, match=r"'zh-hant' is converted_from 'ja'"):
        i18n._converted("zh-hant", {"converted_from": "ja"}, None)


def test_the_edition_takes_its_texts_from_zh_converted():
    zh, hant_ = LANGUAGES["zh"], LANGUAGES["zh-hant"]
    assert hant_.docs_dir == zh.docs_dir and hant_.tag == "zh-TW"
    assert hant_.site_name == hant.convert(zh.site_name) == "寫給 PyTorch 使用者的 JAX 平行程式設計"
    assert hant_.nav == {key: hant.convert(text) for key, text in zh.nav.items()}
    assert hant_.labels["download_notebook"] == "下載筆記本"
    assert hant_.pending == zh.pending
    raw = yaml.safe_load(i18n.LANGUAGES_FILE.read_text(encoding="utf-8"))["zh-hant"]
    assert not {"site_name", "labels", "notice", "nav"} & set(raw), "converted, not written"
    assert not (REPO / "docs" / "zh-hant").exists(), "no converted copy is kept"


def test_the_status_page_lists_the_edition_with_the_status_of_zh():
    table = status.status_table(LANGUAGES["en"])
    ours = table.split("## 繁體中文 {#zh-hant}")[1]
    theirs = table.split("## 简体中文 {#zh}")[1].split("## ")[0]
    states = re.compile(r"\| (translated|out of date[^|]*|shown in English) \|")
    assert states.findall(ours) == states.findall(theirs) != []
    assert '<a href="../zh-hant/data-parallel/first-example/">用 pmap 實作資料平行' in ours


def test_no_wrong_form_nor_simplified_only_character_reaches_the_edition(site):
    """Not in any page's prose, titles, navigation or table of contents included: no wrong
    form of the term table, and no character that only Simplified Chinese writes."""
    pages = sorted(edition(site).rglob("*.html"))
    assert len(pages) > 40
    for page in pages:
        text = prose(page)
        found = hant.wrong_forms(text)
        assert not found, f"{page.relative_to(site)}: {found}"
        simplified = sorted({c for c in text if c in SIMPLIFIED_ONLY})
        assert not simplified, f"{page.relative_to(site)}: {''.join(simplified)}"


def test_the_edition_shows_the_glossary_in_both_scripts(site):
    glossary = (edition(site) / "glossary" / "index.html").read_text(encoding="utf-8")
    assert "<th>簡體中文</th>\n<th>繁體中文</th>" in glossary
    assert '<td><span lang="zh-Hans">数据并行</span></td>' in glossary
    assert '<td><span lang="zh-Hant">資料平行</span></td>' in glossary
    english = (site / "glossary" / "index.html").read_text(encoding="utf-8")
    assert "<th>简体中文</th>\n<th>繁體中文</th>" in english


def test_the_edition_has_its_own_segmented_search_index(site):
    index = json.loads((edition(site) / "search" / "search_index.json").read_text("utf-8"))
    texts = [doc["text"] for doc in index["docs"]]
    assert any("\u200b資料\u200b" in text for text in texts), "jieba did not segment it"
