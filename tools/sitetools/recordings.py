"""What each snippet's recorded output was made from and with: the script as it was, the JAX
version and the kind of CPU (its bfloat16 and matmul kernels set the last digits).

``python -m sitetools.snippets record`` notes each recording in ``snippets/recordings.json``;
each page that shows outputs says in one line what they were recorded with, and a page whose
script changed after its output was recorded says so above everything (under ``make serve``;
the tests refuse such a recording, so the published site never shows it).
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path

from sitetools import REPO

RECORDINGS_FILE = REPO / "snippets" / "recordings.json"
# CPU features that set XLA:CPU's kernels, the most telling first, as readers name them.
FEATURE_NAMES = [
    ("amx_bf16", "AMX"),
    ("avx512_bf16", "AVX-512 (bfloat16)"),
    ("avx512f", "AVX-512"),
    ("avx2", "AVX2"),
    ("sve", "SVE"),
    ("asimd", "NEON"),
]


def source_hash(snippet: Path) -> str:
    """The SHA-256 of a snippet's text, as recorded and as it is now."""
    return hashlib.sha256(snippet.read_bytes()).hexdigest()


@functools.cache
def cpu_kind() -> str:
    """This machine's CPU as a reader would name it: model, architecture and vector units.

    >>> "x86-64" in cpu_kind() or "arm64" in cpu_kind() or cpu_kind()
    True
    """
    model, flags = "", set()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name" and not model:
                model = value.strip()
            elif name.strip() in ("flags", "Features"):
                flags |= set(value.split())
    arch = {"x86_64": "x86-64", "aarch64": "arm64", "arm64": "arm64"}.get(
        platform.machine(), platform.machine()
    )
    units = next((label for flag, label in FEATURE_NAMES if flag in flags), "")
    return ", ".join(part for part in (model or platform.processor(), arch) if part) + (
        f" with {units}" if units else ""
    )


def load() -> dict[str, dict[str, str]]:
    """Snippet (``snippets/…py``) -> ``source``, ``jax`` and ``cpu`` of its recording."""
    if not RECORDINGS_FILE.exists():
        return {}
    return json.loads(RECORDINGS_FILE.read_text(encoding="utf-8"))


def note(snippets: dict[Path, bool]) -> None:
    """Note each snippet's recording: its source always; the JAX version and CPU where its
    output was written anew (``True``), not where a recording within its declared tolerance
    was kept. The entries of deleted snippets go."""
    recordings = load()
    for snippet, written in snippets.items():
        name = snippet.relative_to(REPO).as_posix()
        entry = recordings.get(name, {})
        entry["source"] = source_hash(snippet)
        if written or "jax" not in entry:
            entry |= {"jax": metadata.version("jax"), "cpu": cpu_kind()}
        recordings[name] = entry
    kept = {name: entry for name, entry in recordings.items() if (REPO / name).exists()}
    text = json.dumps(dict(sorted(kept.items())), indent=1, ensure_ascii=False)
    RECORDINGS_FILE.write_text(text + "\n", encoding="utf-8")


def stale(snippet: Path, recordings: dict[str, dict[str, str]] | None = None) -> bool:
    """Whether the snippet changed after its output was recorded (or was never recorded)."""
    entry = (load() if recordings is None else recordings).get(snippet.relative_to(REPO).as_posix())
    return entry is None or entry["source"] != source_hash(snippet)


def shown_outputs(markdown: str) -> list[Path]:
    """The snippets whose recorded output a page includes, each once, in order."""
    from sitetools.includes import find_includes

    outputs = [REPO / i.path for i in find_includes(markdown) if i.path.endswith(".out")]
    return list(
        dict.fromkeys(o.with_suffix(".py") for o in outputs if o.with_suffix(".py").exists())
    )


def snippet_of_notebook(src_uri: str) -> Path:
    """The snippet a generated notebook page shows (``notebooks/<chapter>/<name>.ipynb``).

    >>> snippet_of_notebook("notebooks/data_parallel/linear_regression.ipynb").name
    'linear_regression.py'
    """
    return REPO / "snippets" / Path(src_uri).relative_to("notebooks").with_suffix(".py")


def with_stale_notice(markdown: str, snippets: list[Path], template: str) -> str:
    """The page with a warning under its title: the outputs it shows of ``snippets`` are
    older than their scripts (``template`` names them: ``{scripts}``)."""
    names = " ".join(s.relative_to(REPO).as_posix() for s in snippets)
    from sitetools.i18n import under_title

    return under_title(markdown, f'!!! warning ""\n    {template.format(scripts=names)}\n\n')


def recorded_with(snippets: list[Path], template: str) -> str | None:
    """The page's line: ``template`` filled with the JAX versions and CPUs of the recordings
    of ``snippets`` (each once, in order), or None if none is recorded.

    >>> recorded_with([], "JAX {jax} on {cpu}") is None
    True
    """
    recordings = load()
    entries = [recordings.get(s.relative_to(REPO).as_posix()) for s in snippets]
    entries = [e for e in entries if e]
    if not entries:
        return None
    jax = ", ".join(dict.fromkeys(e["jax"] for e in entries))
    cpus = "; ".join(dict.fromkeys(e["cpu"] for e in entries))
    return template.format(jax=jax, cpu=cpus)
