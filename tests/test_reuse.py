"""Reusing test results: a change to each kind of input runs again exactly the tests that
depend on it, and CI=true (or --no-reuse) reuses nothing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sitebuild import copy_files
from sitetools import REPO, testcache

FILES = {
    "uv.lock": "lock",
    "mkdocs.yml": "settings",
    "docs/en/index.md": "en home",
    "docs/en/index.md#title": "en home title",
    "docs/en/basics/b.md": "en page",
    "docs/zh/index.md": "zh home",
    "docs/ko/index.md": "ko home",
    "snippets/basics/jax_in_one_page.py": "a",
    "snippets/basics/jax_in_one_page.py#title": "a title",
    "snippets/basics/jax_in_one_page.out": "a out",
    "snippets/basics/jax_in_one_page.py#recording": "a recorded with",
    "snippets/recordings.json": "every recording",
    "snippets/data_parallel/linear_regression.py": "shown on the tutorial page",
    "snippets/data_parallel/mlp_data_parallel.py": "not shown there",
    "snippets/training_step/gpt.py": "gpt",
    "snippets/training_step/layouts.py": "layouts",
    "src/jaxpar/batching.py": "jaxpar",
    "src/jaxpar/compiled.py": "compiled",
    "src/jaxpar/compiled.py#code": "compiled, without docstrings",
    "src/jaxpar/launch.py": "launcher",
    "src/jaxpar/launch.py#code": "launcher, without docstrings",
    "tools/sitetools/snippets.py": "runner",
    "tools/sitetools/hant.py": "hant",
    "tests/test_site.py": "site tests",
    "tests/test_snippets.py": "snippet tests",
    "tests/test_launch.py": "launch tests",
    "tests/hlo/fsdp8_gpu.txt": "recorded XLA:GPU HLO",
}
SNIPPET_A = REPO / "snippets/basics/jax_in_one_page.py"
TESTS = {  # a test of each kind: (module, name, parameters)
    "site": ("test_site.py", "test_languages_have_the_same_pages", {}),
    "snippet a": (
        "test_snippets.py",
        "test_snippet_output_matches_recording",
        {"snippet": SNIPPET_A},
    ),
    "parser": ("test_compiled.py", "test_loop_trip_counts_and_mesh_axes", {"backend": "gpu"}),
    "snippet gpt": (
        "test_snippets.py",
        "test_snippet_output_matches_recording",
        {"snippet": REPO / "snippets/training_step/gpt.py"},
    ),
    "snippet layouts": (
        "test_snippets.py",
        "test_snippet_output_matches_recording",
        {"snippet": REPO / "snippets/training_step/layouts.py"},
    ),
    "fewer devices": (
        "test_snippets.py",
        "test_snippets_run_on_fewer_devices",
        {"snippet": SNIPPET_A, "devices": 1},
    ),
    "launcher": ("test_launch.py", "test_a_rank_that_fails_stops_the_run", {}),
    "home en": (
        "test_browser.py",
        "test_page_loads_cleanly_and_accessibly",
        {"kind": "home", "code": "en"},
    ),
    "home ko": (
        "test_browser.py",
        "test_page_loads_cleanly_and_accessibly",
        {"kind": "home", "code": "ko"},
    ),
    "tutorial en": (
        "test_browser.py",
        "test_page_loads_cleanly_and_accessibly",
        {"kind": "tutorial", "code": "en"},
    ),
    "search ko": (
        "test_browser.py",
        "test_search_finds_pages_of_its_own_language_only",
        {"code": "ko"},
    ),
    "notebook a": (
        "test_site.py",
        "test_notebook_page_and_download_in_every_language",
        {"snippet": SNIPPET_A},
    ),
    "small copy": (
        "test_site.py",
        "test_missing_includes_and_broken_anchors_fail_the_build_naming_page_and_path",
        {},
    ),
}
SITE = {
    "site",
    "home en",
    "home ko",
    "tutorial en",
    "search ko",
    "notebook a",
    "small copy",
}  # what the theme and tools make
API = {"site", "search ko", "small copy"}  # what reads jaxpar's docstrings (the API pages)


def keys(files: dict[str, str]) -> dict[str, str]:
    return {
        kind: testcache.key(testcache.inputs(module, name, params), files)
        for kind, (module, name, params) in TESTS.items()
    }


@pytest.mark.parametrize(
    "edited, expected",
    [
        # an English page that ko has translated: not ko's pages nor its search
        ("docs/en/basics/b.md", {"site"}),
        ("docs/en/index.md", {"site", "home en"}),
        # in every nav (ko's search indexes ko's own title of the page)
        ("docs/en/index.md#title", SITE - {"small copy", "search ko"}),
        ("docs/zh/index.md", {"site"}),  # a Chinese page
        ("snippets/basics/jax_in_one_page.out", {"site", "snippet a", "notebook a"}),  # a recording
        (
            "snippets/basics/jax_in_one_page.py",
            {"site", "snippet a", "fewer devices", "notebook a"},
        ),
        ("snippets/basics/jax_in_one_page.py#title", SITE - {"small copy"}),
        # what pages say of its recording: every page may show its output
        ("snippets/basics/jax_in_one_page.py#recording", SITE),
        ("snippets/recordings.json", {"site"}),  # the sources recorded, as such
        # what the tutorial page includes, and a snippet of its chapter that it does not
        ("snippets/data_parallel/linear_regression.py", {"site", "tutorial en", "small copy"}),
        ("snippets/data_parallel/mlp_data_parallel.py", {"site"}),
        # needs 8 devices; layouts.py imports it
        ("snippets/training_step/gpt.py", {"site", "snippet gpt", "snippet layouts"}),
        ("snippets/training_step/layouts.py", {"site", "snippet layouts"}),
        # a jaxpar module's docstrings: what reads the API pages, nothing that runs it
        ("src/jaxpar/batching.py", API),
        ("src/jaxpar/compiled.py", API),
        # its code: what runs it (a code edit changes both the module and its code)
        # gpt.py uses jaxpar.summarise, and the parser's tests test it
        ("src/jaxpar/compiled.py#code", API | {"snippet gpt", "snippet layouts", "parser"}),
        ("tests/hlo/fsdp8_gpu.txt", {"parser"}),  # recorded HLO: only the parser's tests
        ("src/jaxpar/launch.py#code", API | {"launcher"}),
        ("tools/sitetools/snippets.py", set(TESTS) - {"launcher", "parser"}),  # the runner
        ("tools/sitetools/hant.py", SITE),  # other site machinery
        ("mkdocs.yml", SITE),
        # a test module
        (
            "tests/test_snippets.py",
            {"snippet a", "snippet gpt", "snippet layouts", "fewer devices"},
        ),
        ("uv.lock", set(TESTS)),  # the lock file
    ],
)
def test_an_edit_changes_the_keys_of_exactly_the_tests_that_read_it(edited, expected):
    before = keys(FILES)
    after = keys(FILES | {edited: FILES[edited] + " edited"})
    assert {kind for kind in TESTS if before[kind] != after[kind]} == expected


def test_recording_a_snippet_again_leaves_what_pages_say_of_it_as_it_was():
    """A page says what a snippet's output was recorded with, or that its script changed
    since: recording it again after an edit changes neither (the pages need no new build)."""
    script, edited = b"print(1)\n", b"print(1)  # edited\n"
    entry = {
        "jax": "0.12.0",
        "cpu": "x86-64",
        "source": hashlib.sha256(script).hexdigest(),
    }
    recorded_again = entry | {"source": hashlib.sha256(edited).hexdigest()}
    said = testcache._recording(entry, script)
    assert testcache._recording(recorded_again, edited) == said
    assert testcache._recording(entry, edited) != said  # edited, not recorded: a notice
    assert testcache._recording(entry | {"jax": "0.13.0"}, script) != said
    assert testcache._recording(None, script) != said


def test_a_language_reads_the_english_pages_it_has_no_translation_of(tmp_path, monkeypatch):
    from sitetools import i18n

    for page in ("en/index.md", "en/basics/b.md", "ko/index.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("# A page\n")
    monkeypatch.setattr(i18n, "DOCS", tmp_path)
    assert testcache._english_fallbacks("ko") == ("docs/en/basics/b.md",)
    assert testcache._english_fallbacks("en") == ("docs/en/*",)
    search = testcache.inputs(
        "test_browser.py", "test_search_finds_pages_of_its_own_language_only", {"code": "ko"}
    )
    assert "docs/en/basics/b.md" in search and "docs/en/index.md" not in search
    (tmp_path / "ko/basics").mkdir()
    (tmp_path / "ko/basics/b.md").write_text("# 페이지\n")
    assert testcache._english_fallbacks("ko") == ()


def test_a_new_snippet_changes_the_keys_that_read_every_file():
    before = keys(FILES)
    after = keys(FILES | {"snippets/basics/b.py": "new"})
    assert {kind for kind in TESTS if before[kind] != after[kind]} == {"site"}


def test_a_commit_changes_only_what_reads_the_history():
    before = keys(FILES | {"git:HEAD": "1"})
    after = keys(FILES | {"git:HEAD": "2"})
    assert {kind for kind in TESTS if before[kind] != after[kind]} == set()
    status = (
        "test_browser.py",
        "test_page_loads_cleanly_and_accessibly",
        {"kind": "status", "code": "ko"},
    )
    assert testcache.key(testcache.inputs(*status), FILES | {"git:HEAD": "1"}) != testcache.key(
        testcache.inputs(*status), FILES | {"git:HEAD": "2"}
    )


@pytest.mark.parametrize(
    "change",
    [
        lambda monkeypatch: monkeypatch.setattr(sys, "version", "3.13.0 (another Python)"),
        lambda monkeypatch: monkeypatch.setattr(testcache, "CPU_FEATURES", frozenset({"__none__"})),
        lambda monkeypatch: monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2"),
    ],
    ids=["python", "cpu-features", "xla-flags"],
)
def test_the_machine_changes_every_key(monkeypatch, change):
    before = keys(FILES)
    testcache.machine.cache_clear()
    testcache._key.cache_clear()
    change(monkeypatch)
    try:
        after = keys(FILES)
    finally:
        testcache.machine.cache_clear()
        testcache._key.cache_clear()
    assert all(before[kind] != after[kind] for kind in TESTS)


PROJECT_TEST = """
    from pathlib import Path
    def test_reads_a():
        assert Path("data/a.txt").read_text() == "a"
    def test_reads_b():
        assert Path("data/b.txt").read_text() == "b"
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git project with the site's test machinery and two tests of its own."""
    copy_files(["tools/sitetools", "tests/reuse.py", "pyproject.toml", "uv.lock"], tmp_path)
    (tmp_path / "tests/conftest.py").write_text('pytest_plugins = ["reuse"]\n')
    (tmp_path / "tests/test_project.py").write_text(textwrap.dedent(PROJECT_TEST))
    (tmp_path / "data").mkdir()
    (tmp_path / "data/a.txt").write_text("a")
    (tmp_path / "data/b.txt").write_text("b")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    # This module's inputs: its own tests read data/a.txt and data/b.txt.
    module = tmp_path / "tools/sitetools/testcache.py"
    module.write_text(
        module.read_text(encoding="utf-8")
        + '\nNARROWER[("test_project.py", "test_reads_a")] = lambda _: ("data/a.txt",)\n'
        + 'NARROWER[("test_project.py", "test_reads_b")] = lambda _: ("data/b.txt",)\n',
        encoding="utf-8",
    )
    return tmp_path


