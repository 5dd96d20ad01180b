"""Long names (CUDA kernels, template instantiations) made short for a table or a sentence, without
making two different names look the same: a name over ``width`` characters keeps its beginning and
its end around ``…`` (kernel variants differ at the end: tile shapes, template arguments), and names
that would still read the same are shown whole."""
from __future__ import annotations

from collections.abc import Iterable

ELLIPSIS = "…"
WIDTH = 60


def cut(name: str, width: int = WIDTH) -> str:
    """``name`` itself when it fits in ``width``, else its start, ``…`` and its last third."""
    if len(name) <= width:
        return name
    tail = width // 3
    return name[: width - tail - 1] + ELLIPSIS + name[-tail:]


def shortened(names: Iterable[str], width: int = WIDTH) -> dict[str, str]:
    """Each distinct name -> its short form; distinct names keep distinct short forms."""
    unique = list(dict.fromkeys(names))
    short = {name: cut(name, width) for name in unique}
    seen: dict[str, list[str]] = {}
    for name, text in short.items():
        seen.setdefault(text, []).append(name)
    for group in seen.values():
        if len(group) > 1:            # still alike once cut: the whole names tell them apart
            for name in group:
                short[name] = name
    return short
