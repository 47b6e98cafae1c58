"""Build and test machinery of the jaxpar site (not part of the jaxpar library)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
