"""The languages of the site: their settings, English fallbacks, and one build each.

English is built from ``docs/en/`` by ``mkdocs.yml``; every other language of
``docs/languages.yml`` is its own MkDocs build of ``docs/<code>/`` into ``site/<code>/``,
from the same configuration. Separate builds give each language its own search index
(segmented with jieba for Chinese), Material's labels in that language, and every plugin
(mkdocs-jupyter and mkdocstrings included) working in every language. A language
``converted_from`` another has no folder: its build reads the other's pages and converts
them (繁體中文 from 简体中文: :mod:`sitetools.hant`).
"""

from __future__ import annotations

import functools
import multiprocessing
import re
import shutil
import signal
import sys
import urllib.parse
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import yaml
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import Abort, ConfigurationError
from mkdocs.structure.files import File, Files, InclusionLevel

from sitetools import REPO, hant, serving
from sitetools.serving import SERVE_CACHE, ServeState, stamp

DOCS = REPO / "docs"
LANGUAGES_FILE = DOCS / "languages.yml"
SOURCE_LANGUAGE = "en"
# Inputs shared by every language: a change here rebuilds all of them under `mkdocs serve`.
SHARED_INPUTS = [
    "mkdocs.yml",
    "docs/languages.yml",
    "docs/diagrams",
    "snippets",
    "src",
    "tools",
    "overrides",
]


@dataclass(frozen=True)
class Language:
    """One language of the site, as docs/languages.yml describes it."""

    code: str
    name: str
    site_name: str = ""
    notice: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    nav: dict[str, str] = field(default_factory=dict)
    pending: tuple[str, ...] = ()
    converted_from: str = ""  # the language whose pages this one converts, if any
    lang: str = ""  # its BCP 47 tag, where that is not its code: zh-TW

    @property
    def docs_dir(self) -> Path:
        return DOCS / (self.converted_from or self.code)

    def source(self, page: str) -> str:
        """Where a page of this language is written, from the repository's root: a
        converted language's pages are its source's.

        >>> load_languages()["zh-hant"].source("index.md")
        'docs/zh/index.md'
        """
        return f"docs/{self.docs_dir.name}/{page}"

    @property
    def tag(self) -> str:
        """The language's tag: in ``lang`` and ``hreflang`` attributes, and Material's
        language for its own interface texts."""
        return self.lang or self.code

    @property
    def prefix(self) -> str:
        """Where the language lives, relative to the site root: '' or 'zh/'."""
        return "" if self.code == SOURCE_LANGUAGE else f"{self.code}/"


def load_languages() -> dict[str, Language]:
    """Read docs/languages.yml; English comes first, and each language needs its folder."""
    return _load_languages(LANGUAGES_FILE.stat().st_mtime_ns)


@functools.cache
def _load_languages(mtime_ns: int) -> dict[str, Language]:
    raw = yaml.safe_load(LANGUAGES_FILE.read_text(encoding="utf-8"))
    languages = {}
    for code, settings in raw.items():
        settings = dict(settings)
        if source := settings.get("converted_from"):
            settings = _converted(code, settings, languages.get(source))
        settings["pending"] = tuple(settings.get("pending") or ())
        languages[code] = Language(code=code, **settings)
    if next(iter(languages), None) != SOURCE_LANGUAGE:
        raise ConfigurationError(
            f"{LANGUAGES_FILE}: the first language must be '{SOURCE_LANGUAGE}'."
        )
    for language in languages.values():
        if not language.docs_dir.is_dir():
            raise ConfigurationError(
                f"{LANGUAGES_FILE} lists '{language.code}', but {language.docs_dir} does not exist; "
                f"create it or remove the language."
            )
    return languages


def _converted(code: str, settings: dict, source: Language | None) -> dict:
    """The settings of a language converted from ``source``: its texts, converted."""
    if source is None or source.converted_from or source.code != "zh":
        raise ConfigurationError(
            f"{LANGUAGES_FILE}: '{code}' is converted_from {settings['converted_from']!r}, but "
            f"only a language with its own pages listed before it can be converted, and only "
            f"'zh' has a converter (sitetools.hant)."
        )
    return {
        "site_name": hant.convert(source.site_name),
        "notice": hant.convert(source.notice),
        "labels": {key: hant.convert(text) for key, text in source.labels.items()},
        "nav": {key: hant.convert(text) for key, text in source.nav.items()},
        "pending": source.pending,
        **settings,
    }


