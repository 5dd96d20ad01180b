"""The house as docs/ARCHITECTURE.md draws it, counted from the code: rooms (modules of ``perfgate/``,
each sub-package one room until opened), arrows (imports between rooms, inside functions too), floors
(the longest chain of arrows, a cycle's rooms on one floor) and the share of imports inside functions.

    python3 scripts/house.py [ROOT] [--open]      # --open: every module a room

The counts of the architecture review (issue 31: 57 rooms, 12 floors, 211 arrows) were drawn by
another tool; compare this script's numbers with its own on another commit (a git worktree)."""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def room_of(module: str, packages: set[str], opened: bool) -> str:
    """``perfgate.gate.compare`` -> ``gate`` (closed) or ``gate.compare`` (opened)."""
    parts = module.split(".")[1:]
    if not parts:
        return "__init__"
    if not opened and parts[0] in packages:
        return parts[0]
    return ".".join(parts)


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((root / "perfgate").rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        name = ".".join(rel.parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, is_package: bool) -> tuple[list[str], int, int]:
    """The perfgate modules ``name`` imports, and its count of imports at module level and inside functions."""
    tree = ast.parse(path.read_text(), str(path))
    targets: list[str] = []
    top = inner = 0
    base = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                stem = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            mods = [stem] + [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        mods = [m for m in mods if m == "perfgate" or m.startswith("perfgate.")]
        if not mods:
            continue
        targets += mods
        inside = any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in _parents(tree, node))
        inner += inside
        top += not inside
    return targets, top, inner


def _parents(tree: ast.AST, target: ast.AST) -> list[ast.AST]:
    stack: list[tuple[ast.AST, list[ast.AST]]] = [(tree, [])]
    while stack:
        node, chain = stack.pop()
        if node is target:
            return chain
        stack += [(child, chain + [node]) for child in ast.iter_child_nodes(node)]
    return []


def floors(rooms: set[str], arrows: set[tuple[str, str]]) -> int:
    """Floors: the longest path in the graph of strongly connected components (one floor per component)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    comp: dict[str, int] = {}
    stack: list[str] = []
    out = {r: sorted(b for a, b in arrows if a == r) for r in rooms}
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        for w in out[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w not in comp and w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                comp[w] = index[v]
                if w == v:
                    break

    for r in sorted(rooms):
        if r not in index:
            visit(r)
    edges = {(comp[a], comp[b]) for a, b in arrows if comp[a] != comp[b]}
    height: dict[int, int] = {}

    def up(c: int) -> int:
        if c not in height:
            height[c] = 1 + max((up(b) for a, b in edges if a == c), default=0)
        return height[c]

    return max((up(c) for c in set(comp.values())), default=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--open", action="store_true", help="every module a room (sub-packages opened)")
    args = parser.parse_args(argv)
    found = modules(args.root)
    packages = {n.split(".")[1] for n, p in found.items() if p.name == "__init__.py" and n.count(".") == 1}
    rooms = {room_of(n, packages, args.open) for n in found}
    arrows: set[tuple[str, str]] = set()
    top = inner = 0
    for name, path in found.items():
        targets, t, i = imports(name, path, path.name == "__init__.py")
        top, inner = top + t, inner + i
        here = room_of(name, packages, args.open)
        for target in targets:
            while target not in found and "." in target:   # perfgate.x.name -> perfgate.x
                target = target.rsplit(".", 1)[0]
            there = room_of(target, packages, args.open)
            if there != here and there in rooms:
                arrows.add((here, there))
    print(f"{args.root}: {len(found)} modules, {len(rooms)} rooms ({'opened' if args.open else 'sub-packages closed'}), "
          f"{len(arrows)} arrows, {floors(rooms, arrows)} floors; imports of perfgate inside functions "
          f"{inner} of {top + inner} ({100 * inner / max(top + inner, 1):.0f} %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
