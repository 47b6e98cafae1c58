"""Build and test machinery of the jaxpar site (not part of the jaxpar library)."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def mkdocs_settings() -> dict:
    """mkdocs.yml as plain data (its ``!ENV`` and ``!!python`` tags read as None)."""
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_IgnoreTags)


class _IgnoreTags(yaml.SafeLoader):
    pass


_IgnoreTags.add_multi_constructor("", lambda loader, suffix, node: None)
