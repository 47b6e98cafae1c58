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

import ast
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
    """Every file of the working tree that git tracks or would track -> its SHA-256; and
    for each page and snippet, ``<name>#title`` -> the SHA-256 of its title (a page's first
    heading, a snippet's first line), which every page of its language shows in the nav;
    for each snippet, ``<name>#recording`` -> the SHA-256 of what a page that shows its
    output says of its recording (the JAX version and CPU, and whether the script changed
    since), which recording it again leaves as it was; and ``git:HEAD`` -> the commit
    checked out, which dates pages and translations."""
    return dict(_tracked_files())


@functools.cache
def _tracked_files() -> tuple[tuple[str, str], ...]:
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    recorded = _recordings()
    digests = []
    for name in sorted(set(filter(None, listing.split("\0")))):
        path = REPO / name
        if not path.is_file():
            continue
        content = path.read_bytes()
        digests.append((name, hashlib.sha256(content).hexdigest()))
        if name.startswith(("docs/", "snippets/")) and name.endswith((".md", ".py")):
            digests.append((f"{name}#title", hashlib.sha256(_title(content)).hexdigest()))
        if name.startswith("snippets/") and name.endswith(".py"):
            digests.append((f"{name}#recording", _recording(recorded.get(name), content)))
        if name.startswith("src/jaxpar/") and name.endswith(".py"):
            digests.append((f"{name}#code", hashlib.sha256(_code(content)).hexdigest()))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True)
    digests.append(("git:HEAD", head.stdout.decode().strip()))
    return tuple(digests)


def _recordings() -> dict[str, dict[str, str]]:
    try:
        return json.loads((REPO / "snippets" / "recordings.json").read_bytes())
    except (OSError, ValueError):  # none yet, or half-edited: no snippet is recorded
        return {}


def _recording(entry: dict[str, str] | None, script: bytes) -> str:
    """What pages say of a snippet's recording (sitetools.recordings): with what, and
    whether its script changed after it."""
    entry = entry or {}
    changed = entry.get("source") != hashlib.sha256(script).hexdigest()
    said = json.dumps([entry.get("jax"), entry.get("cpu"), changed])
    return hashlib.sha256(said.encode()).hexdigest()


def _code(content: bytes) -> bytes:
    """A module's code without its docstrings, which jaxpar never reads at run time (no
    ``__doc__``): what a program that runs the module depends on."""
    try:
        tree = ast.parse(content)
    except SyntaxError:
        return content
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body[0] = ast.Pass()
    return ast.dump(tree).encode()


def _title(content: bytes) -> bytes:
    """A page's first heading, or a snippet's first line (its docstring's title)."""
    lines = content.splitlines()
    headings = [line for line in lines if line.startswith(b"# ")]
    return (
        headings[0] if headings and not lines[0].startswith(b'"""') else lines[0] if lines else b""
    )


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
    # jaxpar.compile_for's compilers and the PyTorch twins' torch, both outside sys.path.
    beside = [str(Path(sys.prefix) / folder) for folder in ("xla-compilers", "torch")]
    found = [*metadata.distributions(), *metadata.distributions(path=beside)]
    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in found)
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
    for (wanted_module, wanted_name), narrower in NARROWER.items():
        if module == wanted_module and wanted_name in (name, ""):
            return (f"tests/{module}", *narrower(params))
    return (f"tests/{module}", *EVERYTHING)


JAXPAR_SOURCE = REPO / "src" / "jaxpar"
CHECKPOINTS = REPO / "snippets" / "checkpoints"
JAXPAR_NAME = re.compile(r"\bjaxpar\.(\w+)")
# A script in a string (a test writes one to a file and runs it) that imports from jaxpar.
JAXPAR_IMPORT = re.compile(r"from jaxpar import \(?([\w, ]+)")


