"""Shared set-up: 8 simulated CPU devices in every test process, as on the site's pages."""

import fcntl
import json
import os
from collections.abc import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402
from sitebuild import start_shared_build, wait_for_shared_build  # noqa: E402
from sitetools import testcache  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# Reuse the results of tests whose inputs have not changed since they passed (tests/reuse.py).
pytest_plugins = ["reuse"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The snippet runs, the longest tests, go first; those that read the built site last,
    so that it builds beside the others."""

    def order(item: pytest.Item) -> tuple[bool, bool]:
        runs_a_snippet = item.name.startswith(("test_snippet_output", "test_snippets_run"))
        return "site" in item.fixturenames, not runs_a_snippet

    items.sort(key=order)


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that every test process of this run shares (pytest-xdist's workers too)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


Made = Callable[[str, Callable[[Path], str]], tuple[Path, str]]


@pytest.fixture(scope="session")
def once_per_run(tmp_path_factory) -> Made:
    """``once_per_run(name, make)``: ``make(folder)``, called by the first test process of
    this run that asks; the others wait for it, then get the same folder and result. (A
    module fixture runs once in each test process that runs one of its tests.)"""

    def made(name: str, make: Callable[[Path], str]) -> tuple[Path, str]:
        root = shared_root(tmp_path_factory) / "once" / name
        root.mkdir(parents=True, exist_ok=True)
        with (root / "lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            done = root / "result.json"
            if not done.exists():  # or make() failed in another process: it fails here too
                done.write_text(json.dumps(make(root / "folder")), encoding="utf-8")
            return root / "folder", json.loads(done.read_text(encoding="utf-8"))

    return made


@pytest.fixture(scope="session", autouse=True)
def _start_site_build(request, tmp_path_factory) -> None:
    """Start the one site build early, if any test of this run reads the site."""
    if any("site" in item.fixturenames for item in request.session.items):
        start_shared_build(shared_root(tmp_path_factory) / "shared")


# The key of every input of the site when a run last ended with every test passed.
SITE_CHECKED = "jaxpar/site-checked"


def reusing(config: pytest.Config) -> bool:
    """tests/reuse.py's answer (imported here, it could not be rewritten for assertions)."""
    return config.pluginmanager.get_plugin("reuse").reusing(config)


@pytest.hookimpl(trylast=True)  # once pytest's temporary folders are set up
def pytest_configure(config: pytest.Config) -> None:
    """Where results are reused (not in CI), start the site build before the test processes
    start and collect (5 s or so), if the site's inputs changed since the last run that
    passed: then some test that reads the site runs again."""
    if hasattr(config, "workerinput") or not reusing(config):
        return
    if config.cache.get(SITE_CHECKED, None) != testcache.key(testcache.EVERYTHING):
        start_shared_build(config._tmp_path_factory.getbasetemp() / "shared")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not reusing(config):
        return
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        config.cache.set(SITE_CHECKED, testcache.key(testcache.EVERYTHING))


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The whole site, every language, built once (strict) for all the tests that read it."""
    return wait_for_shared_build(shared_root(tmp_path_factory) / "shared")


def pytest_terminal_summary(terminalreporter) -> None:
    """Warn about pages that readers see in English or in an out-of-date translation."""
    from sitetools.status import warnings

    lines = warnings()
    if lines:
        terminalreporter.write_sep("=", f"translation status: {len(lines)} warnings", yellow=True)
        for line in lines:
            terminalreporter.write_line(f"WARNING {line}", yellow=True)
