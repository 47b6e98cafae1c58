"""The project's own tooling: workflows, the Makefile's Python check, lint, and `mkdocs serve`."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sitebuild import copy_project
from sitetools import REPO
from sitetools.i18n import load_languages

BIN = Path(sys.executable).parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))


def run(*command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120, **kwargs)


def test_workflows_are_valid():
    result = run(
        str(BIN / "check-jsonschema"),
        "--builtin-schema",
        "vendor.github-workflows",
        *map(str, WORKFLOWS),
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_workflows_are_clean_under_zizmor():
    result = run(
        str(BIN / "zizmor"), "--offline", "--no-progress", str(REPO / ".github" / "workflows")
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_deploy_runs_only_from_main_after_tests_with_least_privilege():
    text = (REPO / ".github" / "workflows" / "site.yml").read_text(encoding="utf-8")
    assert "permissions:\n  contents: read" in text
    assert text.count("pages: write") == 1 and text.count("id-token: write") == 1
    assert "needs: test" in text and "needs: build" in text
    assert "github.ref == 'refs/heads/main'" in text
    for line in text.splitlines():
        if "uses:" in line:
            assert "@" in line and len(line.split("@")[1].split()[0]) == 40, (
                f"action not pinned: {line}"
            )


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=" ".join)
def test_ruff_is_clean(command):
    result = run(str(BIN / "ruff"), *command, "src", "tools", "tests", "snippets")
    assert result.returncode == 0, (
        f"{result.stdout}{result.stderr}\nfix with: ruff {' '.join(command)}"
    )


def test_makefile_names_the_python_it_needs(tmp_path):
    fake = tmp_path / "python3.11"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Python 3.11.7' && exit 0\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    result = run("make", "--no-print-directory", "check-python", f"PYTHON={fake}")
    assert result.returncode != 0
    assert "needs Python 3.12 or newer, but found Python 3.11.7" in result.stderr
    assert "make PYTHON=/path/to/python3.12" in result.stderr


def test_makefile_pins_the_uv_of_the_lock():
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    pinned = next(
        line.split(":=")[1].strip()
        for line in makefile.splitlines()
        if line.startswith("UV_VERSION")
    )
    assert f'"uv=={pinned}"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(project: Path, *options: str) -> Iterator[Callable[[str], str]]:
    """``mkdocs serve`` of ``project``; yields a function that fetches a path once served.
    What it prints goes to ``serve.log`` beside ``project``."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"NO_MKDOCS_2_WARNING": "1"}
    log = (project.parent / "serve.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "mkdocs"), "serve", *options, "-a", f"127.0.0.1:{port}"],
        cwd=project,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def get(path: str) -> str:
        deadline = time.monotonic() + 120
        while True:
            try:
                url = f"http://127.0.0.1:{port}/{path}"
                with urllib.request.urlopen(url, timeout=5) as response:
                    return response.read().decode()
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    "mkdocs serve did not come up"
                )
                time.sleep(0.5)

    try:
        yield get
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


NAV_TITLE = re.compile(r'<span class="md-ellipsis">\s*(.*?)\s*</span>', re.DOTALL)


def test_make_serve_rebuilds_an_edited_page_and_after_a_restart_only_what_changed(tmp_path):
    """`make serve` (`mkdocs serve --dirty`) serves every language; it rebuilds only the
    edited page, whose nav and Previous/Next links still name every page it did not
    rebuild, in every language. Its first run builds the other languages side by side into
    .cache/site/; a restart copies them from there, rebuilding none, and an edit after it
    keeps the nav; a translation removed before a restart gives the English page."""
    project = copy_project(tmp_path / "project")

    def edit_and_get(get, language: str, path: str, text: str) -> str:
        page = project / "docs" / language / "glossary.md"
        page.write_text(page.read_text(encoding="utf-8") + f"\n{text}\n", encoding="utf-8")
        deadline = time.monotonic() + 120
        while f"<p>{text}</p>" not in (html := get(path)):
            assert time.monotonic() < deadline, f"{path} was not rebuilt after the edit"
            time.sleep(0.5)
        return html

    paths = {"en": "glossary/", "zh": "zh/glossary/"}
    with serving(project, "--dirty") as get:
        served = [("ko/glossary/", "ko"), ("zh/glossary/", "zh"), ("zh-hant/glossary/", "zh-TW")]
        for path, lang in [*served, ("glossary/", "en")]:
            assert f'<html lang="{lang}"' in get(path)
        before = {path: NAV_TITLE.findall(get(path)) for path in paths.values()}
        for language, path in paths.items():
            assert NAV_TITLE.findall(edit_and_get(get, language, path, "Edited.")) == before[path]
    assert all(len(titles) > 1 and "None" not in titles for titles in before.values())
    with serving(project, "--dirty") as get:
        assert NAV_TITLE.findall(get("zh/glossary/")) == before["zh/glossary/"]
        restart = (tmp_path / "serve.log").read_text(encoding="utf-8")
        html = edit_and_get(get, "zh", "zh/glossary/", "Edited again.")
    assert "Building documentation to directory" not in restart, restart
    assert NAV_TITLE.findall(html) == before["zh/glossary/"]
    (project / "docs" / "ko" / "glossary.md").unlink()
    with serving(project, "--dirty") as get:
        assert load_languages()["ko"].notice in get("ko/glossary/")
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_home_page_install_line_pins_what_the_lock_pins():
    """Readers install what the outputs were recorded with: the home page's pins, in every
    language, are uv.lock's versions, and cover every package the snippets import."""
    lock = (REPO / "uv.lock").read_text(encoding="utf-8")
    locked = dict(re.findall(r'^name = "([^"]+)"\nversion = "([^"]+)"', lock, flags=re.MULTILINE))
    for language in ("en", "zh", "ko"):
        page = (REPO / "docs" / language / "index.md").read_text(encoding="utf-8")
        pins = dict(re.findall(r'"([a-z][a-z0-9-]*)==([^"]+)"', page))
        assert set(pins) >= {
            "jax",
            "flax",
            "optax",
            "orbax-checkpoint",
            "grain",
            "numpy",
            "rich",
            "scikit-learn",
        }, f"docs/{language}/index.md pins {pins}"
        stale = {
            name: (version, locked.get(name))
            for name, version in pins.items()
            if locked.get(name) != version
        }
        assert not stale, f"docs/{language}/index.md: pinned vs locked {stale}"


def test_the_examples_in_the_site_tools_docstrings_hold():
    import doctest
    import importlib
    import pkgutil

    import sitetools

    tried = 0
    for module_info in pkgutil.iter_modules(sitetools.__path__):
        module = importlib.import_module(f"sitetools.{module_info.name}")
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0, module_info.name
        tried += result.attempted
    assert tried >= 5