def jaxpar_inputs(sources: Iterable[str]) -> tuple[str, ...]:
    """The code of jaxpar that Python ``sources`` run: the modules they import, name in
    code (``python -m jaxpar.launch``) or are launched by (a ``# jaxpar.launch:`` line),
    the modules those use in turn, and the package's ``__init__.py``; each module's code
    without its docstrings (``<module>#code``), which running it never reads.

    >>> jaxpar_inputs(["from jaxpar import benchmark"])
    ('src/jaxpar/__init__.py#code', 'src/jaxpar/_checks.py#code', 'src/jaxpar/timing.py#code')
    >>> jaxpar_inputs(["import numpy"])
    ()
    """
    used = set().union(*(_used_with_what_they_use(source) for source in sources))
    if not used:
        return ()
    modules = ("__init__", *sorted(used))
    return tuple(f"src/jaxpar/{module}.py#code" for module in modules)


@functools.cache
def _used_with_what_they_use(source: str) -> frozenset[str]:
    """The jaxpar modules ``source`` uses, and those they use in turn."""
    todo, used = list(_used_by(source)), set()
    while todo:
        module = todo.pop()
        if module not in used:
            used.add(module)
            todo += _used_by((JAXPAR_SOURCE / f"{module}.py").read_text(encoding="utf-8"))
    return frozenset(used)


