"""The type checker over perfgate/ (mypy, pinned in requirements/ci.txt, configured in
pyproject.toml's [tool.mypy]): part of the README's test command, so part of .ci/run."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from layout import REPO



@pytest.mark.slow   # 67 s without mypy's cache (a clean clone)
def test_mypy_finds_no_type_error_in_perfgate() -> None:
    if importlib.util.find_spec("mypy") is None:
        if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
            pytest.fail("mypy is required in CI (PERFGATE_REQUIRE_REAL=1) but missing", pytrace=False)
        pytest.skip("mypy not installed (pip install -r requirements/ci.txt)")
    # The timeout is a guard against a hang, not a time budget: mypy needs about 40 s of CPU here,
    # and took over 600 s of wall time on this 2-core machine with other work beside it (issue 30).
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
