"""The committed nsys exports are stored compressed (``trace.sqlite.xz``): the working tree that
travels to the GPU machine has a size limit, and SQLite exports shrink about 6x. :func:`unpack`
writes each ``<name>.sqlite`` beside its ``.xz`` (ignored by git) when it is missing or older, so
that tests, benchmarks and scripts read the plain paths. Standard library only."""
from __future__ import annotations

import lzma
import os
import shutil
import tempfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def unpack(root: Path = FIXTURES) -> list[Path]:
    """Decompress every ``*.sqlite.xz`` under ``root`` whose ``.sqlite`` is missing or older;
    written atomically (a temporary file renamed), so concurrent test sessions never read half a
    file. Returns the files written."""
    written = []
    for packed in sorted(root.rglob("*.sqlite.xz")):
        plain = packed.with_suffix("")
        if plain.exists() and plain.stat().st_mtime >= packed.stat().st_mtime:
            continue
        fd, tmp = tempfile.mkstemp(dir=plain.parent, prefix=f".{plain.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, lzma.open(packed, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)
            os.replace(tmp, plain)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        written.append(plain)
    return written


if __name__ == "__main__":
    for path in unpack():
        print(path)
