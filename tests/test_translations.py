"""Every English page exists in every language (or is marked pending), with the same shape."""

from __future__ import annotations

import re

import pytest
from sitetools import REPO, glosses, notebook_translations, terms
from sitetools.i18n import Language
from sitetools.notebook_translations import Docstring
from sitetools.notebooks import notebook_for
from sitetools.snippets import discover
from sitetools.translations import (
    missing_heading_ids,
    number_problems,
    other_languages,
    problems,
    shape_of,
    stated_numbers,
)


@pytest.mark.parametrize("language", other_languages(), ids=lambda lang: lang.code)
def test_translation_is_complete_and_agrees_with_english(language: Language):
    found = problems(language)
    assert not found, "\n".join(found)


def test_every_heading_has_an_explicit_id():
    missing = [
        m for path in sorted((REPO / "docs").rglob("*.md")) for m in missing_heading_ids(path)
    ]
    assert not missing, "\n".join(missing)


def test_shape_sees_translated_prose_as_equal_and_changed_code_as_different():
    english = '# Title {#t}\n\nProse.\n\n```python\n--8<-- "snippets/a.py:x"\n```\n\n```text title="Output"\n--8<-- "snippets/a.out:x"\n```\n\n```python\nprint(1)\n```\n[link](a.md#b)\n'
    chinese = (
        english.replace("Title", "标题")
        .replace("Prose.", "正文。")
        .replace('title="Output"', 'title="输出"')
    )
    assert shape_of(chinese) == shape_of(english)
    assert shape_of(chinese.replace("print(1)", "print(2)")) != shape_of(english)
    assert shape_of(chinese.replace("{#t}", "{#other}")) != shape_of(english)
    assert shape_of(chinese.replace("a.py:x", "a.py:y")) != shape_of(english)


def test_missing_translation_must_be_marked_pending(tmp_path, monkeypatch):
    language = other_languages()[0]
    empty = Language(code=language.code, name=language.name, nav=language.nav)
    monkeypatch.setattr(Language, "docs_dir", property(lambda self: tmp_path))
    found = problems(empty)
    assert any("index.md is missing" in p and "pending" in p for p in found)
    marked = Language(
        code=language.code, name=language.name, nav=language.nav, pending=("index.md",)
    )
    assert not any("index.md is missing" in p for p in problems(marked))


@pytest.mark.parametrize("language", other_languages(), ids=lambda lang: lang.code)
def test_english_glosses_are_few_and_only_in_prose(language: Language):
    found = glosses.problems(language.code)
    assert not found, "\n".join(found)


def test_gloss_finder_sees_full_and_half_width_glosses_but_not_code(tmp_path, monkeypatch):
    monkeypatch.setattr(glosses, "REPO", tmp_path)
    page = tmp_path / "page.md"
    page.write_text(
        "# 分片（sharding） {#s}\n\n在设备（device）上；디바이스(device)에서；*弱类型*（weakly typed）\n\n"
        "| 集合通信（collective） |\n\n`f(x)`（`P`）与 8（8），设备（`P()`）\n\n```python\n设备（device）\n```\n",
        encoding="utf-8",
    )
    found = [(g.line, g.english, g.where) for g in glosses.glosses_in(page)]
    assert found == [
        (1, "sharding", "heading"),
        (3, "device", "prose"),
        (3, "device", "prose"),
        (3, "weakly typed", "prose"),
        (5, "collective", "table"),
    ]


def test_a_number_changed_in_english_only_is_named_with_its_page():
    english = "Device 0 holds 19,280 bytes, 1 in 10 (0.0986) of `1e-5`.\n"
    korean = "디바이스 0은 19,280바이트, 곧 10분의 1(0.0986)을 `1e-5`로 갖습니다.\n"
    chinese = "设备 0 持有19,280字节，约十分之一（0.0986），`1e-5`。\n"
    assert number_problems(english, korean, "docs/ko/p.md") == []
    assert number_problems(english, chinese, "docs/zh/p.md") == [
        "docs/zh/p.md: its prose states 10 0 time(s), English's 1; "
        "say the numbers that docs/en says"
    ]
    newer = english.replace("19,280", "9,680")
    assert [
        p.split(": its prose states ")[1][:16] for p in number_problems(newer, korean, "k")
    ] == [
        "19280 1 time(s),",
        "9680 0 time(s), ",
    ]


