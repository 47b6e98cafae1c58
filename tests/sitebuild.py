"""Building the site (or a modified copy of it) from the tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from sitetools import REPO

# What a build reads; a copy of these is a complete project to build.
SITE_SOURCES = ["mkdocs.yml", "docs", "snippets", "src", "tools", "overrides"]


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


def copy_project(target: Path) -> Path:
    """A copy of the site's sources, to break on purpose."""
    target.mkdir(parents=True, exist_ok=True)
    for name in SITE_SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target / name)
    return target
