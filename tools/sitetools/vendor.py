"""Mermaid, committed under overrides/assets/vendor/ so that nothing comes from a CDN.

``make diagrams`` draws the site's diagrams with it (tools/sitetools/diagrams.py), and a
page whose diagram has no drawing yet loads it from the site. To update, change the
version and its ``integrity`` here (``npm view mermaid@11.17.2 dist.integrity``),
run ``make vendor``, which downloads the packages from the npm registry, checks them and
writes the files and ``manifest.json``, and commit what it wrote.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sitetools import REPO

VENDOR_DIR = REPO / "overrides" / "assets" / "vendor"
MANIFEST = VENDOR_DIR / "manifest.json"


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    integrity: str  # npm's sha512 of the tarball
    files: tuple[str, ...]  # globs inside the tarball's package/ folder

    @property
    def tarball(self) -> str:
        return f"https://registry.npmjs.org/{self.name}/-/{self.name}-{self.version}.tgz"


# Mermaid 11: Material 9's integration is written for its API.
PACKAGES = (
    Package(
        "mermaid",
        "11.17.2",
        "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxULMa80/qt5gHO73aCleBBg==",
        ("LICENSE", "dist/mermaid.min.js"),
    ),
)


def integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(package: Package) -> dict[str, str]:
    """Download, check and unpack one package's files; their sha256 by path."""
    with urllib.request.urlopen(package.tarball, timeout=120) as response:
        data = response.read()
    if integrity_of(data) != package.integrity:
        raise SystemExit(
            f"{package.tarball} has integrity {integrity_of(data)}, but vendor.py records "
            f"{package.integrity!r}: if you changed the version, record the new integrity"
        )
    target = VENDOR_DIR / package.name
    written = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        for member in archive.getmembers():
            inner = Path(member.name).relative_to("package")
            if member.isfile() and any(fnmatch.fnmatch(inner.as_posix(), g) for g in package.files):
                path = target / (inner.relative_to("dist") if inner.parts[0] == "dist" else inner)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.extractfile(member).read())
                written[path.relative_to(VENDOR_DIR).as_posix()] = sha256_of(path)
    return written


def main() -> None:
    manifest = {"packages": {}, "files": {}}
    for package in PACKAGES:
        manifest["packages"][package.name] = package.version
        manifest["files"] |= fetch(package)
    MANIFEST.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(
        f"wrote {len(manifest['files'])} files under {VENDOR_DIR.relative_to(REPO)}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
