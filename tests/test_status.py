"""Translation status: translated, out of date (from git history) or shown in English."""

import os
import subprocess
from pathlib import Path

import pytest
from sitetools import status
from sitetools.i18n import load_languages
from sitetools.status import Change, State, compare, last_changes


def git(repo: Path, *args: str, when: int = 1_700_000_000) -> None:
    stamp = f"{when} +0000"
    env = os.environ | {"GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """Two pages in English and Chinese, committed together; then only English changes."""
    for page in ("docs/en/a.md", "docs/zh/a.md", "docs/en/b.md", "docs/zh/b.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("# A\n", encoding="utf-8")
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pages")
    (tmp_path / "docs/en/a.md").write_text("# A, changed\n", encoding="utf-8")
    git(
        tmp_path,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qam",
        "en",
        when=1_700_086_400,
    )
    return tmp_path


def test_english_changed_after_the_translation_is_out_of_date(repo):
    changes = last_changes(repo)
    assert compare(changes["docs/en/a.md"], changes["docs/zh/a.md"]) is State.OUTDATED
    assert compare(changes["docs/en/b.md"], changes["docs/zh/b.md"]) is State.TRANSLATED
    assert changes["docs/en/a.md"].date == "2023-11-15"


def test_an_english_change_marked_unaffected_leaves_translations_up_to_date(repo):
    changes = last_changes(repo)
    assert changes["docs/en/b.md"].date == "2023-11-14"  # the commit before the typo fix
    assert compare(changes["docs/en/b.md"], changes["docs/zh/b.md"]) is State.TRANSLATED


def test_uncommitted_edits_count_as_now(repo):
    (repo / "docs/zh/a.md").write_text("# A, translated again\n", encoding="utf-8")
    changes = last_changes.__wrapped__(repo)
    assert changes["docs/zh/a.md"].commit is None
    assert compare(changes["docs/en/a.md"], changes["docs/zh/a.md"]) is State.TRANSLATED


def test_without_history_nothing_is_out_of_date(tmp_path):
    assert last_changes(tmp_path) == {}
    assert compare(None, None) is State.TRANSLATED


def test_make_test_warns_about_outdated_and_untranslated_pages(monkeypatch):
    zh = load_languages()["zh"]
    monkeypatch.setattr(
        status,
        "status_of",
        lambda language: (
            [
                status.PageStatus("index.md", State.TRANSLATED),
                status.PageStatus("glossary.md", State.FALLBACK),
                status.PageStatus(
                    "basics/x.md",
                    State.OUTDATED,
                    Change(1_700_086_400, "abcdef12345"),
                    Change(1_700_000_000, "0123456789"),
                ),
            ]
            if language == zh
            else []
        ),
    )
    monkeypatch.setattr(status, "has_history", lambda: True)
    assert status.warnings() == [
        "docs/zh/glossary.md: not translated, shown in English",
        "docs/zh/basics/x.md: out of date: docs/en/basics/x.md changed 2023-11-15 (abcdef1) "
        "after the translation 2023-11-14 (0123456)",
    ]


def test_an_out_of_date_row_uses_its_language_s_own_brackets(monkeypatch):
    outdated = status.PageStatus(
        "index.md", State.OUTDATED, Change(1_700_086_400, "abc"), Change(1_700_000_000, "def")
    )
    monkeypatch.setattr(status, "status_of", lambda language: [outdated])
    languages = load_languages()
    assert "| out of date (English changed 2023-11-15) |" in status.status_table(languages["en"])
    assert "| 译文过时（英文版更新于 2023-11-15） |" in status.status_table(languages["zh"])


def test_every_language_has_a_status_page_listing_every_page(site):
    english = status.english_pages()
    for code, language in load_languages().items():
        page = (site / language.prefix / "translation-status" / "index.html").read_text(
            encoding="utf-8"
        )
        for other in (c for c in load_languages() if c != "en"):
            assert f'id="{other}"' in page
        # one row per English page and non-English language, each in the page's language
        assert page.count("<tr>") == (1 + len(english)) * (len(load_languages()) - 1), code
        assert language.labels["status_translated"] in page, code
