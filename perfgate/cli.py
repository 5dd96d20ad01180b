"""perfgate command line (placeholder until the gate lands)."""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    return 0
