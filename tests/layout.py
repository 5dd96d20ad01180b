"""Where things are, for tests in any folder of tests/: the repository, tests/ and its fixtures."""
from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
