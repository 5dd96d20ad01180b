"""git for the tests that build a user's repository (ab, bisect, the confirmation, provenance):
one command runner with an author set, whatever the machine's git configuration."""
from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """``git -C repo args``'s output (stripped); CalledProcessError when git fails."""
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=perfgate", "-c", "user.email=perfgate@example.com",
                           *args], check=True, capture_output=True, text=True).stdout.strip()
