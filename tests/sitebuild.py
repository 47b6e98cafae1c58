"""Building the site (or a modified copy of it) from the tests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sitetools import REPO, hant
from sitetools.i18n import load_languages
from sitetools.notebook_translations import FILE_NAME


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


def start_shared_build(root: Path) -> None:
    """Start building the whole site into ``root/site`` in the background, once.

    Every test process asks at start-up; the first one starts the build, and it runs
    beside the first tests instead of holding up the ones that read the site.
    """
    try:
        (root / "site-build").mkdir(parents=True)
    except FileExistsError:
        return
    with (root / "site-build" / "log").open("w") as log:
        builder = subprocess.Popen(
            [sys.executable, __file__, str(root)],
            cwd=REPO,
            env=os.environ | {"PYTHONPATH": str(REPO / "tools")},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    (root / "site-build" / "pid").write_text(str(builder.pid))


def wait_for_shared_build(root: Path, timeout: float = 300) -> Path:
    """The site that :func:`start_shared_build` builds, once it is done (or fail, saying why)."""
    state = root / "site-build"
    result = state / "result.json"
    deadline = time.monotonic() + timeout
    while not result.exists():
        stopped = not _running(state / "pid") and not result.exists()
        if stopped or time.monotonic() > deadline:
            log = (state / "log").read_text(encoding="utf-8", errors="replace")
            raise AssertionError(f"the shared site build in {root} gave no result:\n{log}")
        time.sleep(0.2)
    outcome = json.loads(result.read_text(encoding="utf-8"))
    assert outcome["returncode"] == 0, f"the strict build failed:\n{outcome['output']}"
    return root / "site"


def _running(pid_file: Path) -> bool:
    if not pid_file.exists():  # the build is being started
        return True
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ValueError:  # the pid is being written
        return True
    except ProcessLookupError:
        return False
    return True


def _build_and_record(root: Path) -> None:
    done = build(REPO, root / "site")
    partial = root / "site-build" / "result.partial"
    partial.write_text(
        json.dumps({"returncode": done.returncode, "output": done.stdout + done.stderr}),
        encoding="utf-8",
    )
    partial.replace(root / "site-build" / "result.json")


# What a small copy keeps: enough to build every language in a few seconds.
# A label of the tutorial page's diagram (sitetools.weight.PAGE_TYPES["tutorial"]), per language.
TUTORIAL_LABEL = {"en": "device 0", "zh": "设备 0", "ko": "디바이스 0", "zh-hant": "裝置 0"}
SMALL_PAGES = ["glossary.md"]  # it links to no other page
SMALL_SNIPPET = "data_parallel/linear_regression"


def copy_files(names: list[str], target: Path) -> None:
    """Files and folders of the repository (by relative name) into ``target``."""
    for name in names:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def copy_project(target: Path) -> Path:
    """A small copy of the site, to break on purpose: two pages and one snippet per language
    (and every notebook text)."""
    target.mkdir(parents=True, exist_ok=True)
    terms = hant.TERMS_FILE.relative_to(REPO)
    copy_files(["src", "tools", "overrides", "docs/languages.yml", str(terms)], target)
    for language in load_languages().values():
        folder = language.docs_dir.relative_to(REPO)  # a converted language has none
        (target / folder).mkdir(parents=True, exist_ok=True)
        for page in SMALL_PAGES:
            shutil.copy2(REPO / folder / page, target / folder / page)
        if (REPO / folder / FILE_NAME).exists():  # the notebook pages' texts
            shutil.copy2(REPO / folder / FILE_NAME, target / folder / FILE_NAME)
    for suffix in (".py", ".out"):
        snippet = Path("snippets") / f"{SMALL_SNIPPET}{suffix}"
        (target / snippet).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / snippet, target / snippet)
    copy_files(["snippets/recordings.json"], target)  # what recorded the outputs
    # The same settings with a smaller nav (edited as text: mkdocs.yml has !!python tags).
    config = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    nav = re.search(r"^nav:\n(?:[ #].*\n|\n)*", config, flags=re.MULTILINE)
    small_nav = "nav:\n" + "".join(f"  - {page}\n" for page in SMALL_PAGES)
    (target / "mkdocs.yml").write_text(config.replace(nav[0], small_nav), encoding="utf-8")
    return target


if __name__ == "__main__":
    _build_and_record(Path(sys.argv[1]))
