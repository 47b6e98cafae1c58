"""Test results reused while nothing they depend on has changed, as sphinx-gallery reuses an
example's output while its source's hash is the same.

Each test gets a key: the SHA-256 of everything its result depends on, that is the contents
of its input files (its own test module, and by default every file that makes the site,
the snippets, ``jaxpar`` and the tools) and what the machine brings (the lock file and the
packages installed, the Python version, the CPU features that change XLA:CPU's numbers,
``XLA_FLAGS`` and the ``JAX_*`` settings). A test that passed with a key is not run again while its key is the
same. The default is wide; :data:`NARROWER` gives the costly tests the inputs they really
read, so that an edit of one page does not run the snippets again, and an edit of one
snippet does not run the others.

The keys of the tests that passed live in pytest's own cache (``.pytest_cache/``, under
``jaxpar/passed``): ``pytest --cache-clear`` or ``rm -rf .pytest_cache`` forgets them, and
``CI=true`` or ``pytest --no-reuse`` (``make test-all``) runs everything.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

from sitetools import REPO

CACHE_KEY = "jaxpar/passed"
# What every test depends on, whatever it reads: how the tests run and what is installed.
ALWAYS = (
    "uv.lock",
    "pyproject.toml",
    "Makefile",
    "tests/conftest.py",
    "tests/sitebuild.py",
    "tests/reuse.py",
    "tools/sitetools/__init__.py",
    "tools/sitetools/testcache.py",
)
# What a test that names no narrower inputs is assumed to read: all the project's files,
# and the tests' own data (not the other test modules: each test's key has its own).
EVERYTHING = (
    "docs/*",
    "snippets/*",
    "src/*",
    "tools/*",
    "overrides/*",
    "mkdocs.yml",
    "tests/hant/*",
    ".github/*",
    ".ci/*",
    "README.md",
)
JAXPAR = ("src/jaxpar/*",)
SNIPPET_RUNNER = (
    "tools/sitetools/snippets.py",
    "tools/sitetools/prestarted.py",
    "tools/sitetools/tolerances.py",
)
# CPU features that change what XLA:CPU computes (its bf16 and matmul kernels are chosen by
# them): a recording checked on one CPU is checked again on a CPU that differs in these.
CPU_FEATURES = frozenset(
    "avx avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 "
    "amx_tile amx_bf16 amx_int8 asimd sve sve2 bf16 i8mm asimddp".split()
)


def tracked_files() -> dict[str, str]:
    """Every file of the working tree that git tracks or would track -> its SHA-256."""
    return dict(_tracked_files())


@functools.cache
def _tracked_files() -> tuple[tuple[str, str], ...]:
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    digests = []
    for name in sorted(set(filter(None, listing.split("\0")))):
        path = REPO / name
        if path.is_file():
            digests.append((name, hashlib.sha256(path.read_bytes()).hexdigest()))
    return tuple(digests)


@functools.cache
def machine() -> str:
    """What the machine adds to every key: Python and the packages installed (the lock's,
    or the newest under ``make test-latest``), the CPU features that change outputs, and
    the environment variables that change how JAX and XLA run."""
    flags: set[str] = set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(("flags", "Features")):
                flags |= set(line.split(":", 1)[1].split()) & CPU_FEATURES
    settings = {k: v for k, v in os.environ.items() if k.startswith(("JAX_", "XLA_"))}
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    return json.dumps(
        [sys.version, platform.machine(), sorted(flags), sorted(settings.items()), packages]
    )


def key(patterns: Iterable[str], files: dict[str, str] | None = None) -> str:
    """The SHA-256 of the machine and of every file matching ``patterns`` (globs relative
    to the repository, ``*`` crossing folders), with :data:`ALWAYS`.

    >>> files = {"docs/en/a.md": "1", "src/jaxpar/x.py": "2"}
    >>> key(["docs/*"], files) == key(["docs/*"], files | {"src/jaxpar/x.py": "3"})
    True
    >>> key(["docs/*"], files) == key(["docs/*"], files | {"docs/en/a.md": "4"})
    False
    """
    return _key(tuple(patterns), tuple((tracked_files() if files is None else files).items()))


@functools.cache
def _key(patterns: tuple[str, ...], files: tuple[tuple[str, str], ...]) -> str:
    wanted = re.compile("|".join(fnmatch.translate(p) for p in (*ALWAYS, *patterns)))
    digest = hashlib.sha256(machine().encode())
    for name, content in files:
        if wanted.match(name):
            digest.update(f"{name}\0{content}\0".encode())
    return digest.hexdigest()


def inputs(module: str, name: str, params: dict[str, object]) -> tuple[str, ...]:
    """The files a test's result depends on: its module, and :data:`NARROWER`'s inputs for
    it, or :data:`EVERYTHING`."""
    for (wanted_module, prefix), narrower in NARROWER.items():
        if module == wanted_module and name.startswith(prefix):
            return (f"tests/{module}", *narrower(params))
    return (f"tests/{module}", *EVERYTHING)


def _snippet_folder(params: dict[str, object]) -> tuple[str, ...]:
    # A snippet may run the others of its folder (crash_and_resume.py runs train.py).
    folder = Path(str(params["snippet"])).resolve().parent.relative_to(REPO).as_posix()
    return (f"{folder}/*", *JAXPAR, *SNIPPET_RUNNER)


def _example_file(params: dict[str, object]) -> tuple[str, ...]:
    example = params["example"]
    path = Path(str(example.path)).resolve().relative_to(REPO).as_posix()  # type: ignore[attr-defined]
    return (path, *JAXPAR)


# Module, test-name prefix -> the inputs of those tests, from their parameters.
NARROWER: dict[tuple[str, str], Callable[[dict[str, object]], tuple[str, ...]]] = {
    ("test_snippets.py", "test_snippet_output_matches_recording"): _snippet_folder,
    ("test_snippets.py", "test_snippets_run_on_fewer_devices"): lambda _: (
        "snippets/*",
        *JAXPAR,
        *SNIPPET_RUNNER,
    ),
    ("test_examples.py", "test_example["): _example_file,
    ("test_launch.py", ""): lambda _: (*JAXPAR, "tools/sitetools/*"),
    ("test_launch_jax.py", ""): lambda _: (*JAXPAR, "tools/sitetools/*"),
    ("test_jaxpar.py", ""): lambda _: JAXPAR,
    ("test_meshes.py", ""): lambda _: JAXPAR,
    ("test_data.py", ""): lambda _: JAXPAR,
    ("test_timing.py", ""): lambda _: JAXPAR,
    ("test_compiled.py", ""): lambda _: JAXPAR,
    ("test_profiles.py", ""): lambda _: JAXPAR,
    ("test_tolerances.py", ""): lambda _: SNIPPET_RUNNER,
    ("test_snippet_runner.py", ""): lambda _: (*JAXPAR, *SNIPPET_RUNNER),
}