def pytest_in(project: Path, *args: str, ci: bool = False) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER")}
    env |= {"PYTHONPATH": str(project / "tools"), **({"CI": "true"} if ci else {})}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-q", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return next(line for line in done.stdout.splitlines() if line.startswith("results:"))


def test_make_test_runs_only_what_an_edit_can_affect_and_ci_runs_everything(project):
    assert pytest_in(project).startswith("results: reused 0 whose inputs are unchanged")
    assert pytest_in(project).startswith(
        "results: reused 2 whose inputs are unchanged since they passed, ran 0"
    )
    (project / "data/b.txt").write_text("b")  # the same contents: nothing to run
    assert ", ran 0 " in pytest_in(project)
    (project / "data/b.txt").write_text("b\n".strip())
    (project / "data/a.txt").write_text("a ")  # now test_reads_a fails...
    with pytest.raises(AssertionError, match="1 failed"):
        pytest_in(project)
    (project / "data/a.txt").write_text("a")  # ...and runs again until it passes
    assert pytest_in(project).startswith(
        "results: reused 1 whose inputs are unchanged since they passed, ran 1"
    )
    assert pytest_in(project, ci=True) == "results: reused none (CI=true or --no-reuse), ran 2"
    assert pytest_in(project, "--no-reuse") == "results: reused none (CI=true or --no-reuse), ran 2"
    assert ", ran 0 " in pytest_in(project)  # CI=true neither reads nor forgets the results
    assert ", ran 2 " in pytest_in(project, "--cache-clear")
