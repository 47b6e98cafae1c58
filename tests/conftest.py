"""Shared set-up: 8 simulated CPU devices in every test process, as on the site's pages."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402
from sitebuild import build  # noqa: E402
from sitetools import REPO  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The whole site, every language, built once (strict) for the tests that read it."""
    site_dir = tmp_path_factory.mktemp("built") / "site"
    result = build(REPO, site_dir)
    assert result.returncode == 0, f"the strict build failed:\n{result.stdout}\n{result.stderr}"
    return site_dir