@functools.cache
def _modules_by_name() -> dict[str, str]:
    """Each jaxpar module, and each public name of the package -> the module that has it."""
    modules = {path.stem: path.stem for path in JAXPAR_SOURCE.glob("*.py")}
    modules.pop("__init__", None)
    tree = ast.parse((JAXPAR_SOURCE / "__init__.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxpar."):
            for alias in node.names:
                modules[alias.asname or alias.name] = node.module.split(".")[1]
    return modules


@functools.cache
def _used_by(source: str) -> frozenset[str]:
    modules = _modules_by_name()
    used = {"launch"} if "# jaxpar.launch:" in source else set()
    try:
        tree = ast.parse(source)
    except SyntaxError:  # not Python: any module may be meant
        return frozenset(modules.values())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    named: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "jaxpar":
            named += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxpar."):
            named.append(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            named += [a.name.split(".")[1] for a in node.names if a.name.startswith("jaxpar.")]
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "jaxpar":
            named.append(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                named += JAXPAR_NAME.findall(node.value)
                for names in JAXPAR_IMPORT.findall(node.value):
                    named += [name.strip() for name in names.split(",")]
    return frozenset(used | {modules[name] for name in named if name in modules})


# What every built page is made with besides its own source: the theme, the build's tools,
# the languages, the 繁體中文 terms and the notebooks' titles.
THEME = (
    "mkdocs.yml",
    "overrides/*",
    "tools/*",
    "docs/languages.yml",
    "docs/zh-hant-terms.yml",
    "docs/diagrams/*",
    "snippets/*#recording",  # each page's line saying what recorded its outputs
    "docs/*/notebooks.yml",  # the notebooks' titles in the nav, and their texts
)
# The sources of each page type the browser tests load (sitetools.weight.PAGE_TYPES), in a
# language that has the page (see _page_sources for one that shows English's).
PAGE_SOURCES = {  # with what each page includes (_included)
    "home": ("docs/{language}/index.md",),
    "tutorial": ("docs/{language}/data-parallel/first-example.md",),
    "notebook": ("snippets/data_parallel/linear_regression.*",),
    "api": ("docs/{language}/api/profiles.md", *JAXPAR),
    "status": ("docs/*", "git:HEAD"),  # every page's state in every language, from git
    "404": (),
}


# What tests/sitebuild.py's copy_project copies: a small site of the glossary pages and one
# snippet, built with the whole theme and tools, to break on purpose.
SMALL_COPY = (
    *THEME,
    "src/*",
    "docs/*/glossary.md",
    "docs/*/glossary.md#title",
    "snippets/data_parallel/linear_regression.*",
)


def _source_language(code: str) -> str:
    from sitetools.i18n import load_languages

    return load_languages()[code].converted_from or code


def _loaded_page(params: dict[str, object]) -> tuple[str, ...]:
    """A page type in one language: the browser loads that page, made with the theme and the
    nav (every page's title); its search index is a stub here (the search test loads the
    real one), so no other page's text."""
    language = _source_language(str(params["code"]))
    sources = _page_sources(str(params["kind"]), language)
    titles = (f"docs/{language}/*#title", "docs/en/*#title", "snippets/*#title")
    return (*THEME, *titles, *sources)


def _english_fallbacks(code: str) -> tuple[str, ...]:
    """The English pages a language shows in English, having none of its own: every English
    file for English itself."""
    from sitetools.i18n import DOCS, SOURCE_LANGUAGE

    if code == SOURCE_LANGUAGE:
        return (f"docs/{SOURCE_LANGUAGE}/*",)
    english, own = DOCS / SOURCE_LANGUAGE, DOCS / code
    return tuple(
        f"docs/{SOURCE_LANGUAGE}/{f.relative_to(english).as_posix()}"
        for f in sorted(english.rglob("*"))
        if f.is_file() and not (own / f.relative_to(english)).exists()
    )


def _language_site(code: str) -> tuple[str, ...]:
    """What a language's built pages are made of, its translation status page aside (that
    one follows English and git too): the theme, its pages, the English ones it falls
    back to, the snippets and jaxpar (the API pages)."""
    language = _source_language(code)
    words = "docs/en/glossary.md"  # its Chinese terms are words of the index (searchwords)
    return (
        *THEME,
        f"docs/{language}/*",
        *_english_fallbacks(language),
        words,
        "snippets/*",
        *JAXPAR,
    )


def _page_sources(kind: str, language: str) -> tuple[str, ...]:
    """A page type's sources in ``language``: English's page where it has none of its own.

    >>> _page_sources("home", "ko")
    ('docs/ko/index.md',)
    """
    fallbacks = _english_fallbacks(language)
    sources = []
    for pattern in PAGE_SOURCES[kind]:
        page = pattern.format(language=language)
        english = pattern.format(language="en")
        shown = english if english in fallbacks else page
        sources += [shown, *_included(shown)]
    return tuple(sources)


def _included(page: str) -> tuple[str, ...]:
    """What a page includes (``--8<--`` lines): a snippet's script and recording whole.

    >>> _included("docs/en/data-parallel/first-example.md")
    ('snippets/data_parallel/linear_regression.*',)
    """
    from sitetools.includes import find_includes

    path = REPO / page
    if not path.is_file():  # a pattern, or a page that is gone
        return ()
    included = []
    for include in find_includes(path.read_text(encoding="utf-8")):
        name = Path(include.path)
        is_snippet = name.suffix in (".py", ".out")
        included.append(f"{name.with_suffix('').as_posix()}.*" if is_snippet else include.path)
    return tuple(dict.fromkeys(included))


def _searched_language(params: dict[str, object]) -> tuple[str, ...]:
    """A language's search: every page of it (and English, for pages not translated)."""
    language = _source_language(str(params["code"]))
    fallbacks = _english_fallbacks(language)
    words = "docs/en/glossary.md"  # its Chinese terms are words of the index (searchwords)
    return (*THEME, f"docs/{language}/*", *fallbacks, words, *JAXPAR, "snippets/*#title")


def _styled(params: dict[str, object]) -> tuple[str, ...]:
    """A language's page types and English's, compared for the stylesheets they load: the
    theme and each page type's sources (the status page's stylesheets are its template's)."""
    languages = {_source_language(str(params["code"])), "en"}
    kinds = [kind for kind in PAGE_SOURCES if kind != "status"]
    sources = {
        source
        for language in languages
        for kind in kinds
        for source in _page_sources(kind, language)
    }
    return (*THEME, "docs/*#title", "snippets/*#title", *sorted(sources))


def _notebook(params: dict[str, object]) -> tuple[str, ...]:
    """A snippet's notebook page in every language: the snippet and its recording."""
    snippet = Path(str(params["snippet"])).resolve().relative_to(REPO).with_suffix("")
    return (*THEME, "docs/*#title", "snippets/*#title", f"{snippet.as_posix()}.*")


def _snippet_run(params: dict[str, object]) -> tuple[str, ...]:
    """A snippet's run: the snippet, its recording, the scripts beside it that it names
    (crash_and_resume.py runs train.py) or imports (layouts.py imports gpt), the runner,
    and the jaxpar code they run."""
    snippet = Path(str(params["snippet"])).resolve()
    scripts = _scripts_run(snippet)
    outputs = [script.with_suffix(".out").relative_to(REPO).as_posix() for script in scripts]
    return (*_run_of(scripts), *outputs)


def _scripts_run(snippet: Path) -> list[Path]:
    """The snippet and the scripts beside it that it names or imports."""
    source = snippet.read_text(encoding="utf-8")
    named = [
        p
        for p in snippet.parent.glob("*.py")
        if p != snippet
        and (p.name in source or re.search(rf"^(from|import) {p.stem}\b", source, re.MULTILINE))
    ]
    return [snippet, *named]


def _run_of(scripts: list[Path]) -> tuple[str, ...]:
    """Running ``scripts``: their files, the runner, and the jaxpar code they use."""
    names = (script.relative_to(REPO).as_posix() for script in scripts)
    sources = [script.read_text(encoding="utf-8") for script in scripts]
    return (*names, *SNIPPET_RUNNER, *jaxpar_inputs(sources))


def _example_file(params: dict[str, object]) -> tuple[str, ...]:
    """An inline example: the page or module it is in, and what it uses of jaxpar."""
    example = params["example"]
    path = Path(str(example.path)).resolve()  # type: ignore[attr-defined]
    sources = [example.source]  # type: ignore[attr-defined]
    if path.is_relative_to(JAXPAR_SOURCE):  # a docstring's example runs in its module's world
        sources.append(f"import jaxpar.{path.stem}")
    return (path.relative_to(REPO).as_posix(), *jaxpar_inputs(sources))


def _fewer_devices(params: dict[str, object]) -> tuple[str, ...]:
    """A snippet's run on fewer devices: as its run (:func:`_snippet_run`), with no output
    compared."""
    return _run_of(_scripts_run(Path(str(params["snippet"])).resolve()))


def _test_module(module: str) -> Callable[[dict[str, object]], tuple[str, ...]]:
    """A test module of jaxpar: what it uses of jaxpar (and the site's tools, if it does)."""

    def inputs(_: dict[str, object]) -> tuple[str, ...]:
        source = (REPO / "tests" / module).read_text(encoding="utf-8")
        tools = ("tools/sitetools/*",) if "sitetools" in source else ()
        return (*jaxpar_inputs([source]), *tools)

    return inputs


# (Module, test function, or "" for every test of the module) -> the inputs of those tests,
# from their parameters.
NARROWER: dict[tuple[str, str], Callable[[dict[str, object]], tuple[str, ...]]] = {
    ("test_snippets.py", "test_snippet_output_matches_recording"): _snippet_run,
    ("test_snippets.py", "test_snippets_run_on_fewer_devices"): _fewer_devices,
    ("test_snippets.py", "test_pytorch_twins_match_recordings"): lambda _: (
        "snippets/pytorch/*",
        *SNIPPET_RUNNER,
    ),
    ("test_examples.py", "test_example"): _example_file,
    ("test_examples.py", "test_example_in_its_own_process"): _example_file,
    ("test_browser.py", "test_page_loads_cleanly_and_accessibly"): _loaded_page,
    ("test_browser.py", "test_search_finds_pages_of_its_own_language_only"): _searched_language,
    ("test_site.py", "test_notebook_page_and_download_in_every_language"): _notebook,
    ("test_site.py", "test_every_language_is_styled_as_english_is"): _styled,
    # nbconvert's export of the small snippet's notebook, compared with sitetools.nbhtml's
    ("test_site.py", "test_notebooks_export_as_nbconvert_would_without_its_soup"): lambda _: (
        "tools/sitetools/*",
        "snippets/data_parallel/linear_regression.*",
    ),
    (
        "test_hant.py",
        "test_no_wrong_form_nor_simplified_only_character_reaches_the_edition",
    ): lambda _: _language_site("zh-hant"),
    ("test_hant.py", "test_the_edition_shows_the_glossary_in_both_scripts"): lambda _: (
        _language_site("zh-hant")
    ),
    ("test_hant.py", "test_the_edition_has_its_own_segmented_search_index"): lambda _: (
        _language_site("zh-hant")
    ),
    # the calculator's page in every language, and the plan it computes
    ("test_browser_will_it_fit.py", ""): lambda _: (
        "tests/test_browser.py",  # its fixtures
        *THEME,
        "docs/*#title",
        "snippets/*#title",
        "docs/*/training-step/will-it-fit.md",
        *JAXPAR,
    ),
    ("test_memory_plan.py", ""): lambda _: (
        *JAXPAR,
        "tools/sitetools/*",
        "snippets/training_step/memory_grid.json",
    ),
    ("test_status.py", ""): lambda _: (*EVERYTHING, "git:HEAD"),
    (
        "test_site.py",
        "test_a_new_english_page_falls_back_with_a_notice_and_its_new_diagram_in_the_browser",
    ): lambda _: SMALL_COPY,
    (
        "test_site.py",
        "test_missing_includes_and_broken_anchors_fail_the_build_naming_page_and_path",
    ): lambda _: SMALL_COPY,
    (
        "test_site.py",
        "test_a_script_edited_after_its_recording_puts_a_warning_under_the_page_s_title",
    ): lambda _: SMALL_COPY,
    ("test_site.py", "test_a_failed_english_build_stops_the_other_languages_builds"): lambda _: (
        SMALL_COPY
    ),
    (
        "test_tooling.py",
        "test_make_serve_rebuilds_an_edited_page_and_after_a_restart_only_what_changed",
    ): lambda _: SMALL_COPY,
    ("test_launch.py", ""): _test_module("test_launch.py"),
    ("test_launch_jax.py", ""): _test_module("test_launch_jax.py"),
    # it uses the helpers of the two modules above
    ("test_launch_faults.py", ""): lambda params: (
        *_test_module("test_launch_faults.py")(params),
        "tests/test_launch.py",
        "tests/test_launch_jax.py",
    ),
    ("test_jaxpar.py", ""): _test_module("test_jaxpar.py"),
    ("test_meshes.py", ""): _test_module("test_meshes.py"),
    ("test_data.py", ""): _test_module("test_data.py"),
    ("test_timing.py", ""): _test_module("test_timing.py"),
    ("test_compiled.py", ""): lambda params: (
        *_test_module("test_compiled.py")(params),
        "tests/hlo/*",
    ),
    ("test_targets.py", ""): _test_module("test_targets.py"),
    ("test_chapter_other_hardware.py", ""): lambda _: (
        "snippets/seeing_what_runs/other_hardware.out",
        "docs/*",
        "tools/sitetools/*",
    ),
    ("test_profiles.py", ""): _test_module("test_profiles.py"),
    ("test_tolerances.py", ""): lambda _: SNIPPET_RUNNER,
    # This module's own tests: the tools, and the real snippets, pages and jaxpar they key.
    ("test_reuse.py", ""): lambda _: (
        "tools/sitetools/*",
        "snippets/basics/jax_in_one_page.py",
        "snippets/training_step/*.py",  # gpt.py, layouts.py and what they name
        "docs/en/index.md",  # ko's translation of it, or not
        "docs/ko/index.md",
        *JAXPAR,
    ),
    ("test_chapter_checkpoints.py", ""): lambda _: (
        "docs/*/checkpoints/*",
        "snippets/checkpoints/*",
        "tools/sitetools/*",
        *jaxpar_inputs(p.read_text(encoding="utf-8") for p in CHECKPOINTS.glob("*.py")),
    ),
    ("test_snippet_runner.py", ""): lambda _: (*JAXPAR, *SNIPPET_RUNNER),
    ("test_chapter_cluster_stuck.py", ""): lambda params: (
        *_test_module("test_chapter_cluster_stuck.py")(params),
        "snippets/cluster/stuck_*",
        "docs/en/cluster/stuck-ranks.md",
    ),
}
