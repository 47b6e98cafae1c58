"""Building the site (or a modified copy of it) from the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from sitetools import REPO


def build(project: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``project`` into ``site_dir``, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NO_MKDOCS_2_WARNING"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


# What a small copy keeps: enough to build every language in a few seconds.
SMALL_PAGES = ["glossary.md"]  # it links to no other page
SMALL_SNIPPET = "data_parallel/linear_regression"


def copy_project(target: Path) -> Path:
    """A small copy of the site, to break on purpose: two pages and one snippet per language."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ["src", "tools", "overrides", "docs/languages.yml"]:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    for language in (REPO / "docs").iterdir():
        for page in SMALL_PAGES if language.is_dir() else []:
            (target / "docs" / language.name).mkdir(parents=True, exist_ok=True)
            shutil.copy2(language / page, target / "docs" / language.name / page)
    for suffix in (".py", ".out"):
        snippet = Path("snippets") / f"{SMALL_SNIPPET}{suffix}"
        (target / snippet).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / snippet, target / snippet)
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    config["nav"] = list(SMALL_PAGES)
    (target / "mkdocs.yml").write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return target
