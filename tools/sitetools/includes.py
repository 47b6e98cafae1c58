"""The ``--8<--`` includes of a page: which files and sections it shows, and whether they exist.

``pymdownx.snippets`` with ``check_paths: true`` fails on a missing include, but its
message names neither the page nor, for a missing section, the file. The build runs this
check first so that the error says all three, and the translation check uses it to
compare what each language includes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sitetools import REPO
from sitetools.snippets import SECTION_MARKER

INCLUDE_LINE = re.compile(r'^\s*-+8<-+\s+"(?P<target>[^"]+)"\s*$')
SECTION_SUFFIX = re.compile(r"^(?P<path>.+?):(?P<section>[a-z][-_0-9a-z]*)$")


@dataclass(frozen=True)
class Include:
    """One include: a file under the repository, and optionally a named section of it."""

    path: str
    section: str | None

    def __str__(self) -> str:
        return f"{self.path}:{self.section}" if self.section else self.path


def find_includes(markdown: str) -> list[Include]:
    """Every block include (``--8<-- "path[:section]"``) of a page, in order."""
    includes = []
    for line in markdown.splitlines():
        match = INCLUDE_LINE.match(line)
        if match:
            target = match["target"]
            named = SECTION_SUFFIX.match(target)
            includes.append(
                Include(named["path"], named["section"]) if named else Include(target, None)
            )
    return includes


def sections_of(path: Path) -> list[str]:
    """The named sections a file defines."""
    names = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = SECTION_MARKER.match(line)
        if match and match["kind"] == "start":
            names.append(match["name"])
    return names


def check_includes(markdown: str, page: str) -> list[str]:
    """A message for each include of ``page`` whose file or section does not exist."""
    problems = []
    for include in find_includes(markdown):
        path = REPO / include.path
        if not path.is_file():
            problems.append(f"{page} includes {include.path}, which does not exist.")
        elif include.section and include.section not in (names := sections_of(path)):
            problems.append(
                f"{page} includes section '{include.section}' of {include.path}, which has no such "
                f"section; its sections are: {', '.join(names) or 'none'}."
            )
    return problems