def language_of(config: MkDocsConfig) -> Language:
    """The language a build is for: the one ``_build`` names in ``extra``, or else the one
    its docs_dir (docs/<code>) holds."""
    languages = load_languages()
    code = config.extra.get("language") or Path(config.docs_dir).name
    if Path(config.docs_dir).resolve().parent != DOCS or code not in languages:
        raise ConfigurationError(
            f"docs_dir {config.docs_dir} is not one of the language folders "
            f"{', '.join(f'docs/{c}' for c in languages)}."
        )
    return languages[code]


def configure(config: MkDocsConfig, language: Language) -> None:
    """Adapt the shared configuration to one language (before any plugin reads it)."""
    config.theme["language"] = language.tag
    config.site_name = language.site_name or config.site_name
    if config.edit_uri:  # a converted language's pages are edited in its source's folder
        config.edit_uri = config.edit_uri.replace(f"docs/{SOURCE_LANGUAGE}/", language.source(""))
    config.nav = translate_nav(config.nav, language)
    english = load_languages()[SOURCE_LANGUAGE]
    config.extra["labels"] = {**english.labels, **language.labels}
    config.extra["hreflang"] = hreflang_roots((config.site_url or "").removesuffix(language.prefix))
    config.extra["not_found"] = not_found_texts(config.site_url or "/", language)


def not_found_texts(site_url: str, language: Language) -> list[dict[str, str]]:
    """What the 404 page says in each language, ``language`` first, with the address of
    each language's home from the site's root: GitHub Pages answers every unknown address
    of the site with the root's 404 page, at any depth, so its links cannot be relative.

    >>> zh = load_languages()["zh"]
    >>> [(t["lang"], t["home"]) for t in not_found_texts("https://example.org/docs/zh/", zh)]
    [('zh', '/docs/zh/'), ('en', '/docs/'), ('ko', '/docs/ko/'), ('zh-TW', '/docs/zh-hant/')]
    """
    root = urllib.parse.urlsplit(site_url).path.removesuffix(language.prefix) or "/"
    languages = load_languages().values()
    return [
        {
            "lang": other.tag,
            "text": other.labels["not_found"],
            "home": f"{root}{other.prefix}",
            "home_label": other.labels["go_home"],
        }
        for other in sorted(languages, key=lambda other: other.code != language.code)
    ]


def hreflang_roots(site_url: str) -> list[dict[str, str]]:
    """Each language's absolute root, and English's again as ``x-default``: the sitemaps
    (``overrides/sitemap.xml``) give every page's counterparts in every language from them.

    >>> [r["lang"] for r in hreflang_roots("https://example.org/")]
    ['en', 'zh', 'ko', 'zh-TW', 'x-default']
    >>> hreflang_roots("https://example.org/")[3]["root"]
    'https://example.org/zh-hant/'
    """
    roots = [
        {"lang": language.tag, "root": f"{site_url}{language.prefix}"}
        for language in load_languages().values()
    ]
    return [*roots, {"lang": "x-default", "root": roots[0]["root"]}]


THEME_ALTERNATES = re.compile(
    r'^[ \t]*<link rel="alternate" href="[^"]*" hreflang="[^"]*">\n?', re.MULTILINE
)


def without_theme_alternates(html: str) -> str:
    """The page without the theme's ``<link rel="alternate" hreflang>`` tags.

    They point every page at each language's home page, which tells search engines the
    wrong counterparts; the sitemaps give the right ones. Per-page links stay out of the
    page because Material's script fetches ``sitemap.xml`` beside every such link: three
    missing files on every page load.

    >>> without_theme_alternates('<link rel="alternate" href="../zh/" hreflang="zh">\\n<p>')
    '<p>'
    """
    head_end = html.find("</head>")  # they are in the head: the body can be large
    if head_end < 0:
        return THEME_ALTERNATES.sub("", html)
    return THEME_ALTERNATES.sub("", html[:head_end]) + html[head_end:]


def translate_nav(nav: list | None, language: Language) -> list | None:
    """Replace section titles with the language's translations; page titles stay as they are."""
    if nav is None:
        return None
    translated = []
    for item in nav:
        if isinstance(item, dict):
            ((title, children),) = item.items()
            if isinstance(children, list):
                item = {language.nav.get(title, title): translate_nav(children, language)}
        translated.append(item)
    return translated


def nav_titles(nav: list | None) -> set[str]:
    """Every section title of a nav."""
    titles: set[str] = set()
    for item in nav or []:
        if isinstance(item, dict):
            ((title, children),) = item.items()
            if isinstance(children, list):
                titles.add(title)
                titles |= nav_titles(children)
    return titles