def test_numbers_in_code_links_ids_and_single_digits_are_not_stated_numbers():
    page = (
        "# Title {#step-12}\n\nTwo (2) steps, [see](a.md#fig-42), bf16, x86, "
        "<img width=300>.\n\n```python\nprint(123)\n```\n"
        '--8<-- "snippets/a.out:cell"\n'
    )
    assert stated_numbers(page) == {}


@pytest.mark.parametrize("language", other_languages(), ids=lambda lang: lang.code)
def test_pages_use_the_glossary_term_not_an_older_form(language: Language):
    found = terms.problems(language.code)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("language", other_languages(), ids=lambda lang: lang.code)
def test_every_notebook_page_s_text_is_translated_and_agrees_with_english(language: Language):
    found = notebook_translations.problems(language)
    assert not found, "\n".join(found)
    assert notebook_translations.outdated(language) == []


def _translations_in(tmp_path, monkeypatch, text: str) -> Language:
    """The first other language, its notebooks.yml replaced by ``text``."""
    (tmp_path / "notebooks.yml").write_text(text, encoding="utf-8")
    monkeypatch.setattr(Language, "docs_dir", property(lambda self: tmp_path))
    return other_languages()[0]


def test_a_notebook_text_older_than_its_docstring_gives_way_to_english(tmp_path, monkeypatch):
    snippet = discover()[0]
    english = notebook_translations.english_docstring(snippet)
    key, now = notebook_translations.key_of(snippet), notebook_translations.digest(english)
    entry = f"{key}:\n  english: {{}}\n  docstring: |\n    标题：副标题\n\n    正文。\n"
    current = _translations_in(tmp_path, monkeypatch, entry.format(now))
    assert notebook_translations.docstring_in(current, snippet).text == "标题：副标题\n\n正文。"
    assert notebook_translations.outdated(current) == []

    older = _translations_in(tmp_path, monkeypatch, entry.format("0badcafe"))
    assert notebook_translations.docstring_in(older, snippet) == Docstring(english, False)
    (line,) = notebook_translations.outdated(older)
    assert f"snippets/{key}'s docstring changed after its translation (now {now})" in line
    notebook = notebook_for(snippet, older)
    assert older.notice in notebook.cells[0].source  # English, under the notice


def test_a_notebook_text_that_is_missing_unknown_or_disagrees_is_named(tmp_path, monkeypatch):
    first, second, third = discover()[:3]
    english = notebook_translations.english_docstring(first)
    spans = " ".join(re.findall(r"`[^`]+`", english))
    language = _translations_in(
        tmp_path,
        monkeypatch,
        f"{notebook_translations.key_of(first)}:\n"
        f'  english: "{notebook_translations.digest(english)}"\n'
        f"  docstring: |\n    标题\n\n    {spans} `extra` 12345\n"
        f"{notebook_translations.key_of(third)}:\n  english: 22262738\n  docstring: 标题\n"
        f"basics/no_such_script.py:\n  english: 00000000\n  docstring: x\n",
    )
    found = "\n".join(notebook_translations.problems(language))
    assert (
        f"no translation of the docstring of snippets/{notebook_translations.key_of(second)}"
        in found
    )
    assert "'basics/no_such_script.py' is not a script with a docstring" in found
    assert "its prose states 12345 1 time(s), English's 0" in found
    assert (
        "its inline code differs from the English docstring's: missing [], extra ['`extra`']"
        in found
    )
    assert "english: 22262738 is not an 8-hex-digit digest in quotes" in found
