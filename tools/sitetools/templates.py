"""Compiled Jinja templates kept between builds.

Every MkDocs build creates fresh Jinja environments and compiles Material's and
mkdocstrings' templates again, over a second of each build here; with one build per
language and a rebuild on every edit under `mkdocs serve`, that dominated reload time.
Jinja's own bytecode cache keys each template by its name and source checksum.
"""

from __future__ import annotations

from jinja2 import Environment, FileSystemBytecodeCache

from sitetools import REPO

CACHE_DIR = REPO / ".cache" / "jinja"


def cache_compiled_templates(env: Environment) -> None:
    """Make ``env`` reuse templates compiled by earlier builds."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    env.bytecode_cache = FileSystemBytecodeCache(str(CACHE_DIR))