def add_fallbacks(files: Files, config: MkDocsConfig, language: Language) -> Files:
    """Add each English page (and asset) the language lacks, marked as a fallback."""
    if language.code == SOURCE_LANGUAGE:
        return files
    english = DOCS / SOURCE_LANGUAGE
    for path in sorted(english.rglob("*")):
        src_uri = path.relative_to(english).as_posix()
        if path.is_dir() or files.get_file_from_path(src_uri) is not None:
            continue
        file = File(src_uri, str(english), config.site_dir, config.use_directory_urls)
        file.edit_uri = f"../{SOURCE_LANGUAGE}/{src_uri}"
        file.fallback = True  # type: ignore[attr-defined]
        if file.name.startswith(".") or file.inclusion is InclusionLevel.EXCLUDED:
            continue
        files.append(file)
    return files


def add_notice(markdown: str, language: Language) -> str:
    """Put the language's 'not translated yet' notice under the page's title."""
    return under_title(markdown, f'!!! warning "{language.name}"\n\n    {language.notice}\n\n')


def under_title(markdown: str, block: str) -> str:
    """The page with ``block`` right under its ``# `` title, which stays the page's first
    element (MkDocs takes the title only from there); on top if it has none."""
    lines = markdown.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith("# "):
            return "".join(lines[: index + 1]) + "\n" + block + "".join(lines[index + 1 :])
    return block + markdown


def alternates(page_url: str, current: Language) -> list[dict[str, str]]:
    """Language-switcher entries pointing at the same page in every language.

    ``href`` leads from the current page to the same page in that language (the switcher
    uses it); ``link`` is that language's root, relative to the current build's root, which
    is what Material's theme expects there (its script reads the language's sitemap from it).
    """
    depth = page_url.count("/") if page_url.endswith("/") or "/" in page_url else 0
    up = "../" if current.prefix else ""
    return [
        {
            "name": language.name,
            "lang": language.tag,
            "link": f"{up}{language.prefix}",
            "href": f"{'../' * depth}{up}{language.prefix}{page_url}" or "./",
        }
        for language in load_languages().values()
    ]


def _inputs(language: Language) -> list[Path]:
    """What a language build reads besides the configuration: its pages and its fallbacks."""
    english = DOCS / SOURCE_LANGUAGE
    missing = [
        f for f in english.rglob("*") if not (language.docs_dir / f.relative_to(english)).exists()
    ]
    converting = [hant.TERMS_FILE] if language.converted_from else []
    words = [DOCS / SOURCE_LANGUAGE / "glossary.md"]  # words of the search index (searchwords)
    return [REPO / p for p in SHARED_INPUTS] + [language.docs_dir, *converting, *missing, *words]


_served_stamps: dict[str, tuple] = {}


@dataclass
class _BuildsBeside:
    """The process that builds other languages beside English's build, and what it says."""

    process: multiprocessing.process.BaseProcess
    failed: Connection  # it sends the languages whose build failed
    stamps: dict[str, tuple | None]  # code -> the stamp of its inputs, taken before building


_beside_english: _BuildsBeside | None = None


def start_other_languages(config: MkDocsConfig, state: ServeState) -> None:
    """Start building, beside the rest of English's build, every other language that needs a
    whole build: under ``mkdocs build`` all of them, into ``<site_dir>/<code>/``; under
    ``mkdocs serve`` those with no cache yet (the first ``make serve``), into the cache,
    with the stamp of their inputs taken now (an edit during the build shows as a change).
    Called once English's pages are read: the builds, forked from this process, inherit all
    it has loaded and computed. :func:`build_other_languages` waits for them."""
    global _beside_english
    others = list(load_languages().values())[1:]
    if state.serving:
        languages = [(lang, SERVE_CACHE / lang.code) for lang in others]
        languages = [(lang, cached) for lang, cached in languages if not cached.is_dir()]
    else:
        languages = [(lang, Path(config.site_dir) / lang.code) for lang in others]
    if not languages:
        return
    stamps = {lang.code: stamp(_inputs(lang)) if state.serving else None for lang, _ in languages}
    receiver, sender = multiprocessing.Pipe(duplex=False)
    process = multiprocessing.get_context("fork").Process(
        target=_build_beside_english, args=(config, languages, stamps, sender), name="languages"
    )
    process.start()
    sender.close()
    _beside_english = _BuildsBeside(process, receiver, stamps)


def stop_other_languages() -> None:
    """Stop the builds :func:`start_other_languages` started (English's build failed)."""
    global _beside_english
    if _beside_english is not None:
        _beside_english.process.terminate()  # it stops its builds (_build_beside_english)
        _beside_english.process.join()
        _beside_english = None


