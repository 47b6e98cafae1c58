"""Compiled Jinja templates kept between builds.

Every MkDocs build creates fresh Jinja environments and compiles Material's and
mkdocstrings' templates again, over a second of each build here; with one build per
language and a rebuild on every edit under `mkdocs serve`, that dominated reload time.
nbconvert does the same once per notebook (twice: the page and its table of contents),
about 3 s of a cold build. Jinja's own bytecode cache keys each template by its name and
source checksum.
"""

from __future__ import annotations

import functools

from jinja2 import Environment, FileSystemBytecodeCache
from nbconvert.exporters.templateexporter import TemplateExporter

from sitetools import REPO

CACHE_DIR = REPO / ".cache" / "jinja"


def cache_compiled_templates(env: Environment) -> None:
    """Make ``env`` reuse templates compiled by earlier builds."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    env.bytecode_cache = FileSystemBytecodeCache(str(CACHE_DIR))


def cache_nbconvert_templates() -> None:
    """Make every nbconvert exporter created from now on in this process reuse compiled
    templates (mkdocs-jupyter creates one per notebook, and offers no way to pass an
    environment). Calling it again changes nothing."""
    create = TemplateExporter._create_environment
    if getattr(create, "caches_templates", False):
        return

    @functools.wraps(create)
    def create_environment(self: TemplateExporter) -> Environment:
        env = create(self)
        cache_compiled_templates(env)
        return env

    create_environment.caches_templates = True
    TemplateExporter._create_environment = create_environment
