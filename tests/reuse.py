"""A pytest plugin: run only the tests whose inputs changed since they last passed.

``sitetools.testcache`` computes each test's key; this plugin deselects the tests whose key
is the one they last passed with, remembers the keys of the tests that pass, and says how
many results it reused and how many tests it ran. ``CI=true`` or ``--no-reuse`` reuses nothing.
"""

from __future__ import annotations

import os

import pytest
from sitetools import testcache

REUSED = "jaxpar_reused"
KEYS = "jaxpar_keys"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-reuse",
        action="store_true",
        help="run every test, reusing no earlier result (CI=true does the same)",
    )


def reusing(config: pytest.Config) -> bool:
    """Whether earlier results may stand in for this run's: not in CI, not when asked."""
    ci = os.environ.get("CI", "").lower() in ("true", "1")
    return not (ci or config.getoption("no_reuse") or getattr(config, "cache", None) is None)


def test_key(item: pytest.Item) -> str:
    params = item.callspec.params if hasattr(item, "callspec") else {}
    return testcache.key(testcache.inputs(item.path.name, item.originalname, params))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not reusing(config):
        return
    keys = {item.nodeid: test_key(item) for item in items}
    passed = config.cache.get(testcache.CACHE_KEY, {})
    reused = [item for item in items if passed.get(item.nodeid) == keys[item.nodeid]]
    if reused:
        items[:] = [item for item in items if passed.get(item.nodeid) != keys[item.nodeid]]
        config.hook.pytest_deselected(items=reused)
    config.stash[_reused] = len(reused)
    config.stash[_keys] = {item.nodeid: keys[item.nodeid] for item in items}
    if hasattr(config, "workeroutput"):  # a pytest-xdist worker: tell the controller
        config.workeroutput[REUSED] = len(reused)
        config.workeroutput[KEYS] = config.stash[_keys]


_reused = pytest.StashKey[int]()
_keys = pytest.StashKey[dict[str, str]]()
_outcomes = pytest.StashKey[dict[str, bool]]()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # pytest-xdist's hook, in the controller
    output = getattr(node, "workeroutput", {})
    if REUSED in output:
        node.config.stash[_reused] = output[REUSED]
        node.config.stash.setdefault(_keys, {}).update(output[KEYS])


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[_outcomes] = {}

    class Outcomes:
        @staticmethod
        def pytest_runtest_logreport(report: pytest.TestReport) -> None:
            outcomes = config.stash[_outcomes]
            # Passed only if every phase passed and the test body ran (not skipped).
            ok = report.passed and not (report.when == "call" and report.skipped)
            if report.when == "call":
                outcomes[report.nodeid] = outcomes.get(report.nodeid, True) and ok
            elif not report.passed:
                outcomes[report.nodeid] = False

    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Outcomes(), "jaxpar-outcomes")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not reusing(config):
        return
    keys, outcomes = config.stash.get(_keys, {}), config.stash[_outcomes]
    passed = dict(config.cache.get(testcache.CACHE_KEY, {}))
    for nodeid, ok in outcomes.items():
        if ok and nodeid in keys:
            passed[nodeid] = keys[nodeid]
        else:
            passed.pop(nodeid, None)
    config.cache.set(testcache.CACHE_KEY, passed)
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and config.stash.get(_reused, 0):
        session.exitstatus = pytest.ExitCode.OK  # everything was reused: nothing had to run


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    ran = len(config.stash[_outcomes])
    if not reusing(config):
        terminalreporter.write_line(f"results: reused none (CI=true or --no-reuse), ran {ran}")
        return
    reused = config.stash.get(_reused, 0)
    terminalreporter.write_line(
        f"results: reused {reused} whose inputs are unchanged since they passed, ran {ran} "
        f"(pytest --cache-clear or make test-all runs everything)"
    )
