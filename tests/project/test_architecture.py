"""The import graph of perfgate/ against the layers docs/ARCHITECTURE.md describes.

The graph is read with ``ast`` (no import runs): every ``import``/``from ... import`` of a perfgate
module, at module level or inside a function. Importing ``a.b.c`` from outside the package
``a.b`` also runs ``a/b/__init__.py``, so it is an edge to ``a.b`` too. Imports under
``if TYPE_CHECKING:`` never run: they count for the layering, not as cycles.

The layers are read from the ``## Layers`` block of docs/ARCHITECTURE.md, so the document and
the code cannot drift apart: a module may import its own layer and the layers below it.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from layout import REPO

PACKAGE = REPO / "perfgate"
ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"

#: Third-party imports only some units may make (the rest of perfgate never imports them).
RESTRICTED = {"pytest": {"plugin"}, "_pytest": set()}


@dataclass(frozen=True)
class Edge:
    source: str            # importing module, e.g. "perfgate.cli"
    target: str            # imported perfgate module, e.g. "perfgate.pipeline.workload_run"
    line: int
    runtime: bool          # False under ``if TYPE_CHECKING:``


def module_names(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``package``."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                for sub in ast.walk(child):
                    if hasattr(sub, "lineno"):
                        lines.add(sub.lineno)
    return lines


def imports_of(module: str, source: str, known: Iterable[str], *, is_package: bool = False,
               root: str = "perfgate") -> tuple[list[Edge], list[tuple[str, int]]]:
    """The perfgate edges of one module's source and its other (top-level name, line) imports."""
    known = set(known)
    tree = ast.parse(source)
    typing_only = _type_checking_lines(tree)
    package = module if is_package else module.rpartition(".")[0]
    targets: list[tuple[str, int]] = []
    external: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets.append((alias.name, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            submodules = [f"{name}.{a.name}" for a in node.names if f"{name}.{a.name}" in known]
            if len(submodules) < len(node.names):  # a name defined by ``name`` itself
                targets.append((name, node.lineno))
            targets += [(sub, node.lineno) for sub in submodules]  # ``from perfgate.analysis import intervals``
    edges: list[Edge] = []
    for name, line in targets:
        if name != root and not name.startswith(root + "."):
            external.append((name.split(".")[0], line))
            continue
        while name not in known and "." in name:  # ``import perfgate.x.attr`` -> perfgate.x
            name = name.rpartition(".")[0]
        runtime = line not in typing_only
        # importing a.b.c runs the __init__ of every package on the way that we are not inside
        parts = name.split(".")
        for k in range(2, len(parts) + 1):
            target = ".".join(parts[:k])
            inside = module == target or module.startswith(target + ".")
            if target in known and target != module and (k == len(parts) or not inside):
                edges.append(Edge(module, target, line, runtime))
    return edges, external


def import_graph(package: Path = PACKAGE) -> tuple[list[Edge], dict[str, list[tuple[str, int]]]]:
    modules = module_names(package)
    edges: list[Edge] = []
    external: dict[str, list[tuple[str, int]]] = {}
    for name, path in modules.items():
        found, other = imports_of(name, path.read_text(encoding="utf-8"), modules,
                                  is_package=path.name == "__init__.py", root=package.name)
        edges += found
        external[name] = other
    return edges, external


def find_cycle(edges: Iterable[Edge], *, type_only_too: bool = False) -> list[str] | None:
    """One import cycle among the runtime edges (``[a, b, a]``; with ``type_only_too``, the
    imports under ``if TYPE_CHECKING:`` as well), or None."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.runtime or type_only_too:
            graph.setdefault(e.source, set()).add(e.target)
    state: dict[str, int] = {}   # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def unit(module: str) -> str:
    """What the layers name: a top-level module or a subpackage (``perfgate.report.digest`` ->
    ``report``); the package itself is ``perfgate``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layers_from(text: str) -> dict[str, int]:
    """``## Layers`` of ARCHITECTURE.md: a code block, highest layer first, one per line as
    ``<layer name>: <unit> <unit> ...``. Returns unit -> rank (0 = lowest)."""
    section = text.split("## Layers", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None, "ARCHITECTURE.md: ## Layers has no code block"
    rows = [line.split(":", 1)[1].split() for line in block.group(1).splitlines() if ":" in line]
    ranks: dict[str, int] = {}
    for rank, units in enumerate(reversed(rows)):
        for name in (u.removesuffix("/").removesuffix(".py") for u in units):
            assert name not in ranks, f"ARCHITECTURE.md ## Layers: {name} is in two layers"
            ranks[name] = rank
    return ranks


def violations(edges: Iterable[Edge], ranks: Mapping[str, int]) -> list[str]:
    """Every edge from a unit to a unit of a higher layer, as ``source:line imports target``."""
    out = []
    for e in edges:
        s, t = unit(e.source), unit(e.target)
        if s != t and s in ranks and t in ranks and ranks[t] > ranks[s]:  # unknown: test_every_module_is_in_a_layer
            out.append(f"{e.source}:{e.line} imports {e.target} ({s} may not import {t}: a higher layer)")
    return out


# --------------------------------------------------------------------------- perfgate itself


@pytest.fixture(scope="module")
def graph() -> tuple[list[Edge], dict[str, list[tuple[str, int]]]]:
    return import_graph()


@pytest.fixture(scope="module")
def ranks() -> dict[str, int]:
    return layers_from(ARCHITECTURE.read_text(encoding="utf-8"))


def test_perfgate_has_no_import_cycle(graph: tuple[list[Edge], dict]) -> None:
    assert find_cycle(graph[0]) is None, " -> ".join(find_cycle(graph[0]) or [])


def test_perfgate_has_no_import_cycle_even_of_type_only_imports(graph: tuple[list[Edge], dict]) -> None:
    """A cycle through ``if TYPE_CHECKING:`` runs at no import, but two modules that need each
    other's names are one module in two files (autostep's hooks and its Installation; history
    and its change points had one each)."""
    found = find_cycle(graph[0], type_only_too=True)
    assert found is None, " -> ".join(found or [])


#: Imports the layers allow that the stages' design does not (docs/ARCHITECTURE.md, the review of
#: 2026-11-28): a renderer does not reach into the capture stage, the settings do not ask the
#: machine, the decision reads no analysis (the baselines, which keep the analysis's records, are a
#: stage of their own), the pipeline makes records and renders none (the command writes result.json).
NEVER = [("report", "capture"), ("settings", "system"), ("gate", "analysis"), ("pipeline", "report")]


def test_the_stages_never_import_what_their_design_rules_out(graph: tuple[list[Edge], dict]) -> None:
    found = [f"{e.source}:{e.line} imports {e.target}" for e in graph[0]
             for source, target in NEVER if unit(e.source) == source and unit(e.target) == target]
    assert found == []


def test_every_module_is_in_a_layer(ranks: dict[str, int]) -> None:
    missing = sorted({unit(m) for m in module_names(PACKAGE)} - set(ranks))
    stale = sorted(set(ranks) - {unit(m) for m in module_names(PACKAGE)})
    assert not missing, f"not in ARCHITECTURE.md ## Layers: {missing}"
    assert not stale, f"ARCHITECTURE.md ## Layers names what perfgate/ does not have: {stale}"


def test_no_import_against_the_layers(graph: tuple[list[Edge], dict], ranks: dict[str, int]) -> None:
    assert violations(graph[0], ranks) == []


def test_third_party_imports_stay_where_they_belong(graph: tuple[list[Edge], dict]) -> None:
    bad = [f"{module}:{line} imports {name}" for module, found in graph[1].items() for name, line in found
           if name in RESTRICTED and unit(module) not in RESTRICTED[name]]
    assert bad == []


def test_the_leaf_records_import_nothing_of_perfgate(graph: tuple[list[Edge], dict]) -> None:
    """errors and the records beside the model (ranks, steps, facts, notes, launch, staleness,
    noise, diagnosis, confirmation, machine_state, launch_checks, resources) import nothing of perfgate, but
    launch the machine state, the checks, the resources and the diagnosis it holds; records.version (the record version) only errors; records.model only those
    records and the version."""
    leaves = ("ranks", "steps", "facts", "notes", "launch", "staleness", "noise", "diagnosis", "confirmation",
              "machine_state", "launch_checks", "resources", "fields")
    allowed = {"perfgate.errors": set(), **{f"perfgate.records.{leaf}": {"perfgate.records"} for leaf in leaves},
               "perfgate.records.version": {"perfgate.records", "perfgate.errors"},
               "perfgate.records.model": {"perfgate.records", "perfgate.records.version",
                                          *(f"perfgate.records.{leaf}" for leaf in leaves)}}
    for leaf in ("machine_state", "launch_checks", "resources"):   # they read themselves back through records.fields
        allowed[f"perfgate.records.{leaf}"].add("perfgate.records.fields")
    allowed["perfgate.records.launch"] |= {"perfgate.records.machine_state", "perfgate.records.launch_checks",
                                           "perfgate.records.diagnosis", "perfgate.records.resources"}
    assert set(allowed) <= set(module_names(PACKAGE))
    assert [e for e in graph[0] if e.source in allowed and e.target not in allowed[e.source]] == []


# --------------------------------------------------------------------------- the checks check


KNOWN = ["perfgate", "perfgate.model", "perfgate.cli", "perfgate.report", "perfgate.report.digest",
         "perfgate.github", "perfgate.compare"]


def test_a_function_level_import_is_an_edge() -> None:
    source = "def f():\n    from perfgate.cli import main\n    return main\n"
    edges, _ = imports_of("perfgate.compare", source, KNOWN)
    assert [(e.target, e.line, e.runtime) for e in edges] == [("perfgate.cli", 2, True)]


def test_a_submodule_import_runs_the_package_init_unless_inside_it() -> None:
    outside, _ = imports_of("perfgate.github", "from perfgate.report.digest import one_line\n", KNOWN)
    inside, _ = imports_of("perfgate.report.digest", "from perfgate.report import x\n", KNOWN)
    sibling, _ = imports_of("perfgate.report.x", "from perfgate.report import digest\n", KNOWN)
    assert {e.target for e in sibling} == {"perfgate.report.digest"}
    relative, _ = imports_of("perfgate.report", "from .digest import one_line\n", KNOWN, is_package=True)
    assert {e.target for e in outside} == {"perfgate.report", "perfgate.report.digest"}
    assert {e.target for e in inside} == {"perfgate.report"}
    assert {e.target for e in relative} == {"perfgate.report.digest"}


def test_a_type_checking_import_is_no_cycle_but_still_layered() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from perfgate.cli import main\n"
    edges, external = imports_of("perfgate.model", source, KNOWN)
    assert [(e.target, e.runtime) for e in edges] == [("perfgate.cli", False)]
    assert external == [("typing", 1)]
    assert find_cycle([*edges, Edge("perfgate.cli", "perfgate.model", 1, True)]) is None
    assert find_cycle([*edges, Edge("perfgate.cli", "perfgate.model", 1, True)], type_only_too=True) == [
        "perfgate.cli", "perfgate.model", "perfgate.cli"]
    assert violations(edges, {"model": 0, "cli": 1}) != []


def test_a_cycle_is_found() -> None:
    edges = [Edge("perfgate.a", "perfgate.b", 1, True), Edge("perfgate.b", "perfgate.c", 1, True),
             Edge("perfgate.c", "perfgate.a", 1, True), Edge("perfgate.c", "perfgate.d", 1, True)]
    assert find_cycle(edges) == ["perfgate.a", "perfgate.b", "perfgate.c", "perfgate.a"]
    assert find_cycle(edges[:2]) is None


def test_an_import_of_a_higher_layer_is_a_violation() -> None:
    ranks = layers_from("## Layers\n\n```\nfront ends: cli\nstages: compare report/\nrecords: model\n```\n")
    assert ranks == {"cli": 2, "compare": 1, "report": 1, "model": 0}
    edges, _ = imports_of("perfgate.compare", "import perfgate.model\nfrom perfgate import cli\n", KNOWN)
    assert violations(edges, ranks) == [
        "perfgate.compare:2 imports perfgate.cli (compare may not import cli: a higher layer)"]
    same_layer, _ = imports_of("perfgate.compare", "from perfgate.report.digest import x\n", KNOWN)
    assert violations(same_layer, ranks) == []


def test_adding_a_forbidden_import_to_perfgate_fails(graph: tuple[list[Edge], dict], ranks: dict[str, int]) -> None:
    """What the layering test would say if records/model.py imported the pipeline."""
    added, _ = imports_of("perfgate.records.model",
                          "def f():\n    from perfgate.pipeline.workload_run import run_workload\n",
                          module_names(PACKAGE))
    assert violations([*graph[0], *added], ranks) == [
        "perfgate.records.model:2 imports perfgate.pipeline (records may not import pipeline: a higher layer)",
        "perfgate.records.model:2 imports perfgate.pipeline.workload_run "
        "(records may not import pipeline: a higher layer)"]
    assert find_cycle([*graph[0], *added]) is not None


MAX_MODULE_LINES = 400


def test_no_module_is_over_400_lines() -> None:
    """Small modules whose names say what they hold (issue 15): a module past 400 lines holds two
    things; split it where its meanings part."""
    long = {str(p.relative_to(REPO)): n for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


# --------------------------------------------------------------------------- one house, one home per name

#: The modules that stand at the top of perfgate/: the package, ``python -m perfgate``, the entry
#: points pyproject.toml names (the ``perfgate`` command, the pytest plugin), what workloads import
#: (``perfgate.nvtx``) and the errors every stage raises. Everything else lives in a stage's folder.
TOP_LEVEL = {"perfgate", "perfgate.__main__", "perfgate.cli", "perfgate.plugin", "perfgate.nvtx", "perfgate.errors"}


def test_the_top_level_holds_the_entry_points_and_the_stages_as_folders(ranks: dict[str, int]) -> None:
    modules = module_names(PACKAGE)
    loose = sorted(m for m, path in modules.items() if path.parent == PACKAGE and m not in TOP_LEVEL)
    assert loose == [], f"modules outside a folder of perfgate/: {loose}"
    block = ARCHITECTURE.read_text(encoding="utf-8").split("## Layers", 1)[1]
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert {f for f in folders if f"{f}/" not in block} == set(), "a folder the ## Layers block names without '/'"


def _bindings(tree: ast.Module) -> set[str]:
    """The names a module's own top-level statements define (functions, classes, assignments)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node in tree.body:
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return out


def reexports(module: str, source: str, known: Iterable[str]) -> list[str]:
    """Names a module passes on rather than uses: a name of ``__all__`` it does not define, a
    perfgate name it imports and never uses, a module ``__getattr__`` (names loaded from elsewhere)."""
    tree = ast.parse(source)
    known = set(known)
    out = []
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)]
            all_nodes = set(map(id, ast.walk(node)))
            break
    else:
        all_nodes = set()
    defined = _bindings(tree)
    out += [f"{module}: __all__ names {name}, defined elsewhere" for name in exported if name not in defined]
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in all_nodes}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perfgate") and not node.level:
            for alias in node.names:
                local = alias.asname or alias.name
                if local not in used and f"{node.module}.{alias.name}" not in known:
                    out.append(f"{module}:{node.lineno} imports {local} and never uses it")
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__" and node in tree.body:
            out.append(f"{module}:{node.lineno} loads names from elsewhere (__getattr__)")
    return out


def test_no_module_passes_on_a_name_from_elsewhere() -> None:
    """One home per name: a name is imported from the module that defines it, never from one that
    imported it too (no re-exports, no lazy ``__getattr__`` fronts)."""
    modules = module_names(PACKAGE)
    found = [line for name, path in modules.items()
             for line in reexports(name, path.read_text(encoding="utf-8"), modules)]
    assert found == []


def test_a_reexport_is_found() -> None:
    source = ("from perfgate.gate.wording import describe, fmt_value\n__all__ = ['fmt_value', 'one_line']\n"
              "def one_line():\n    return fmt_value(1)\n")
    assert reexports("perfgate.report.digest", source, KNOWN) == [
        "perfgate.report.digest: __all__ names fmt_value, defined elsewhere",
        "perfgate.report.digest:1 imports describe and never uses it"]
    lazy = "def __getattr__(name):\n    return name\n"
    assert reexports("perfgate.report", lazy, KNOWN) == ["perfgate.report:1 loads names from elsewhere (__getattr__)"]


def borrowed_names(sources: Mapping[str, str]) -> list[str]:
    """Names imported from a perfgate module that does not define them (it imported them itself):
    the other half of a re-export, seen from the module that takes the name."""
    defined = {module: _bindings(ast.parse(source)) for module, source in sources.items()}
    out = []
    for module, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module in defined and not node.level:
                out += [f"{module}:{node.lineno} imports {a.name} from {node.module}, which does not define it"
                        for a in node.names if f"{node.module}.{a.name}" not in defined
                        and a.name not in defined[node.module]]
    return out


def test_every_name_is_imported_from_its_home() -> None:
    sources = {name: path.read_text(encoding="utf-8") for name, path in module_names(PACKAGE).items()}
    assert borrowed_names(sources) == []


def test_a_borrowed_name_is_found() -> None:
    sources = {"perfgate.records.noise": "NOISE_METRIC = 'step_time_ms'\n",
               "perfgate.gate.sequential_looks": "from perfgate.records.noise import NOISE_METRIC\nX = NOISE_METRIC\n",
               "perfgate.baselines.store": "from perfgate.gate.sequential_looks import NOISE_METRIC, X\n"}
    assert borrowed_names(sources) == [
        "perfgate.baselines.store:1 imports NOISE_METRIC from perfgate.gate.sequential_looks, which does not define it"]


def private_imports(module: str, source: str, known: Iterable[str]) -> list[str]:
    """Imports of another module's private names (``from perfgate.x import _helper``), uses of
    them through the module (``statistics._helper``, ``perfgate.x._helper``), or imports of a
    private module (``perfgate.system._x``) from outside its own folder."""
    known = set(known)
    out = []
    tree = ast.parse(source)
    modules = {a.asname or a.name: f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
               for a in n.names if f"{n.module}.{a.name}" in known}      # ``from perfgate.gate import statistics``
    modules |= {a.asname: a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names if a.asname and a.name in known}       # ``import perfgate.x as x``
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("perfgate") and not node.level:
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else None for a in node.names]
            for alias, submodule in zip(node.names, targets):
                if submodule is None and alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
            names = [t for t in targets if t] + [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("perfgate")]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            owner = ast.unparse(node.value)
            alias = modules.get(owner, owner)
            if alias.startswith("perfgate") and alias != module:
                out.append(f"{module}:{node.lineno} uses {alias}.{node.attr}")
            continue
        else:
            continue
        for name in names:
            parts = name.split(".")
            for k, part in enumerate(parts):
                folder = ".".join(parts[:k])
                if part.startswith("_") and not part.startswith("__") and not module.startswith(folder + "."):
                    out.append(f"{module}:{node.lineno} imports the private module {name}")
    return out


def test_no_module_imports_another_modules_private_names() -> None:
    modules = module_names(PACKAGE)
    found = [line for name, path in modules.items()
             for line in private_imports(name, path.read_text(encoding="utf-8"), modules)]
    assert found == []


def test_a_private_import_is_found() -> None:
    known = [*KNOWN, "perfgate.integrations._ranges"]
    assert private_imports("perfgate.cli", "from perfgate.compare import _checked, fine\n", known) == [
        "perfgate.cli:1 imports perfgate.compare._checked"]
    assert private_imports("perfgate.cli", "from perfgate.integrations._ranges import r\n", known) == [
        "perfgate.cli:1 imports the private module perfgate.integrations._ranges"]
    assert private_imports("perfgate.integrations.hf", "from perfgate.integrations._ranges import r\n", known) == []
    through = "from perfgate import compare\nimport perfgate.cli as c\ncompare._checked(c._main, x._own)\n"
    assert sorted(private_imports("perfgate.github", through, known)) == [
        "perfgate.github:3 uses perfgate.cli._main", "perfgate.github:3 uses perfgate.compare._checked"]


#: Public names that more than one module defines, each meaning its own module's thing by a
#: protocol: the command modules' ``add_parser``, a program's ``main``, one callback per framework.
#: Any other name has one home (``parse_tolerances`` had two, one of them checking less;
#: ``summarize`` and ``overlap_length`` were two copies of one computation).
SHARED_NAMES = {"add_parser", "main", "PerfgateCallback"}


def same_names(sources: Mapping[str, str]) -> dict[str, list[str]]:
    """Public top-level function and class names defined by more than one module."""
    homes: dict[str, list[str]] = {}
    for module, source in sources.items():
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(module)
    return {name: found for name, found in homes.items() if len(found) > 1}


def test_one_function_of_one_name() -> None:
    sources = {name: path.read_text(encoding="utf-8") for name, path in module_names(PACKAGE).items()}
    twice = same_names(sources)
    assert {name: found for name, found in twice.items() if name not in SHARED_NAMES} == {}
    assert set(SHARED_NAMES) <= set(twice), "SHARED_NAMES lists a name that now has one home"


def test_two_functions_of_one_name_are_found() -> None:
    sources = {"perfgate.gate.metric_specs": "def parse_tolerances(v):\n    return v\n",
               "perfgate.settings.pyproject": "def parse_tolerances(t, where):\n    return t\n"}
    assert same_names(sources) == {"parse_tolerances": ["perfgate.gate.metric_specs", "perfgate.settings.pyproject"]}