def _build_beside_english(
    config: MkDocsConfig, languages: list, stamps: dict[str, tuple | None], sender: Connection
) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # _build_side_by_side stops its builds
    sender.send(_build_side_by_side(config, languages, stamps))


def _built_beside_english() -> dict[str, tuple | None]:
    """Wait for the builds :func:`start_other_languages` started (if it did): each language
    built -> the stamp of its inputs (None under ``mkdocs build``)."""
    global _beside_english
    if _beside_english is None:
        return {}
    builds, _beside_english = _beside_english, None
    failed = builds.failed.recv() if builds.failed.poll(None) else list(builds.stamps)
    builds.process.join()
    _fail_if(failed)
    return builds.stamps


def build_other_languages(config: MkDocsConfig, state: ServeState) -> None:
    """Build every language but English into ``<site_dir>/<code>/``.

    What :func:`start_other_languages` started beside English's build is waited for: under
    ``mkdocs build``, every language. Under ``mkdocs serve`` each language is built into a
    cache that outlives the temporary site directory, only when its inputs changed (dirty,
    under ``--dirty``), and copied into place.
    """
    built = _built_beside_english()
    others = list(load_languages().values())[1:]
    if not state.serving:
        if not built:
            raise RuntimeError("start_other_languages was not called before the build ended")
        return
    stale = []
    for language in others:
        cached = SERVE_CACHE / language.code
        if language.code in built:  # its first build, beside English's
            serving.restore_language(language.code)
            _served_stamps[language.code] = built[language.code]
            continue
        if language.code not in _served_stamps and cached.is_dir():  # a restart
            _served_stamps[language.code] = serving.restore_language(language.code)
        current = stamp(_inputs(language))
        if _served_stamps.get(language.code) != current or not cached.is_dir():
            stale.append((language, cached, current))
    for language, cached, current in stale:
        # A page added or removed (while serving or before a restart): a dirty build would
        # keep the old one's HTML and search entries, so the language is rebuilt.
        previous = {path for path, _ in _served_stamps.get(language.code) or ()}
        same_files = previous == {path for path, _ in current}
        dirty = state.dirty and cached.is_dir() and same_files
        _build(config, language, cached, dirty=dirty)
        serving.save_language(language.code, current)
        _served_stamps[language.code] = current
    for language in others:
        cached = SERVE_CACHE / language.code
        shutil.copytree(cached, Path(config.site_dir) / language.code, dirs_exist_ok=True)


def _fail_if(failed: list[str]) -> None:
    if failed:
        raise Abort(f"the build of {', '.join(failed)} failed: its messages are above")


def _build_side_by_side(
    config: MkDocsConfig,
    languages: list[tuple[Language, Path]],
    stamps: dict[str, tuple | None],
) -> list[str]:
    """Build each language into its folder, all at once, each in a process of its own, and
    say which builds failed. Each is forked from this one, which has imported and set up
    everything already (templates, jieba's dictionary); given the ``stamps`` of their
    inputs, each saves what its build knew (serving.save_language), for ``mkdocs serve`` to
    rebuild it dirty later. (All at once: one at a time per CPU, the last would build alone
    at the end.)"""
    fork = multiprocessing.get_context("fork")
    running: list[multiprocessing.process.BaseProcess] = []
    try:
        for language, site_dir in languages:
            inputs = stamps.get(language.code)
            process = fork.Process(
                target=_build_and_save, args=(config, language, site_dir, inputs)
            )
            process.name = language.code
            process.start()
            running.append(process)
        for process in running:
            process.join()
        return [process.name for process in running if process.exitcode != 0]
    finally:  # stopped: stop the builds too
        for process in running:
            if process.exitcode is None:
                process.terminate()
                process.join()


def _build_and_save(
    config: MkDocsConfig, language: Language, site_dir: Path, inputs: tuple | None
) -> None:
    _build(config, language, site_dir, dirty=False)
    if inputs is not None:
        serving.save_language(language.code, inputs)


def _build(config: MkDocsConfig, language: Language, site_dir: Path, dirty: bool) -> None:
    # No on_startup here: MkDocs shares plugin instances between the builds of a process,
    # and they have already started, for `build` or for `serve`.
    child = load_config(
        config_file=config.config_file_path,
        docs_dir=str(language.docs_dir),
        site_dir=str(site_dir),
        site_url=f"{config.site_url or '/'}{language.prefix}",
        strict=config.strict,
        extra={"language": language.code},
    )
    build(child, dirty=dirty)
