"""Dirty rebuilds under `make serve`: stale pages are found, search indexes merged per language."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest
from mkdocs.structure.files import File, Files
from sitetools import REPO, serving


@pytest.fixture
def dirty_serve(monkeypatch):
    monkeypatch.setattr(serving, "state", serving.ServeState(serving=True, dirty=True))
    return serving.state


def test_search_index_keeps_the_pages_not_rebuilt(tmp_path, dirty_serve):
    config = SimpleNamespace(site_dir=str(tmp_path))
    index = tmp_path / "search" / "search_index.json"
    index.parent.mkdir()

    def rebuild(code, pages):
        docs = [{"location": f"{page}#s", "title": f"{code} {page}"} for page in pages]
        index.write_text(json.dumps({"config": {}, "docs": docs}))
        for page in pages:
            rendered = SimpleNamespace(url=page, title=page, file=SimpleNamespace(src_uri=page))
            serving.remember_rebuilt_page(code, rendered)
        serving.merge_search_index(config, code)
        return {doc["title"] for doc in json.loads(index.read_text())["docs"]}

    assert rebuild("zh", ["a/", "b/"]) == {"zh a/", "zh b/"}
    assert rebuild("ko", ["a/", "b/"]) == {"ko a/", "ko b/"}  # languages never mix
    assert rebuild("zh", ["b/"]) == {"zh a/", "zh b/"}  # a/ kept, b/ replaced, not doubled


def test_a_page_is_rebuilt_when_an_included_snippet_changed(tmp_path, dirty_serve):
    docs, site = tmp_path / "docs", tmp_path / "site"
    docs.mkdir()
    (docs / "page.md").write_text(
        '```python\n--8<-- "snippets/data_parallel/linear_regression.out:setup"\n```\n'
    )
    (docs / "plain.md").write_text("# No includes\n")
    files = Files([File(name, str(docs), str(site), True) for name in ("page.md", "plain.md")])
    serving.mark_stale_pages(files, "en")  # the first rebuild: everything
    for file in files:
        dest = file.abs_dest_path
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        open(dest, "w").close()
        file.is_modified = lambda: False
    snippet_time = (REPO / "snippets/data_parallel/linear_regression.out").stat().st_mtime
    for file in files:  # built before the snippet last changed
        os.utime(file.abs_dest_path, (snippet_time - 10, snippet_time - 10))
    serving.mark_stale_pages(files, "en")
    assert files.get_file_from_path("page.md").is_modified()
    now = time.time()
    for file in files:  # built after it
        os.utime(file.abs_dest_path, (now, now))
        file.is_modified = lambda: False
    serving.mark_stale_pages(files, "en")
    assert not any(file.is_modified() for file in files)
