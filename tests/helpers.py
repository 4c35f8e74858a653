"""Helpers shared by test files in several folders; the fixtures are in tests/conftest.py."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent  # the checkout: mirrorfit/, tests/, ...
