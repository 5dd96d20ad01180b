"""Baselines: their files (written atomically, under a lock), the provenance each records, and
whether one is stale against the code and software here."""
