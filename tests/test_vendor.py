"""Mermaid ships in the repository, unchanged since `make vendor` wrote it."""

import io
import json

import pytest
from sitetools import vendor
from sitetools.vendor import MANIFEST, PACKAGES, VENDOR_DIR, sha256_of


def test_vendored_files_are_what_make_vendor_wrote():
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    assert manifest["packages"] == {p.name: p.version for p in PACKAGES}, (
        "tools/sitetools/vendor.py names other versions than overrides/assets/vendor/: "
        "run `make vendor` and commit what it writes"
    )
    on_disk = {
        path.relative_to(VENDOR_DIR).as_posix(): sha256_of(path)
        for path in VENDOR_DIR.rglob("*")
        if path.is_file() and path != MANIFEST
    }
    assert on_disk == manifest["files"], (
        "vendored files differ from manifest.json: run `make vendor`"
    )


def test_a_download_that_does_not_match_its_integrity_is_refused(monkeypatch):
    monkeypatch.setattr(vendor.urllib.request, "urlopen", lambda url, timeout: io.BytesIO(b"x"))
    with pytest.raises(SystemExit, match=r"has integrity sha512-.*but vendor.py records"):
        vendor.fetch(PACKAGES[0])
