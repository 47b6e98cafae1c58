"""Translation status from git history: translated, falling back to English, or out of date.

A translation is out of date when its English page changed after it: the last commit that
touched ``docs/en/<page>`` is newer than the last one that touched ``docs/<code>/<page>``
(uncommitted edits count as now). Updating the translation brings it up to date; an
English change that needs no translation says so in its commit message, with the trailer
``Translations: unaffected``. The site's "Translation status" page shows the
result, and ``make test`` prints a warning for each page that is not translated.
"""

from __future__ import annotations

import datetime
import functools
import subprocess
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from mkdocs.structure.files import File

from sitetools import REPO, hant, notebook_translations
from sitetools.i18n import SOURCE_LANGUAGE, Language, load_languages
from sitetools.translations import HEADING, english_pages, other_languages

MARKER = "<!-- translation-status -->"
# A commit whose message ends with "Translations: unaffected" changes English pages in a
# way the translations need not follow (a typo, a stray line): it leaves them up to date.
TRAILER = "Translations"


class State(Enum):
    TRANSLATED = "translated"
    OUTDATED = "outdated"
    FALLBACK = "fallback"


@dataclass(frozen=True)
class Change:
    """The last change of a file: a commit, or the working tree if it has uncommitted edits."""

    time: float
    commit: str | None  # None: uncommitted

    @property
    def date(self) -> str:
        when = datetime.datetime.fromtimestamp(self.time, datetime.UTC)
        return when.date().isoformat()

    def __str__(self) -> str:
        return f"{self.date} ({self.commit[:7] if self.commit else 'uncommitted'})"


@dataclass(frozen=True)
class PageStatus:
    page: str  # path under docs/<code>/, like "basics/index.md"
    state: State
    english: Change | None = None
    translation: Change | None = None


def status_of(language: Language) -> list[PageStatus]:
    """Each English page's state in ``language``."""
    changes = last_changes()
    statuses = []
    for page in english_pages():
        if not (language.docs_dir / page).exists():
            statuses.append(PageStatus(page, State.FALLBACK))
            continue
        english = changes.get(f"docs/{SOURCE_LANGUAGE}/{page}")
        translation = changes.get(language.source(page))
        statuses.append(PageStatus(page, compare(english, translation), english, translation))
    return statuses


def compare(english: Change | None, translation: Change | None) -> State:
    """TRANSLATED, unless the English page changed after the translation did."""
    if english and translation and english.time > translation.time:
        return State.OUTDATED
    return State.TRANSLATED


def warnings() -> list[str]:
    """One line per page that a reader sees in English, or in an out-of-date translation."""
    lines = [] if has_history() else [f"no git history in {REPO}: out-of-date pages unknown"]
    english = load_languages()[SOURCE_LANGUAGE]
    for language in other_languages():  # a converted language's pages are its source's
        for status in status_of(language):
            page, source = language.source(status.page), english.source(status.page)
            if status.state is State.FALLBACK:
                lines.append(f"{page}: not translated, shown in English")
            elif status.state is State.OUTDATED:
                lines.append(
                    f"{page}: out of date: {source} changed {status.english} after the "
                    f"translation {status.translation}"
                )
        lines += notebook_translations.outdated(language)
    return lines


def status_table(language: Language) -> str:
    """The Markdown that replaces MARKER on the status page of ``language``'s site."""
    labels = language.labels
    # The status page is /translation-status/ or /<code>/translation-status/.
    root = "../" * (1 + language.prefix.count("/"))
    lines = []
    for code, other in load_languages().items():
        if code == SOURCE_LANGUAGE:
            continue
        statuses = status_of(other)
        counts = ", ".join(
            f"{labels[f'status_{state.value}']}: {sum(s.state is state for s in statuses)}"
            for state in State
        )
        lines += [f"## {other.name} {{#{code}}}", "", counts, ""]
        lines += [f"| {labels['status_page']} | {labels['status_state']} |", "|---|---|"]
        for status in statuses:
            # Raw HTML: these lead into another language's build, which MkDocs cannot
            # check; tests/test_links.py checks them in the built site.
            href = f"{root}{other.prefix}{_url(status.page)}"
            state = labels[f"status_{status.state.value}"]
            if status.state is State.OUTDATED:  # the label brings its own brackets: （…） in zh
                state = labels["status_outdated_since"].format(date=status.english.date)
            lines.append(f'| <a href="{href}">{title_of(other, status.page)}</a> | {state} |')
        lines.append("")
    return "\n".join(lines)


def title_of(language: Language, page: str) -> str:
    """The page's first heading in ``language`` (English where it has none), without {#id}."""
    path = language.docs_dir / page
    if not path.exists():
        path = REPO / "docs" / SOURCE_LANGUAGE / page
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# ") and (heading := HEADING.match(line)):
            return hant.convert(heading["text"]) if language.converted_from else heading["text"]
    return page


def _url(page: str) -> str:
    """The page's address relative to its language's root, as MkDocs gives it."""
    return File(page, None, "", use_directory_urls=True).url.removeprefix("./")


@functools.cache
def has_history(repo: Path = REPO) -> bool:
    shallow = _git(repo, "rev-parse", "--is-shallow-repository")
    return shallow is not None and shallow.strip() == "false"


@functools.cache
def last_changes(repo: Path = REPO) -> dict[str, Change]:
    """The last change of every file under docs/, by path from the repository root."""
    history = has_history(repo)
    log_format = f"--format=@%H %ct %(trailers:key={TRAILER},valueonly,separator=%x2C)"
    log = _git(repo, "log", log_format, "--name-only", "--", "docs") if history else None
    changes: dict[str, Change] = {}
    commit, unaffected = None, False
    for line in (log or "").splitlines():
        if line.startswith("@"):
            sha, time, *trailer = line[1:].split(" ", 2)
            commit = Change(float(time), sha)
            unaffected = "unaffected" in "".join(trailer).lower()
        elif line and commit is not None:
            if not (unaffected and line.startswith(f"docs/{SOURCE_LANGUAGE}/")):
                changes.setdefault(line, commit)
    now = datetime.datetime.now(datetime.UTC).timestamp()
    for line in (_git(repo, "status", "--porcelain", "--", "docs") or "").splitlines():
        changes[line[3:].strip()] = Change(now, None)
    return changes


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout
