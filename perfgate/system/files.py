"""Files written whole or not at all: a temporary file in the target's folder, then ``os.replace``,
so a reader (or a run killed half-way) never sees half a file."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_json_atomically(path: Path, doc: Any) -> None:
    """``doc`` as JSON at ``path``; the folder must exist (OSError otherwise)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
